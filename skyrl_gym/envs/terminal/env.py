"""`terminal`: do a shell task in a sandboxed workspace; a check command grades the result.

Task rows: `instruction`, `files` (the starting workspace, {relative path: text}), `check` (a
shell command; exit status 0 means solved) and optionally `check_files` (helpers the check
uses) and `solution` (a reference shell script, used by the tests).

Grading runs after the episode in a fresh phase the agent cannot tamper with: the agent's
sandbox is closed first (so none of its processes survive), then a new sandbox opens on the
same workspace, the check files are written only now into its private `/tmp` (which the agent
never saw), and the check runs with `grading_env`: `HOME` is that fresh `/tmp`, not the
workspace (so a `usercustomize.py` or `.pth` the agent left under `~/.local` is never loaded),
user site-packages are off, `PYTHONSAFEPATH` keeps the workspace (the check's cwd) off
`sys.path` unless the check puts it there itself, and `PATH` is the system's. The check's exit
status is all the host reads back; the grading sandbox is closed before it is scored.

The workspace is a `Workspace`: size-capped (`disk_bytes`, a tmpfs as root), recorded with its
owner so `skyrl sandbox reap` removes it after a SIGKILL, and released by `close()` or the next
`reset()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from skyrl_gym.sandbox_env import SandboxToolEnv
from skyrl_gym.tasks import TaskRow, load_tasks
from skyrl_sdk.sandboxes import (
    DEFAULT_DISK_BYTES,
    Backend,
    Sandbox,
    SandboxSpec,
    Workspace,
    create_sandbox,
    grading_env,
)
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
        disk_bytes: int | None = DEFAULT_DISK_BYTES,
    ):
        self.timeout_s = timeout_s
        self.check_timeout_s = check_timeout_s
        self.disk_bytes = disk_bytes
        """Size cap of each episode's workspace (None: uncapped, still reaped)."""
        self._workspace: Workspace | None = None
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
        self._workspace = Workspace.create("skyrl-terminal-", disk_bytes=self.disk_bytes)
        return replace(
            self.sandbox_template,
            workspace_dir=str(self._workspace.path),
            files=task.get("files") or {},
        )

    async def ascore(self, task: dict[str, Any], answer: str) -> float:
        """Run the task's check in a fresh sandbox on the agent's final workspace."""
        await self._close_sandbox()  # end the agent phase: every process it left is killed
        assert self._workspace is not None
        spec = replace(
            self.sandbox_template,
            workspace_dir=str(self._workspace.path),
            files={},
            network=False,
        )
        # Leaving the `async with` closes the grading sandbox (killing anything the check
        # started) before the result is used.
        async with create_sandbox(spec, self.backend) as grader:
            for rel, content in (task.get("check_files") or {}).items():
                await grader.write_file(f"{GRADER_DIR}/{rel}", content)
            result = await grader.exec(
                task["check"],
                timeout=self.check_timeout_s,
                env=grading_env({"GRADER": GRADER_DIR}),
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
        workspace, self._workspace = self._workspace, None
        if workspace is not None:
            workspace.close()

    def close(self) -> None:
        super().close()
        self._drop_workspace()
