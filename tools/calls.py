"""What a tool-call format produces: tool calls, or a typed parse error, and tool results."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, TypedDict

from skyrl_sdk.fast_frozen import fast_constructor


class ToolCallJSON(TypedDict):
    """`ToolCall.to_json()`: a call as the step's `info["tool_calls"]` and trajectories hold it."""

    name: str
    """The tool's name."""
    arguments: dict[str, Any]
    """Keyword arguments, as parsed from the model's text (free-form JSON values)."""
    id: str | None
    """Call id, or null for formats that carry none."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for."""

    name: str
    """The tool's name."""
    arguments: dict[str, Any]
    """Keyword arguments, as parsed from the model's text."""
    id: str | None = None
    """Call id, for formats that carry one (OpenAI `tool_calls`)."""

    def to_json(self) -> ToolCallJSON:
        """The call as a JSON object (`from_json` reads it back)."""
        return {"name": self.name, "arguments": self.arguments, "id": self.id}

    @classmethod
    def from_json(cls, obj: object) -> ToolCall:
        """Inverse of `to_json`; `ValueError` naming the bad field for anything else."""
        if not isinstance(obj, dict):
            raise ValueError(f"a tool call must be an object, got {type(obj).__name__}")
        name, arguments, call_id = obj.get("name"), obj.get("arguments", {}), obj.get("id")
        if not isinstance(name, str) or not name:
            raise ValueError(f'"name" must be a non-empty string, got {name!r:.80}')
        if not isinstance(arguments, dict):
            raise ValueError(f'"arguments" must be an object, got {type(arguments).__name__}')
        if call_id is not None and not isinstance(call_id, str):
            raise ValueError(f'"id" must be a string or null, got {type(call_id).__name__}')
        if cls is ToolCall:  # read once per call per agent-loop step
            return _new_tool_call(name, dict(arguments), call_id)
        return cls(name, dict(arguments), call_id)


_new_tool_call = fast_constructor(ToolCall)


class ParseErrorKind(enum.Enum):
    """Why a model's text could not be turned into tool calls."""

    UNCLOSED_TAG = "unclosed_tag"
    """An opening tag (`<sql>`, `<tool_call>`) without its closing tag."""
    INVALID_JSON = "invalid_json"
    """The body of a call is not valid JSON."""
    BAD_CALL_SHAPE = "bad_call_shape"
    """Valid JSON, but not `{"name": str, "arguments": object}`."""
    UNKNOWN_TOOL = "unknown_tool"
    """A call names a tool the env does not offer."""
    BAD_ARGUMENTS = "bad_arguments"
    """The arguments do not match the tool's schema."""
    NO_ACTION = "no_action"
    """The reply contains neither a tool call nor a final answer."""


@dataclass(frozen=True)
class ParseError:
    """A malformed action, reported back to the model as an observation and counted as a metric."""

    kind: ParseErrorKind
    """What class of mistake it was."""
    message: str
    """A sentence telling the model what was wrong and what is expected."""

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "message": self.message}

    @classmethod
    def from_json(cls, obj: object) -> ParseError:
        """Inverse of `to_json`; `ValueError` naming the bad field (an unknown `kind` lists
        the known ones)."""
        if not isinstance(obj, dict):
            raise ValueError(f"a parse error must be an object, got {type(obj).__name__}")
        kind, message = obj.get("kind"), obj.get("message")
        try:
            parsed = ParseErrorKind(kind)
        except (ValueError, TypeError):
            known = ", ".join(k.value for k in ParseErrorKind)
            raise ValueError(f'unknown "kind" {kind!r:.80}; known: {known}') from None
        if not isinstance(message, str):
            raise ValueError(f'"message" must be a string, got {type(message).__name__}')
        return cls(parsed, message)


@dataclass(frozen=True)
class ParsedAction:
    """The result of parsing one assistant reply."""

    content: str
    """The reply's text outside any tool call."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Calls in the order they appear."""
    error: ParseError | None = None
    """Set when (part of) the reply could not be parsed; `tool_calls` holds what did parse."""


@dataclass(frozen=True)
class ToolResult:
    """The outcome of running one tool call."""

    call: ToolCall
    """The call that produced it."""
    output: str
    """Text shown to the model."""
    is_error: bool = False
    """True when the tool raised or refused; `output` then explains why."""
