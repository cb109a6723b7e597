"""Chat messages: the unit of observations, prompts and tool results."""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})


class Message(TypedDict):
    """One chat message, in the OpenAI shape every chat template understands."""

    role: Role
    content: str
    name: NotRequired[str]
    """The tool's name, on `tool` messages."""
    tool_call_id: NotRequired[str]
    """Which call this message answers, on `tool` messages from the OpenAI tool-call format."""


Messages = list[Message]


def is_message(value: object) -> bool:
    """True when `value` is a well-formed chat message (known role, string content)."""
    return (
        isinstance(value, dict)
        and value.get("role") in ROLES
        and isinstance(value.get("content"), str)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    )
