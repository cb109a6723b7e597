"""Tool-call formats: parse model text into `ToolCall`s (or a `ParseError`), render results.

These formats cover what models are trained on:
- `XMLTagFormat`: one tag per tool, the body is the single argument (`<sql>SELECT 1</sql>`),
  as in SkyRL-SQL and Search-R1; a tool with several arguments (or none) takes each as a
  child tag (`<move><x>3</x><y>4</y></move>`).
- `HermesFormat`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes, Qwen).
- `MistralFormat`: `[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]` (Mistral).
- `Llama3JSONFormat`: the reply is `{"name": ..., "parameters": {...}}`, optionally after
  `<|python_tag|>`, several separated by `;` (Llama 3.x JSON tool calling).
- `OpenAIFormat`: the assistant message's `tool_calls` list, serialized as JSON.

`PatternFormat` covers envs whose calls are written in the model's own words (`lookup(apple)`,
`ANSWER: 42`): one bounded regex per tool, instead of a regex hidden in the env's `step`.

All parsers scan linearly (no backtracking regexes), so a 1 MB reply parses in milliseconds.
"""

from __future__ import annotations

import abc
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from skyrl_sdk.tools.calls import ParsedAction, ParseError, ParseErrorKind, ToolCall, ToolResult
from skyrl_sdk.tools.core import Tool
from skyrl_sdk.tools.messages import Message, Role

_EXCERPT = 80


