"""The text-environment contract: Gymnasium's `Env`, with chat messages in and assistant text out.

An episode is a conversation. `reset` returns the opening messages (system prompt, task), every
`step` takes the assistant's reply as plain text and returns the *new* messages the environment
adds (tool results, feedback), a float reward, and Gymnasium's two end flags kept apart:
`terminated` (the task itself ended: answered, solved, failed) and `truncated` (a limit outside
the task: turns, tokens, time). The agent loop owns the full token history; the env only ever
sees the latest action.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from skyrl_gym.tasks import TaskRow, validate_task
from skyrl_sdk.tools.messages import ROLES, Message, Messages, Role, is_message

__all__ = [
    "ROLES",
    "Message",
    "Messages",
    "MessagesSpace",
    "ResetNeeded",
    "Role",
    "StepReturn",
    "TaskEnv",
    "TextEnv",
    "TextSpace",
    "coerce_action",
    "is_message",
]

StepReturn = tuple[Messages, float, bool, bool, dict[str, Any]]
"""Gymnasium's 5-tuple: (new messages, reward, terminated, truncated, info)."""


class ResetNeeded(RuntimeError):
    """`step` was called before `reset`, or after the episode ended."""


class MessagesSpace(gym.Space[Messages]):
    """Observation space of text envs: a list of chat messages of bounded length."""

    def __init__(self, max_messages: int = 64, max_chars: int = 1 << 20, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_messages = max_messages
        self.max_chars = max_chars

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> Messages:
        count = int(self.np_random.integers(1, min(3, self.max_messages) + 1))
        length = min(32, self.max_chars)
        return [
            {"role": "user", "content": _random_text(self.np_random, length)} for _ in range(count)
        ]

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, list)
            and len(x) <= self.max_messages
            and all(is_message(m) and len(m["content"]) <= self.max_chars for m in x)
        )

    def __repr__(self) -> str:
        return f"MessagesSpace(max_messages={self.max_messages}, max_chars={self.max_chars})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessagesSpace) and (self.max_messages, self.max_chars) == (
            other.max_messages,
            other.max_chars,
        )


class TextSpace(gym.Space[str]):
    """Action space of text envs: any Unicode string up to `max_chars` characters.

    Unlike `gymnasium.spaces.Text` it accepts every character: model output is not limited to
    an alphabet, and an env must cope with whatever arrives.
    """

    def __init__(self, max_chars: int = 1 << 20, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_chars = max_chars

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return _random_text(self.np_random, min(64, self.max_chars))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_chars

    def __repr__(self) -> str:
        return f"TextSpace(max_chars={self.max_chars})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextSpace) and self.max_chars == other.max_chars


_SAMPLE_ALPHABET = np.array(list('abcdefghijklmnopqrstuvwxyz0123456789 <>/{}":,.+-*='))


def _random_text(rng: np.random.Generator, max_len: int) -> str:
    length = int(rng.integers(0, max_len + 1))
    return "".join(rng.choice(_SAMPLE_ALPHABET, size=length).tolist())


def coerce_action(action: object) -> str:
    """Make any action a valid Python `str`: decode bytes and replace invalid UTF-8.

    Model output can carry lone surrogates (from a `surrogateescape` decode) or arrive as raw
    bytes; both would crash later when the text is encoded, logged or tokenized.
    """
    if isinstance(action, str):
        if action.isascii():
            return action
        return action.encode("utf-8", "replace").decode("utf-8")
    if isinstance(action, bytes | bytearray):
        return bytes(action).decode("utf-8", "replace")
    raise TypeError(
        f"a text env's action must be str (the assistant's reply), got {type(action).__name__}"
    )


class TextEnv(gym.Env[Messages, str], metaclass=abc.ABCMeta):
    """Base class of every text environment.

    Subclasses implement `reset` (calling `super().reset(seed=seed)` first, as in Gymnasium) and
    `step`. Envs that wait on I/O (sandboxes, HTTP, databases) also override `areset`/`astep`
    natively; the defaults run the sync methods in a worker thread so that a blocking env never
    stalls the agent loop's event loop.
    """

    observation_space: MessagesSpace = MessagesSpace()
    action_space: TextSpace = TextSpace()
    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    inline_async: ClassVar[bool] = False
    """Declare the sync `reset`/`step` cheap: True runs them directly on the event loop,
    False (the default) in a worker thread.

    Set it on envs whose steps are pure CPU work that finishes in well under a millisecond
    and never waits (string parsing, a bounded calculator, an in-memory index): a thread
    hop costs tens of microseconds per call, often more than such a step itself. Leave it
    False when a step may block or take long (subprocesses, sandboxes, databases, HTTP,
    anything with a timeout): inline, it would stall every other episode on the loop.
    Envs that need async I/O override `areset`/`astep` instead. It may also be set per
    instance, when only some configurations are cheap (`SearchEnv` with a local index)."""

    @abc.abstractmethod
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Messages, dict[str, Any]]:
        """Start an episode. `options={"task": row}` picks the task; otherwise the seed does."""
        super().reset(seed=seed)
        return [], {}

    @abc.abstractmethod
    def step(self, action: str) -> StepReturn:
        """Apply the assistant's reply; return (new messages, reward, terminated, truncated, info)."""

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Messages, dict[str, Any]]:
        """Async `reset`; the agent loop only calls this one."""
        if self.inline_async:
            return self.reset(seed=seed, options=options)
        return await asyncio.to_thread(self.reset, seed=seed, options=options)

    async def astep(self, action: str) -> StepReturn:
        """Async `step`; the agent loop only calls this one."""
        if self.inline_async:
            return self.step(action)
        return await asyncio.to_thread(self.step, action)

    def close(self) -> None:
        """Release resources. Must be safe to call more than once, and after errors."""


class TaskEnv(TextEnv):
    """A text env that plays one task row per episode, drawn from a dataset.

    `reset(options={"task": row})` plays that row; `reset(seed=s)` draws one deterministically
    from `self.tasks`. Subclasses implement `start(task)`, returning the opening messages.
    """

    required_fields: ClassVar[tuple[str, ...]] = ()
    """Fields every task row of this env must have, besides `task_id`."""

    def __init__(self, tasks: Sequence[TaskRow] | None = None):
        self.tasks: Sequence[TaskRow] = tasks if tasks is not None else ()
        self.task: TaskRow | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Messages, dict[str, Any]]:
        if seed is not None:  # Gymnasium's reset only (re)seeds np_random; skip the call otherwise
            super().reset(seed=seed)
        self.task = self.choose_task(options)
        return self.start(self.task), {"task_id": self.task["task_id"]}

    def choose_task(self, options: dict[str, Any] | None) -> TaskRow:
        """The task row for this episode: `options["task"]`, else one drawn with `np_random`."""
        if options and "task" in options:
            return validate_task(options["task"], self.required_fields, type(self).__name__)
        if not self.tasks:
            raise ValueError(
                f"{type(self).__name__} has no dataset: pass tasks=... or reset(options={{'task': row}})"
            )
        row = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        return validate_task(row, self.required_fields, type(self).__name__)

    @abc.abstractmethod
    def start(self, task: TaskRow) -> Messages:
        """Set up the episode for `task` and return its opening messages."""
