"""The step protocol: the `info` keys the agent loop reads, as one typed structure.

Gymnasium's `step` returns `info` as a plain dict, and it stays one here: wrappers, vector
envs and loggers handle it as a dict of JSON values, and any env may add keys of its own.
The few keys the agent loop, the metrics and the trainer *read* are the step protocol, and
`StepInfo` is their type:

| key                      | JSON value                                     | `StepInfo` field |
|--------------------------|------------------------------------------------|------------------|
| `tool_calls`             | list of `{"name", "arguments", "id"}`          | `tool_calls`     |
| `parse_error`            | `{"kind": ParseErrorKind value, "message"}` or null | `parse_error` |
| `truncated_by`           | a `TruncatedBy` value (only when truncated)    | `truncated_by`   |
| `episode`                | object of end-of-episode metrics (last step)   | `episode`        |
| `episode.correct`        | bool, the env's verdict on the episode         | `correct`        |

Every key is optional; a missing key means "nothing to report" (no calls, no error, ...).
Envs write the keys with `StepInfo(...).write(info)` (`ToolEnv` does it for you) and readers
parse them with `StepInfo.read(info)`, which raises `StepInfoError` naming the bad key and
value instead of a `KeyError` three frames later. `check_env` runs `read` on every step it
takes, so a malformed `info` is caught before an episode ever reaches a trainer, and the agent
loop (`rollout`) turns one that slips through into an episode that ends with an env error.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from skyrl_sdk.fast_frozen import fast_constructor
from skyrl_sdk.tools.calls import ParseError, ToolCall

__all__ = [
    "EPISODE_KEY",
    "PARSE_ERROR_KEY",
    "TOOL_CALLS_KEY",
    "TRUNCATED_BY_KEY",
    "InfoKey",
    "StepInfo",
    "StepInfoError",
    "TruncatedBy",
]


class InfoKey(enum.StrEnum):
    """The `info` keys of the step protocol (a `str` enum: usable directly as dict keys)."""

    TOOL_CALLS = "tool_calls"
    """The calls parsed from the reply (list of `ToolCall.to_json()` objects)."""
    PARSE_ERROR = "parse_error"
    """Why the reply could not be used (`ParseError.to_json()`), or null."""
    TRUNCATED_BY = "truncated_by"
    """Which limit truncated the episode (a `TruncatedBy` value)."""
    EPISODE = "episode"
    """End-of-episode metrics (an object; the env's own fields plus `EpisodeGuard`'s summary)."""


CORRECT = "correct"
"""The field of `info["episode"]` holding the env's verdict (bool)."""


class TruncatedBy(enum.Enum):
    """Which limit outside the task stopped the episode (`truncated=True`)."""

    MAX_TURNS = "max_turns"
    """The turn limit (`EpisodeGuard`'s `max_turns`, or the env's own)."""
    TIME_LIMIT = "time_limit"
    """A wall-clock limit of the env."""
    RESOURCE_LIMIT = "resource_limit"
    """Another budget of the env: tokens, tool calls, disk, ..."""


class StepInfoError(ValueError):
    """An `info` dict breaks the step protocol; the message names the key and the value."""

    def __init__(self, key: str, message: str):
        super().__init__(f"info[{key!r}]: {message}")
        self.key = key
        """The offending key, dotted for nested ones (`episode.correct`)."""


# Plain `str` keys for the hot paths: `InfoKey.X.value` goes through Enum's property
# descriptor (~0.15 us per access), and `write`/`EpisodeGuard` read or write four keys on
# every step of every episode.
TOOL_CALLS_KEY: str = InfoKey.TOOL_CALLS.value
"""`InfoKey.TOOL_CALLS` as a plain `str`."""
PARSE_ERROR_KEY: str = InfoKey.PARSE_ERROR.value
"""`InfoKey.PARSE_ERROR` as a plain `str`."""
TRUNCATED_BY_KEY: str = InfoKey.TRUNCATED_BY.value
"""`InfoKey.TRUNCATED_BY` as a plain `str`."""
EPISODE_KEY: str = InfoKey.EPISODE.value
"""`InfoKey.EPISODE` as a plain `str`."""