def _excerpt(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


class ToolFormat(abc.ABC):
    """How tool calls appear in model text, and how their results are shown back."""

    name: ClassVar[str]

    @abc.abstractmethod
    def parse(self, text: str) -> ParsedAction:
        """Extract tool calls from an assistant reply. Never raises on malformed text."""

    @abc.abstractmethod
    def render_call(self, call: ToolCall) -> str:
        """The text a model writes to make `call` (inverse of `parse`)."""

    @abc.abstractmethod
    def render_result(self, result: ToolResult) -> Message:
        """The message that shows a tool's result to the model."""

    @abc.abstractmethod
    def instructions(self, tools: Sequence[Tool]) -> str:
        """System-prompt text telling the model which tools exist and how to call them."""

    def error_message(self, error: ParseError) -> Message:
        """The observation that tells the model its reply was malformed."""
        return {"role": "user", "content": f"Your reply could not be parsed: {error.message}"}


_TAG_NAME = re.compile(r"[A-Za-z_][\w-]*")


class XMLTagFormat(ToolFormat):
    """`<tag>body</tag>`: each tag is a tool.

    `tags` maps the tag of a one-argument tool to the argument its body fills, e.g.
    `{"sql": "query"}`. `nested` maps the tag of a tool with any other number of arguments
    to `{argument: JSON-schema type}`; each argument is a child tag of the call
    (`<move><x>3</x><y>4</y></move>`), its text read as the type says (`3` for an integer,
    JSON for arrays and objects; text that does not parse stays text, and the tool's schema
    check reports it). `strip=False` keeps a body's surrounding whitespace (SkyRL-SQL's own
    parsing does).
    """

    name = "xml"

    def __init__(
        self,
        tags: Mapping[str, str],
        result_tag: str = "observation",
        *,
        strip: bool = True,
        nested: Mapping[str, Mapping[str, str]] | None = None,
    ):
        nested = {k: dict(v) for k, v in (nested or {}).items()}
        if not tags and not nested:
            raise ValueError("XMLTagFormat needs at least one tag")
        for tag in [*tags, *nested, *(a for args in nested.values() for a in args)]:
            if not _TAG_NAME.fullmatch(tag):
                raise ValueError(f"invalid tag name {tag!r}")
        self.tags = dict(tags)
        self.nested = nested
        """Tags of tools whose arguments are child tags: `{tag: {argument: type}}`."""
        self.result_tag = result_tag
        self.strip = strip
        names = [*self.tags, *self.nested]
        self._open = re.compile("<(" + "|".join(map(re.escape, names)) + ")>")

    @classmethod
    def for_tools(cls, tools: Sequence[Tool], result_tag: str = "observation") -> XMLTagFormat:
        """One tag per tool, named after it: a one-argument tool's body is its argument, the
        arguments of any other tool are child tags."""
        tags: dict[str, str] = {}
        nested: dict[str, dict[str, str]] = {}
        for t in tools:
            props = t.parameters.get("properties", {})
            if len(props) == 1:
                tags[t.name] = next(iter(props))
            else:
                nested[t.name] = {k: str(v.get("type", "string")) for k, v in props.items()}
        return cls(tags, result_tag, nested=nested)

    def _child_arguments(self, tag: str, body: str) -> dict[str, object]:
        """The arguments written as child tags in a nested call's body."""
        arguments: dict[str, object] = {}
        for arg, kind in self.nested[tag].items():
            start = body.find(f"<{arg}>")
            if start < 0:
                continue  # a missing argument is the schema check's to report
            start += len(arg) + 2
            end = body.find(f"</{arg}>", start)
            if end < 0:
                continue
            text = body[start:end].strip() if self.strip else body[start:end]
            arguments[arg] = _typed(text, kind)
        return arguments

    def parse(self, text: str) -> ParsedAction:
        calls: list[ToolCall] = []
        outside: list[str] = []
        pos = 0
        while (match := self._open.search(text, pos)) is not None:
            tag = match.group(1)
            close = f"</{tag}>"
            end = text.find(close, match.end())
            outside.append(text[pos : match.start()])
            if end < 0:
                error = ParseError(
                    ParseErrorKind.UNCLOSED_TAG,
                    f"<{tag}> is never closed; write <{tag}>...</{tag}> "
                    f"(found: {_excerpt(text[match.start() :])!r})",
                )
                return ParsedAction("".join(outside).strip(), calls, error)
            body = text[match.end() : end]
            if tag in self.nested:
                calls.append(ToolCall(tag, self._child_arguments(tag, body)))
            else:
                calls.append(ToolCall(tag, {self.tags[tag]: body.strip() if self.strip else body}))
            pos = end + len(close)
        outside.append(text[pos:])
        return ParsedAction("".join(outside).strip(), calls)

    def render_call(self, call: ToolCall) -> str:
        if call.name in self.nested:
            children = "".join(
                f"<{k}>{v if isinstance(v, str) else json.dumps(v)}</{k}>"
                for k, v in call.arguments.items()
            )
            return f"<{call.name}>{children}</{call.name}>"
        return f"<{call.name}>{call.arguments[self.tags[call.name]]}</{call.name}>"

    def render_result(self, result: ToolResult) -> Message:
        return {
            "role": "user",
            "content": f"<{self.result_tag}>\n{result.output}\n</{self.result_tag}>",
        }

    def instructions(self, tools: Sequence[Tool]) -> str:
        lines = ["Use a tool by writing its tag with the argument inside:"]
        for t in tools:
            if t.name in self.tags:
                lines.append(f"- <{t.name}>{self.tags[t.name]}</{t.name}>: {t.description}")
            elif t.name in self.nested:
                children = "".join(f"<{a}>{a}</{a}>" for a in self.nested[t.name])
                lines.append(f"- <{t.name}>{children}</{t.name}>: {t.description}")
        lines.append(f"Results come back inside <{self.result_tag}>...</{self.result_tag}>.")
        return "\n".join(lines)


def _typed(text: str, kind: str) -> object:
    """A child tag's text as its JSON-schema type; text that does not parse stays text."""
    if kind == "string":
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    wanted = {
        "integer": int,
        "number": (int, float),
        "boolean": bool,
        "array": list,
        "object": dict,
        "null": type(None),
    }.get(kind)
    if wanted is None or isinstance(value, wanted):
        if kind in ("integer", "number") and isinstance(value, bool):
            return text  # true is no number
        return value
    return text


def _call_from_json(
    obj: object, call_id: str | None = None, keys: tuple[str, ...] = ("arguments",)
) -> ToolCall | ParseError:
    """A `ToolCall` from `{"name": str, KEY: object | JSON string}`.

    `keys`: where the arguments may be, the first present wins (Llama 3 writes `parameters`);
    none present means no arguments. The call's id is `call_id`, else the object's string `id`.
    """
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return ParseError(
            ParseErrorKind.BAD_CALL_SHAPE,
            f'a tool call must be a JSON object {{"name": "<tool>", "{keys[0]}": {{...}}}}',
        )
    key = next((k for k in keys if k in obj), keys[0])
    arguments = obj.get(key, {})
    if isinstance(arguments, str):  # some models double-encode arguments
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (json.JSONDecodeError, RecursionError) as e:
            where = (
                f"{e.msg} at position {e.pos}"
                if isinstance(e, json.JSONDecodeError)
                else "too deep"
            )
            return ParseError(
                ParseErrorKind.INVALID_JSON,
                f"the arguments of {obj['name']!r} are not valid JSON: {where}",
            )
    if not isinstance(arguments, dict):
        return ParseError(
            ParseErrorKind.BAD_CALL_SHAPE,
            f'"{key}" of {obj["name"]!r} must be a JSON object, got {type(arguments).__name__}',
        )
    if call_id is None and isinstance(obj.get("id"), str):
        call_id = obj["id"]
    return ToolCall(obj["name"], arguments, call_id)


def _json_error(e: json.JSONDecodeError | RecursionError) -> str:
    """Where a JSON document went wrong, for a `ParseError` message."""
    if isinstance(e, json.JSONDecodeError):
        return f"{e.msg} at line {e.lineno} column {e.colno}"
    return "nested too deeply"


class HermesFormat(ToolFormat):
    """`<tool_call>{"name": "sql", "arguments": {"query": "..."}}</tool_call>` (Hermes / Qwen)."""

    name = "hermes"
    OPEN, CLOSE = "<tool_call>", "</tool_call>"

    def parse(self, text: str) -> ParsedAction:
        calls: list[ToolCall] = []
        outside: list[str] = []
        pos = 0
        while (start := text.find(self.OPEN, pos)) >= 0:
            outside.append(text[pos:start])
            body_start = start + len(self.OPEN)
            end = text.find(self.CLOSE, body_start)
            if end < 0:
                error = ParseError(
                    ParseErrorKind.UNCLOSED_TAG,
                    f"{self.OPEN} is never closed with {self.CLOSE} "
                    f"(found: {_excerpt(text[start:])!r})",
                )
                return ParsedAction("".join(outside).strip(), calls, error)
            body = text[body_start:end].strip()
            pos = end + len(self.CLOSE)
            try:
                obj = json.loads(body)
            except (json.JSONDecodeError, RecursionError) as e:
                error = ParseError(
                    ParseErrorKind.INVALID_JSON,
                    f"the body of {self.OPEN} is not valid JSON: {_json_error(e)} "
                    f"(body: {_excerpt(body)!r})",
                )
                return ParsedAction("".join(outside).strip(), calls, error)
            call = _call_from_json(obj)
            if isinstance(call, ParseError):
                return ParsedAction("".join(outside).strip(), calls, call)
            calls.append(call)
        outside.append(text[pos:])
        return ParsedAction("".join(outside).strip(), calls)

    def render_call(self, call: ToolCall) -> str:
        body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
        return f"{self.OPEN}\n{body}\n{self.CLOSE}"

    def render_result(self, result: ToolResult) -> Message:
        return {"role": "tool", "name": result.call.name, "content": result.output}

    def instructions(self, tools: Sequence[Tool]) -> str:
        schemas = "\n".join(json.dumps(t.openai_schema(), ensure_ascii=False) for t in tools)
        return (
            "You may call one or more functions. Their signatures are within <tools></tools>:\n"
            f"<tools>\n{schemas}\n</tools>\n"
            "For each call, write a JSON object with the function name and arguments within "
            f'{self.OPEN}{self.CLOSE} tags:\n{self.OPEN}\n{{"name": <function-name>, '
            f'"arguments": <args-json-object>}}\n{self.CLOSE}'
        )


def _tool_message(result: ToolResult) -> Message:
    """A `tool` message with the result, naming the call (and its id when it has one)."""
    message: Message = {"role": "tool", "name": result.call.name, "content": result.output}
    if result.call.id is not None:
        message["tool_call_id"] = result.call.id
    return message


def _schemas(tools: Sequence[Tool]) -> str:
    return json.dumps([t.openai_schema() for t in tools], ensure_ascii=False)


class MistralFormat(ToolFormat):
    """`[TOOL_CALLS] [{"name": "sql", "arguments": {"query": "..."}}]` (Mistral).

    The text before the marker is the reply's content; everything after it must be one JSON
    list of calls (a single call object is accepted too). A call's `id`, when the model
    writes one, is kept.
    """

    name = "mistral"
    MARK = "[TOOL_CALLS]"

    def parse(self, text: str) -> ParsedAction:
        head, found, body = text.partition(self.MARK)
        content = head.strip()
        if not found:
            return ParsedAction(content)
        body = body.strip()
        try:
            data = json.loads(body)
        except (json.JSONDecodeError, RecursionError) as e:
            error = ParseError(
                ParseErrorKind.INVALID_JSON,
                f"the list after {self.MARK} is not valid JSON: {_json_error(e)} "
                f"(found: {_excerpt(body)!r})",
            )
            return ParsedAction(content, [], error)
        calls: list[ToolCall] = []
        for item in data if isinstance(data, list) else [data]:
            call = _call_from_json(item, keys=("arguments", "parameters"))
            if isinstance(call, ParseError):
                return ParsedAction(content, calls, call)
            calls.append(call)
        return ParsedAction(content, calls)

    def render_call(self, call: ToolCall) -> str:
        obj: dict[str, object] = {"name": call.name, "arguments": call.arguments}
        if call.id is not None:
            obj["id"] = call.id
        return f"{self.MARK} {json.dumps([obj], ensure_ascii=False)}"

    def render_result(self, result: ToolResult) -> Message:
        return _tool_message(result)

    def instructions(self, tools: Sequence[Tool]) -> str:
        return (
            f"These functions are available (JSON schemas):\n{_schemas(tools)}\n"
            f"To call functions, end your reply with {self.MARK} and a JSON list with one "
            f'object per call: {self.MARK} [{{"name": <function-name>, '
            '"arguments": <args-json-object>}]'
        )


class Llama3JSONFormat(ToolFormat):
    """`{"name": "sql", "parameters": {"query": "..."}}` (Llama 3.x JSON tool calling).

    A reply is a call only when all of it is: optionally `<|python_tag|>`, then one or more
    call objects separated by `;` or whitespace. `arguments` is accepted for `parameters`.
    A reply that is neither tagged nor a `{` object mentioning `"name"` is a plain answer;
    one that is, but does not parse to calls, is an error.
    """

    name = "llama3"
    PYTHON_TAG = "<|python_tag|>"
    _SEPARATORS = " \t\r\n;"

    def parse(self, text: str) -> ParsedAction:
        stripped = text.strip()
        tagged = stripped.startswith(self.PYTHON_TAG)
        if not tagged and not (stripped.startswith("{") and '"name"' in stripped):
            return ParsedAction(stripped)
        body = stripped.removeprefix(self.PYTHON_TAG).strip()
        calls: list[ToolCall] = []
        decoder = json.JSONDecoder()
        pos = 0
        while pos < len(body):
            try:
                obj, pos = decoder.raw_decode(body, pos)
            except (json.JSONDecodeError, RecursionError) as e:
                where = (
                    f"{e.msg} at position {e.pos}"
                    if isinstance(e, json.JSONDecodeError)
                    else "nested too deeply"
                )
                error = ParseError(
                    ParseErrorKind.INVALID_JSON, f"the tool call is not valid JSON: {where}"
                )
                return ParsedAction("", calls, error)
            call = _call_from_json(obj, keys=("parameters", "arguments"))
            if isinstance(call, ParseError):
                return ParsedAction("", calls, call)
            calls.append(call)
            while pos < len(body) and body[pos] in self._SEPARATORS:
                pos += 1
        return ParsedAction("", calls)

    def render_call(self, call: ToolCall) -> str:
        return json.dumps({"name": call.name, "parameters": call.arguments}, ensure_ascii=False)

    def render_result(self, result: ToolResult) -> Message:
        return _tool_message(result)

    def instructions(self, tools: Sequence[Tool]) -> str:
        return (
            f"These functions are available (JSON schemas):\n{_schemas(tools)}\n"
            "To call one, reply with only a JSON object and nothing else: "
            '{"name": <function-name>, "parameters": <args-json-object>}. '
            "Separate several calls with ;. To answer, reply in plain text."
        )


class OpenAIFormat(ToolFormat):
    """OpenAI chat `tool_calls`. The action is the assistant message serialized as JSON
    (`{"content": ..., "tool_calls": [...]}`); any other text is a plain reply."""

    name = "openai"

    def parse(self, text: str) -> ParsedAction:
        stripped = text.strip()
        if not stripped.startswith("{"):
            return ParsedAction(text.strip())
        try:
            message = json.loads(stripped)
        except (json.JSONDecodeError, RecursionError):
            return ParsedAction(text.strip())
        if not isinstance(message, dict) or "tool_calls" not in message:
            return ParsedAction(text.strip())
        content = message.get("content") or ""
        raw_calls = message["tool_calls"]
        if not isinstance(raw_calls, list):
            return ParsedAction(
                content,
                [],
                ParseError(ParseErrorKind.BAD_CALL_SHAPE, '"tool_calls" must be a list'),
            )
        calls: list[ToolCall] = []
        for index, raw in enumerate(raw_calls):
            function = raw.get("function") if isinstance(raw, dict) else None
            call_id = raw.get("id") if isinstance(raw, dict) else None
            call = _call_from_json(
                function, call_id if isinstance(call_id, str) else f"call_{index}"
            )
            if isinstance(call, ParseError):
                return ParsedAction(content, calls, call)
            calls.append(call)
        return ParsedAction(content if isinstance(content, str) else "", calls)

    def render_call(self, call: ToolCall) -> str:
        return json.dumps(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id or "call_0",
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": json.dumps(call.arguments, ensure_ascii=False),
                        },
                    }
                ],
            },
            ensure_ascii=False,
        )

    def render_result(self, result: ToolResult) -> Message:
        return {
            "role": "tool",
            "tool_call_id": result.call.id or "call_0",
            "content": result.output,
        }

    def instructions(self, tools: Sequence[Tool]) -> str:
        return "Call the provided functions when they help; answer in plain text otherwise."


