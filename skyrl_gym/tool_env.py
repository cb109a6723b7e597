"""`ToolEnv`: the common shape of tool-using task envs.

Each turn the model's reply is parsed with the env's `ToolFormat`. Tool calls run and their
results come back as the next observation; a call to `answer` ends the episode with the reward
from `score`. A malformed reply becomes an observation that says what was wrong (and counts in
`info["parse_error"]`), so the model can recover on its next turn.

Every step's `info` is written through `StepInfo` (`skyrl_gym.step_info`), the typed step
protocol: `tool_calls`, `parse_error`, and at the end `episode` with `correct`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypedDict

from skyrl_gym.core import Messages, ResetNeeded, StepReturn, TaskEnv, coerce_action
from skyrl_gym.step_info import StepInfo
from skyrl_gym.tasks import TaskRow
from skyrl_sdk.tools import (
    ParseError,
    ParseErrorKind,
    Tool,
    ToolCall,
    ToolFormat,
    Toolset,
    XMLTagFormat,
    tool,
)
from skyrl_sdk.tools.formats import FORMATS
from skyrl_sdk.tools.messages import Message


@tool
def answer(answer: str) -> str:
    """Give your final answer. This ends the episode.

    Args:
        answer: The final answer, as short as possible.
    """
    return answer


def resolve_format(tool_format: str | ToolFormat, tools: Sequence[Tool]) -> ToolFormat:
    """A format instance from a name (`xml`, `hermes`, `openai`) or an instance."""
    if isinstance(tool_format, ToolFormat):
        return tool_format
    if tool_format == "xml":
        return XMLTagFormat.for_tools(tools)
    if tool_format in FORMATS:
        return FORMATS[tool_format]()
    raise ValueError(f"unknown tool format {tool_format!r}; choose xml, {', '.join(FORMATS)}")


@dataclass(frozen=True)
class Tooling:
    """An env's tools, the format they are called in, and the system message built from both.

    Building one parses schemas and renders instructions, so envs whose tools do not depend on
    the instance build it once per process and share it.
    """

    toolset: Toolset
    """The env's tools plus `answer`."""
    tool_format: ToolFormat
    """How calls are written and results shown."""
    system_message: Message
    """The episode's first message: the env's prompt plus the format's tool instructions."""

    @classmethod
    def build(
        cls,
        tools: Sequence[Tool],
        tool_format: str | ToolFormat,
        system_prompt: str,
        max_output_chars: int = 16_000,
    ) -> Tooling:
        toolset = Toolset([*tools, answer], max_output_chars=max_output_chars)
        fmt = resolve_format(tool_format, list(toolset))
        system = f"{system_prompt}\n\n{fmt.instructions(list(toolset))}"
        return cls(toolset, fmt, {"role": "system", "content": system})


class EpisodeMetrics(TypedDict):
    """`ToolEnv.episode_metrics`: what `info["episode"]` holds when an episode ends with an
    answer. Subclasses add fields in a `TypedDict` subclass (`SearchEpisodeMetrics`)."""

    answer: str
    """The final answer the model gave."""
    correct: bool
    """The env's verdict (the step protocol's `episode.correct`; `ToolEnv`'s: reward > 0)."""


@dataclass(frozen=True)
class ParsedTurn:
    """One assistant reply, interpreted against an env's tools."""

    calls: list[ToolCall]
    """Calls that parsed and passed their schema check, in order."""
    info: dict[str, Any]
    """The step's `info`, written by `StepInfo.write`: `tool_calls` and `parse_error`."""
    error: ParseError | None = None
    """Why the reply could not be used; the env answers with the format's error message."""
    answer: str | None = None
    """The final answer, when the reply calls `answer`."""


class ToolEnv(TaskEnv):
    """A task env where the model calls tools and ends the episode by calling `answer`.

    A step is `interpret` (parse, check schemas), then one of three outcomes: the format's
    error message for a malformed reply, `score` for a final answer, or `run_tools`. Subclasses
    override `run_tools` (custom execution) and `episode_metrics` (extra end-of-episode info).
    """

    system_prompt: ClassVar[str] = "You are a helpful assistant that solves tasks with tools."
    no_action_hint: ClassVar[str] = "call a tool, or call `answer` with your final answer"
    """Told to the model when a reply contains neither a tool call nor an answer."""

    def __init__(self, tasks: Sequence[TaskRow] | None, tooling: Tooling):
        super().__init__(tasks)
        self.tooling = tooling
        self.toolset = tooling.toolset
        self.tool_format = tooling.tool_format

    @abc.abstractmethod
    def prompt(self, task: TaskRow) -> str:
        """The user message that states the task."""

    @abc.abstractmethod
    def score(self, task: TaskRow, answer: str) -> float:
        """The reward for a final answer."""

    def start(self, task: TaskRow) -> Messages:
        # Fresh dicts every episode: callers may keep and mutate what reset returns.
        return [{**self.tooling.system_message}, {"role": "user", "content": self.prompt(task)}]

    def interpret(self, action: str) -> ParsedTurn:
        """Parse a reply and check its calls against the tools' schemas. Never raises."""
        parsed = self.tool_format.parse(coerce_action(action))
        calls = parsed.tool_calls
        error = parsed.error or next(filter(None, map(self.toolset.check, calls)), None)
        if error is None and not calls:
            error = ParseError(ParseErrorKind.NO_ACTION, self.no_action_hint)
        info = StepInfo(tuple(calls), error).write()
        if error is not None:
            return ParsedTurn(calls, info, error=error)
        final = next((c for c in calls if c.name == answer.name), None)
        given = None if final is None else str(final.arguments.get("answer", ""))
        return ParsedTurn(calls, info, answer=given)

    def run_tools(self, calls: list[ToolCall], info: dict[str, Any]) -> Messages:
        """Execute the calls and render their results (errors included) as messages."""
        return [self.tool_format.render_result(self.toolset.execute(c)) for c in calls]

    def episode_metrics(self, answer: str, reward: float) -> EpisodeMetrics:
        """Fields for `info["episode"]` when the episode ends with an answer."""
        return {"answer": answer, "correct": reward > 0}

    def step(self, action: str) -> StepReturn:
        if self.task is None:
            raise ResetNeeded("call reset() before step()")
        turn = self.interpret(action)
        if turn.error is not None:
            return [self.tool_format.error_message(turn.error)], 0.0, False, False, turn.info
        if turn.answer is not None:
            reward = float(self.score(self.task, turn.answer))
            metrics = self.episode_metrics(turn.answer, reward)
            StepInfo(tuple(turn.calls), episode=metrics).write(turn.info)
            return [], reward, True, False, turn.info
        return self.run_tools(turn.calls, turn.info), 0.0, False, False, turn.info
