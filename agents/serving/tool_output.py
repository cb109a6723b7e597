"""A model's reply to OpenAI `tool_calls`: which tool-call format it wrote, and what it called.

`skyrl serve` parses a reply only when the request offered `tools` (and `tool_choice` is not
`none`). Three formats are recognised, as models are trained on them:

- Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, with text
  around them (`skyrl_sdk.tools.formats.HermesFormat`);
- Mistral: `[TOOL_CALLS]` followed by a JSON list of `{"name", "arguments"}`;
- Llama 3 JSON: the whole reply is one `{"name": ..., "parameters": {...}}` object (optionally
  after `<|python_tag|>`), or several separated by `;`.

Each is parsed by its `ToolFormat` (`skyrl_sdk.tools.formats`: `HermesFormat`,
`MistralFormat`, `Llama3JSONFormat`); this module only picks which one a reply uses. A reply
that looks like a call but does not parse is returned as plain content with the
`ParseError` kept for the capture: a malformed call is the model's mistake, never a 500.
"""

from __future__ import annotations

import enum
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from skyrl_sdk.tools.calls import ParseError, ToolCall
from skyrl_sdk.tools.formats import HermesFormat, Llama3JSONFormat, MistralFormat, ToolFormat


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


_PARSERS: dict[ToolOutputFormat, ToolFormat] = {
    ToolOutputFormat.HERMES: HermesFormat(),
    ToolOutputFormat.MISTRAL: MistralFormat(),
    ToolOutputFormat.LLAMA3: Llama3JSONFormat(),
}
"""The tool format that parses each output format (the values' `name`s match the keys')."""

MARKERS = (HermesFormat.OPEN, MistralFormat.MARK, Llama3JSONFormat.PYTHON_TAG)
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
    if MistralFormat.MARK in text:
        return ToolOutputFormat.MISTRAL
    stripped = text.lstrip()
    if stripped.startswith(Llama3JSONFormat.PYTHON_TAG) or (
        stripped.startswith("{") and '"name"' in stripped
    ):
        return ToolOutputFormat.LLAMA3
    return None


def parse(text: str, fmt: ToolOutputFormat = ToolOutputFormat.AUTO) -> ToolOutput:
    """Split `text` into content and calls (never raises)."""
    found = detect(text) if fmt is ToolOutputFormat.AUTO else fmt
    if found is None:
        return ToolOutput(text)
    action = _PARSERS[found].parse(text)
    if action.error is not None:
        return ToolOutput(text, (), action.error)
    if not action.tool_calls:
        return ToolOutput(text)
    calls = tuple(action.tool_calls)
    ids = tuple(f"call_{uuid.uuid4().hex[:24]}" for _ in calls)
    return ToolOutput(action.content, calls, None, ids)