@dataclass(frozen=True)
class CallPattern:
    """How one tool is called in `PatternFormat`."""

    regex: re.Pattern[str]
    """Finds a call; its first group is the argument's text. Keep repetitions bounded
    (`\\s{0,3}`, `[a-z]{0,40}`) so a megabyte-long reply is still scanned in linear time."""
    argument: str
    """The name of the tool's single argument that the group fills."""
    usage: str
    """How the call is written, with `{argument}` where the value goes (`lookup({item})`);
    used by `render_call` and the instructions."""


class PatternFormat(ToolFormat):
    """Calls in the model's own words, one `CallPattern` per tool (`lookup(apple)`,
    `ANSWER: 42`).

    A reply makes at most one call: the pattern that matches earliest in the text (the first
    tool given wins a tie). A reply no pattern matches parses to no calls and no error; the
    env decides what that means. Results come back as `result_role` messages.
    """

    name = "pattern"

    def __init__(self, patterns: Mapping[str, CallPattern], result_role: Role = "user"):
        if not patterns:
            raise ValueError("PatternFormat needs at least one tool pattern")
        for tool_name, pattern in patterns.items():
            if pattern.regex.groups < 1:
                raise ValueError(f"the pattern of {tool_name!r} needs a group for its argument")
        self.patterns = dict(patterns)
        self.result_role = result_role

    def parse(self, text: str) -> ParsedAction:
        best: tuple[int, str, re.Match[str]] | None = None
        for tool_name, pattern in self.patterns.items():
            match = pattern.regex.search(text)
            if match is not None and (best is None or match.start() < best[0]):
                best = (match.start(), tool_name, match)
        if best is None:
            return ParsedAction(text.strip())
        _, tool_name, match = best
        call = ToolCall(tool_name, {self.patterns[tool_name].argument: match.group(1) or ""})
        return ParsedAction((text[: match.start()] + text[match.end() :]).strip(), [call])

    def render_call(self, call: ToolCall) -> str:
        pattern = self.patterns[call.name]
        return pattern.usage.format(**{pattern.argument: call.arguments[pattern.argument]})

    def render_result(self, result: ToolResult) -> Message:
        return {"role": self.result_role, "content": result.output}

    def instructions(self, tools: Sequence[Tool]) -> str:
        lines = ["Reply with exactly one of:"]
        for t in tools:
            if t.name in self.patterns:
                pattern = self.patterns[t.name]
                usage = pattern.usage.format(**{pattern.argument: pattern.argument.upper()})
                lines.append(f"- {usage}: {t.description}")
        return "\n".join(lines)


FORMATS: dict[str, type[ToolFormat]] = {
    f.name: f for f in (HermesFormat, MistralFormat, Llama3JSONFormat, OpenAIFormat)
}
"""Formats that need no configuration, by name (`XMLTagFormat` needs its tag map)."""
