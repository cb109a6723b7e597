"""A model's reply to OpenAI `tool_calls`: which tool-call format it wrote, and what it called.

`skyrl serve` parses a reply only when the request offered `tools` (and `tool_choice` is not
`none`). Three formats are recognised, as models are trained on them:

- Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, with text
  around them (`skyrl_sdk.tools.formats.HermesFormat`);
- Mistral: `[TOOL_CALLS]` followed by a JSON list of `{"name", "arguments"}`;
- Llama 3 JSON: the whole reply is one `{"name": ..., "parameters": {...}}` object (optionally
  after `<|python_tag|>`), or several separated by `;`.

A reply that looks like a call but does not parse is returned as plain content with the
`ParseError` kept for the capture: a malformed call is the model's mistake, never a 500.
"""

from __future__ import annotations

import enum
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from skyrl_sdk.tools.calls import ParsedAction, ParseError, ParseErrorKind, ToolCall
from skyrl_sdk.tools.formats import HermesFormat


class ToolOutputFormat(enum.Enum):
    """The tool-call formats a served model may write."""

    AUTO = "auto"
    """Recognise whichever of the others the reply uses."""
    HERMES = "hermes"
    """`<tool_call>{json}</tool_call>` (Hermes, Qwen)."""
    MISTRAL = "mistral"
    """`[TOOL_CALLS] [{json}, ...]`."""
    LLAMA3 = "llama3"
    """The reply is a `{"name", "parameters"}` JSON object (Llama 3.x)."""


MISTRAL_MARK = "[TOOL_CALLS]"
PYTHON_TAG = "<|python_tag|>"
MARKERS = (HermesFormat.OPEN, MISTRAL_MARK, PYTHON_TAG)
"""Text that begins a tool call somewhere in a reply."""


@dataclass(frozen=True)
class ToolOutput:
    """A reply split into content and tool calls."""

    content: str
    """The text outside the calls (the whole text when there are none)."""
    calls: tuple[ToolCall, ...] = ()
    """The calls, in order."""
    error: ParseError | None = None
    """Set when the reply tried to call a tool and failed; `content` is then the whole text."""
    ids: tuple[str, ...] = field(default=())
    """One OpenAI call id per call."""

    def openai_calls(self) -> list[dict[str, Any]]:
        """`tool_calls` as the OpenAI API writes them (arguments as a JSON string)."""
        return [
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": json.dumps(c.arguments, ensure_ascii=False),
                },
            }
            for c, call_id in zip(self.calls, self.ids, strict=True)
        ]


def detect(text: str) -> ToolOutputFormat | None:
    """The format a reply's text is written in, or None when it makes no call."""
    if HermesFormat.OPEN in text:
        return ToolOutputFormat.HERMES
    if MISTRAL_MARK in text:
        return ToolOutputFormat.MISTRAL
    stripped = text.lstrip()
    if stripped.startswith(PYTHON_TAG) or (stripped.startswith("{") and '"name"' in stripped):
        return ToolOutputFormat.LLAMA3
    return None


def parse(text: str, fmt: ToolOutputFormat = ToolOutputFormat.AUTO) -> ToolOutput:
    """Split `text` into content and calls (never raises)."""
    found = detect(text) if fmt is ToolOutputFormat.AUTO else fmt
    if found is None:
        return ToolOutput(text)
    if found is ToolOutputFormat.HERMES:
        action = HermesFormat().parse(text)
    elif found is ToolOutputFormat.MISTRAL:
        action = _parse_mistral(text)
    else:
        action = _parse_llama3(text)
    if action.error is not None:
        return ToolOutput(text, (), action.error)
    if not action.tool_calls:
        return ToolOutput(text)
    calls = tuple(action.tool_calls)
    ids = tuple(f"call_{uuid.uuid4().hex[:24]}" for _ in calls)
    return ToolOutput(action.content, calls, None, ids)


def _call(obj: Any, arguments_keys: tuple[str, ...]) -> ToolCall | ParseError:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return ParseError(
            ParseErrorKind.BAD_CALL_SHAPE,
            'a tool call must be a JSON object {"name": "<tool>", "arguments": {...}}',
        )
    arguments: Any = {}
    for key in arguments_keys:
        if key in obj:
            arguments = obj[key]
            break
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (json.JSONDecodeError, RecursionError):
            return ParseError(
                ParseErrorKind.INVALID_JSON, f"the arguments of {obj['name']!r} are not JSON"
            )
    if not isinstance(arguments, dict):
        return ParseError(
            ParseErrorKind.BAD_CALL_SHAPE, f"the arguments of {obj['name']!r} must be an object"
        )
    return ToolCall(obj["name"], arguments)


def _loads(body: str, what: str) -> Any | ParseError:
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        return ParseError(
            ParseErrorKind.INVALID_JSON,
            f"{what} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}",
        )
    except RecursionError:
        return ParseError(ParseErrorKind.INVALID_JSON, f"{what} is nested too deeply")


def _parse_mistral(text: str) -> ParsedAction:
    head, _, body = text.partition(MISTRAL_MARK)
    data = _loads(body.strip(), f"the list after {MISTRAL_MARK}")
    if isinstance(data, ParseError):
        return ParsedAction(head.strip(), [], data)
    items = data if isinstance(data, list) else [data]
    calls: list[ToolCall] = []
    for item in items:
        call = _call(item, ("arguments", "parameters"))
        if isinstance(call, ParseError):
            return ParsedAction(head.strip(), calls, call)
        calls.append(call)
    return ParsedAction(head.strip(), calls)


def _parse_llama3(text: str) -> ParsedAction:
    body = text.strip().removeprefix(PYTHON_TAG).strip()
    calls: list[ToolCall] = []
    decoder = json.JSONDecoder()
    pos = 0
    while pos < len(body):
        try:
            obj, end = decoder.raw_decode(body, pos)
        except json.JSONDecodeError as e:
            error = ParseError(
                ParseErrorKind.INVALID_JSON, f"the tool call is not valid JSON: {e.msg}"
            )
            return ParsedAction("", calls, error)
        except RecursionError:
            return ParsedAction(
                "", calls, ParseError(ParseErrorKind.INVALID_JSON, "the call is nested too deeply")
            )
        call = _call(obj, ("parameters", "arguments"))
        if isinstance(call, ParseError):
            return ParsedAction("", calls, call)
        calls.append(call)
        pos = end
        while pos < len(body) and body[pos] in " \t\r\n;":
            pos += 1
    return ParsedAction("", calls)
