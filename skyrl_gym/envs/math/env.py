"""`math`: arithmetic word problems solved with a calculator tool; reward 1 for the exact answer."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import ClassVar

from skyrl_gym.tasks import TaskRow, load_tasks
from skyrl_gym.tool_env import ToolEnv, Tooling
from skyrl_sdk.tools import ToolFormat
from skyrl_sdk.tools.calculator import calculator

TASKS_FILE = Path(__file__).with_name("tasks.jsonl")


@cache
def bundled_tasks() -> tuple[TaskRow, ...]:
    """The 64 bundled problems (read once per process)."""
    return tuple(load_tasks(TASKS_FILE, MathEnv.required_fields))


def parse_number(text: str) -> float | None:
    """A number from an answer like "1,234", "$56" or "7." (None if there is none)."""
    try:
        return float(text)  # the common case: already a plain number
    except ValueError:
        pass
    cleaned = text.strip().replace(",", "").lstrip("$").rstrip(".").strip()
    try:
        return float(cleaned)
    except ValueError:
        return None


class MathEnv(ToolEnv):
    """Multi-turn arithmetic: call `calculator` as often as needed, then `answer`."""

    required_fields: ClassVar[tuple[str, ...]] = ("question", "answer")
    system_prompt: ClassVar[str] = (
        "Solve the arithmetic word problem. Use the calculator for every computation, "
        "then give the final number with the answer tool."
    )
    inline_async: ClassVar[bool] = True  # the calculator is bounded and never blocks

    def __init__(
        self, tasks: Sequence[TaskRow] | None = None, tool_format: str | ToolFormat = "xml"
    ):
        tooling = (
            _shared_tooling(tool_format)
            if isinstance(tool_format, str)
            else Tooling.build([calculator], tool_format, self.system_prompt)
        )
        super().__init__(bundled_tasks() if tasks is None else tasks, tooling)

    def prompt(self, task: TaskRow) -> str:
        return task["question"]

    def score(self, task: TaskRow, answer: str) -> float:
        given, gold = parse_number(answer), parse_number(str(task["answer"]))
        if given is None or gold is None:
            return float(answer.strip() == str(task["answer"]).strip())
        return float(abs(given - gold) <= 1e-9 * max(1.0, abs(gold)))


@cache
def _shared_tooling(tool_format: str) -> Tooling:
    # The calculator is stateless, so every MathEnv in the process shares one Tooling.
    return Tooling.build([calculator], tool_format, MathEnv.system_prompt)
