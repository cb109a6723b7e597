"""`terminal`: do a shell task in a sandboxed workspace; a check command grades the result.

Task rows: `instruction`, `files` (the starting workspace, {relative path: text}), `check` (a
shell command; exit status 0 means solved) and optionally `check_files` (helpers the check
uses) and `solution` (a reference shell script, used by the tests).

Grading runs after the episode in a fresh phase the agent cannot tamper with: the agent's
sandbox is closed first (so none of its processes survive), then a new sandbox opens on the
same workspace, the check files are written only now into its private `/tmp` (which the agent
never saw), and the check runs with a clean environment.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from skyrl_gym.sandbox_env import SandboxToolEnv
from skyrl_gym.tasks import TaskRow, load_tasks
from skyrl_sdk.sandboxes import Backend, Sandbox, SandboxSpec, create_sandbox
from skyrl_sdk.tools import Tool, ToolFormat
from skyrl_sdk.tools.bash import bash_tool
from skyrl_sdk.tools.files import file_tools

TASKS_FILE = Path(__file__).with_name("tasks.jsonl")
GRADER_DIR = "/tmp/grader"


@cache
def bundled_tasks() -> tuple[TaskRow, ...]:
    """The bundled shell tasks (read once per process)."""
    return tuple(load_tasks(TASKS_FILE, TerminalEnv.required_fields))


class TerminalEnv(SandboxToolEnv):
    """Use `bash`, `view_file` and `edit_file` in the workspace, then call `answer` ("done")."""

    required_fields: ClassVar[tuple[str, ...]] = ("instruction", "check")
    system_prompt: ClassVar[str] = (
        "You are working in a Linux shell, in the workspace directory. Complete the task with "
        "the tools. When you are finished, call the answer tool with 'done'; your work is then "
        "checked automatically."
    )

    def __init__(
        self,
        tasks: Sequence[TaskRow] | None = None,
        *,
        backend: str | Backend = Backend.BWRAP,
        spec: SandboxSpec | None = None,
        tool_format: str | ToolFormat = "hermes",
        timeout_s: float = 20.0,
        check_timeout_s: float = 60.0,
    ):
        self.timeout_s = timeout_s
        self.check_timeout_s = check_timeout_s
        self._workspace: str | None = None
        self.last_check: dict[str, Any] | None = None
        super().__init__(
            bundled_tasks() if tasks is None else tasks,
            spec=spec or SandboxSpec(memory_bytes=512 << 20, pids=128, timeout_s=timeout_s),
            backend=backend,
            tool_format=tool_format,
        )

    def make_tools(self, sandbox: Sandbox) -> list[Tool]:
        return [bash_tool(sandbox, timeout_s=self.timeout_s), *file_tools(sandbox)]

    def prompt(self, task: dict[str, Any]) -> str:
        return task["instruction"]

    def sandbox_spec(self, task: dict[str, Any]) -> SandboxSpec:
        # The workspace belongs to the env, not to the agent's sandbox: it must outlive that
        # sandbox so the grading phase can look at it.
        self._drop_workspace()
        self._workspace = tempfile.mkdtemp(prefix="skyrl-terminal-")
        return replace(
            self.sandbox_template, workspace_dir=self._workspace, files=task.get("files") or {}
        )

    async def ascore(self, task: dict[str, Any], answer: str) -> float:
        """Run the task's check in a fresh sandbox on the agent's final workspace."""
        await self._close_sandbox()  # end the agent phase: every process it left is killed
        spec = replace(
            self.sandbox_template, workspace_dir=self._workspace, files={}, network=False
        )
        async with create_sandbox(spec, self.backend) as grader:
            for rel, content in (task.get("check_files") or {}).items():
                await grader.write_file(f"{GRADER_DIR}/{rel}", content)
            result = await grader.exec(
                task["check"], timeout=self.check_timeout_s, env={"GRADER": GRADER_DIR}
            )
        self.last_check = {
            "exit_code": result.exit_code,
            "output": result.output[-2000:],
            "timed_out": result.timed_out,
        }
        return 1.0 if result.ok else 0.0

    def episode_info(self) -> dict[str, Any]:
        return {"check": self.last_check}

    def _drop_workspace(self) -> None:
        if self._workspace is not None:
            shutil.rmtree(self._workspace, ignore_errors=True)
            self._workspace = None

    def close(self) -> None:
        super().close()
        self._drop_workspace()
