"""`math-answer`: the bundled word problems as single-turn episodes (GSM8K style).

The reply must end its reasoning with `#### <number>`; reward 1 for the exact number, else 0.
One step always terminates the episode.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from skyrl_gym.core import Messages, ResetNeeded, StepReturn, TaskEnv, coerce_action
from skyrl_gym.envs.math.env import bundled_tasks, parse_number
from skyrl_gym.step_info import CORRECT, EPISODE_KEY, PARSE_ERROR_KEY, TOOL_CALLS_KEY
from skyrl_gym.tasks import TaskRow
from skyrl_sdk.tools.calls import ParseError, ParseErrorKind

SYSTEM_PROMPT = (
    "Solve the arithmetic word problem. Think step by step, then write the final number "
    "on its own line as: #### <number>"
)
_FINAL = re.compile(r"####\s*(-?[\d,]*\.?\d+)")
NO_ANSWER = ParseError(ParseErrorKind.NO_ACTION, "no '#### <number>' line")
"""The parse error of a reply without a `#### <number>` line."""


class MathAnswerEnv(TaskEnv):
    """One reply per episode; the number after the last `####` is the answer."""

    required_fields: ClassVar[tuple[str, ...]] = ("question", "answer")
    inline_async: ClassVar[bool] = True

    def __init__(self, tasks: Sequence[TaskRow] | None = None):
        super().__init__(bundled_tasks() if tasks is None else tasks)

    def start(self, task: TaskRow) -> Messages:
        self._gold = parse_number(str(task["answer"]))
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": task["question"]},
        ]

    def step(self, action: str) -> StepReturn:
        if self.task is None:
            raise ResetNeeded("call reset() before step()")
        action = coerce_action(action)
        # The answer ends the reply; scanning only the tail keeps a 1 MB reply cheap.
        matches = _FINAL.findall(action if len(action) <= 10_000 else action[-10_000:])
        gold = self._gold
        given = float(matches[-1].replace(",", "")) if matches else None
        correct = (
            given is not None
            and gold is not None
            and abs(given - gold) <= 1e-9 * max(1.0, abs(gold))
        )
        # The step protocol's dict written directly (what `StepInfo(parse_error=...,
        # correct=..., episode={"answer": ...}).write()` gives, as a test checks): the whole
        # episode is this one step, and building then writing a StepInfo cost as much as
        # the rest of make + reset + step together.
        info = {
            TOOL_CALLS_KEY: [],
            PARSE_ERROR_KEY: None if matches else NO_ANSWER.to_json(),
            EPISODE_KEY: {"answer": matches[-1] if matches else None, CORRECT: correct},
        }
        return [], float(correct), True, False, info
