"""`python`: solve a problem by running code in a persistent sandboxed interpreter.

The model has a `python` tool (state persists across turns) and ends with `answer`. Each task
row has a `question`, the checked `answer` (what the reference `solution` prints; the test suite
re-runs every solution in a sandbox) and that `solution`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import ClassVar

from skyrl_gym.envs.sql_basic.env import answers_match
from skyrl_gym.sandbox_env import SandboxToolEnv
from skyrl_gym.tasks import TaskRow, load_tasks
from skyrl_sdk.sandboxes import Backend, Sandbox, SandboxSpec
from skyrl_sdk.tools import Tool, ToolFormat
from skyrl_sdk.tools.python_exec import python_tool

TASKS_FILE = Path(__file__).with_name("tasks.jsonl")


@cache
def bundled_tasks() -> tuple[TaskRow, ...]:
    """The bundled problems (read once per process)."""
    return tuple(load_tasks(TASKS_FILE, PythonEnv.required_fields))


class PythonEnv(SandboxToolEnv):
    """Compute the answer with the `python` tool, then call `answer` with a single value."""

    required_fields: ClassVar[tuple[str, ...]] = ("question", "answer")
    system_prompt: ClassVar[str] = (
        "Solve the problem by writing and running Python code with the python tool (variables "
        "persist between calls; print what you need to see). Then give the final value with "
        "the answer tool."
    )
    xml_tags: ClassVar[dict[str, str]] = {"python": "code"}

    def __init__(
        self,
        tasks: Sequence[TaskRow] | None = None,
        *,
        backend: str | Backend = Backend.BWRAP,
        spec: SandboxSpec | None = None,
        tool_format: str | ToolFormat = "xml",
        timeout_s: float = 10.0,
    ):
        self.timeout_s = timeout_s
        super().__init__(
            bundled_tasks() if tasks is None else tasks,
            spec=spec or SandboxSpec(memory_bytes=512 << 20, pids=64, timeout_s=timeout_s + 10),
            backend=backend,
            tool_format=tool_format,
        )

    def make_tools(self, sandbox: Sandbox) -> list[Tool]:
        return [python_tool(sandbox, timeout_s=self.timeout_s)]

    def prompt(self, task: TaskRow) -> str:
        return task["question"]

    def score(self, task: TaskRow, answer: str) -> float:
        return float(answers_match(answer, str(task["answer"])))