@dataclass(frozen=True, init=False)
class StepInfo:
    """The typed view of one step's `info` (see the module docstring for the keys)."""

    tool_calls: tuple[ToolCall, ...] = ()
    """Calls parsed from the reply that passed their schema check, in order."""
    parse_error: ParseError | None = None
    """Why the reply could not be used; the env answered with an error observation."""
    truncated_by: TruncatedBy | None = None
    """The limit that truncated the episode, when one did."""
    correct: bool | None = None
    """The env's verdict on the whole episode (`info["episode"]["correct"]`); None when the
    env gives none (the loop then counts reward > 0 as success)."""
    episode: Mapping[str, Any] | None = field(default=None, compare=False)
    """Other end-of-episode metrics from `info["episode"]`, as given (free-form JSON)."""

    def __init__(
        self,
        tool_calls: tuple[ToolCall, ...] = (),
        parse_error: ParseError | None = None,
        truncated_by: TruncatedBy | None = None,
        correct: bool | None = None,
        episode: Mapping[str, Any] | None = None,
    ) -> None:
        # Envs build one StepInfo per step: filling `__dict__` directly costs half of the
        # generated frozen `__init__`'s one `object.__setattr__` call per field.
        fields = self.__dict__
        fields["tool_calls"] = tool_calls
        fields["parse_error"] = parse_error
        fields["truncated_by"] = truncated_by
        fields["correct"] = correct
        fields["episode"] = episode

    def write(self, info: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write the protocol keys into `info` (a new dict when None) and return it.

        `tool_calls` and `parse_error` are always written; `truncated_by` only when set;
        `correct` and `episode` are merged into `info["episode"]`.
        """
        if info is None:
            info = {}
        calls, error = self.tool_calls, self.parse_error
        info[TOOL_CALLS_KEY] = [c.to_json() for c in calls] if calls else []
        info[PARSE_ERROR_KEY] = None if error is None else error.to_json()
        if self.truncated_by is not None:
            info[TRUNCATED_BY_KEY] = self.truncated_by.value
        metrics, correct = self.episode, self.correct
        if metrics is not None or correct is not None:
            old = info.get(EPISODE_KEY)
            episode = dict(old) if old else {}
            if metrics:
                episode.update(metrics)
            if correct is not None:
                episode[CORRECT] = correct
            info[EPISODE_KEY] = episode
        return info

    @classmethod
    def read(cls, info: object) -> StepInfo:
        """Parse the protocol keys of `info`; raise `StepInfoError` on a malformed one.

        Keys outside the protocol are ignored. Never raises anything but `StepInfoError`.
        """
        if type(info) is not dict and not isinstance(info, Mapping):  # exact type: fast path
            raise StepInfoError("", f"info must be a dict, got {type(info).__name__}")
        get = info.get
        raw_calls, raw_error = get(TOOL_CALLS_KEY), get(PARSE_ERROR_KEY)
        raw_truncated_by, episode = get(TRUNCATED_BY_KEY), get(EPISODE_KEY)
        if (
            (raw_calls is None or (type(raw_calls) is list and not raw_calls))
            and raw_error is None
            and raw_truncated_by is None
            and episode is None
        ):
            return _NOTHING  # the common step: nothing to report
        calls = _read_calls(raw_calls)
        parse_error = None if raw_error is None else _read_parse_error(raw_error)
        truncated_by = None if raw_truncated_by is None else _read_truncated_by(raw_truncated_by)
        correct = None
        if episode is not None:
            if type(episode) is not dict and not isinstance(episode, Mapping):
                raise StepInfoError(
                    InfoKey.EPISODE.value,
                    f"must be an object of metrics, got {type(episode).__name__} {episode!r:.80}",
                )
            correct = episode.get(CORRECT)
            if correct is not None and type(correct) is not bool:  # bool has no subclasses
                raise StepInfoError(
                    f"{InfoKey.EPISODE.value}.{CORRECT}",
                    f"must be a bool, got {type(correct).__name__} {correct!r:.80}",
                )
        if cls is StepInfo:  # read once per agent-loop step: skip the frozen __init__
            return _new_step_info(calls, parse_error, truncated_by, correct, episode)
        return cls(calls, parse_error, truncated_by, correct, episode)


_NOTHING = StepInfo()
_new_step_info = fast_constructor(StepInfo)


def _read_calls(value: object) -> tuple[ToolCall, ...]:
    if value is None or (type(value) is list and not value):
        return ()
    if type(value) is not list and not isinstance(value, list | tuple):
        raise StepInfoError("tool_calls", f"must be a list of calls, got {type(value).__name__}")
    calls = []
    for raw in value:
        # The call as `ToolCall.to_json` writes it (what every env's `StepInfo.write` gives),
        # checked by exact types; anything else goes through `from_json`, which names the
        # bad field. Read once per call per agent-loop step.
        if type(raw) is dict and len(raw) == 3:
            get = raw.get
            name, arguments, call_id = get("name"), get("arguments"), get("id")
            if (
                type(name) is str
                and name
                and type(arguments) is dict
                and (call_id is None or type(call_id) is str)
            ):
                calls.append(_new_tool_call(name, arguments.copy(), call_id))
                continue
        calls.append(_read_call(len(calls), raw))
    return tuple(calls)


def _read_call(index: int, raw: object) -> ToolCall:
    try:
        return ToolCall.from_json(raw)
    except ValueError as e:
        raise StepInfoError(f"tool_calls[{index}]", str(e)) from None


_new_tool_call = fast_constructor(ToolCall)


def _read_parse_error(value: object) -> ParseError | None:
    if value is None:
        return None
    try:
        return ParseError.from_json(value)
    except ValueError as e:
        raise StepInfoError(InfoKey.PARSE_ERROR.value, str(e)) from None


def _read_truncated_by(value: object) -> TruncatedBy | None:
    if value is None:
        return None
    try:
        return TruncatedBy(value)
    except (ValueError, TypeError):
        known = ", ".join(t.value for t in TruncatedBy)
        raise StepInfoError(
            InfoKey.TRUNCATED_BY.value, f"unknown value {value!r:.80}; known: {known}"
        ) from None
