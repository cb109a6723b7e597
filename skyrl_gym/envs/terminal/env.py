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

The grading sandbox is a `SandboxSpec(grading=True)` one: its /proc is read-only, so a program
the check runs (`python3 calc.py`, `./sum.sh`) cannot open the check's `/proc/PID/mem` to
rewrite where its shell resumes (ptrace and process_vm_writev are refused by the seccomp
filter), and where the sandbox has a second uid (`GradingIsolation.TWO_UID`: bwrap as root)
programs from the workspace run as the agent's uid, so they cannot signal the check either.
The check files in `/tmp/grader` are the checker's alone (0700/0600): with two uids the
agent's programs can neither read nor write them. Where the sandbox has no second uid
(`SINGLE_UID`), the episode's `info["episode"]["notes"]` says `single_uid`.
`info["episode"]["check"]["isolation"]` names the isolation either way. What no sandbox can
isolate is agent code a check imports into its own process: the bundled checks never do
(terminal-009's test runs `fib` in a child and compares what it prints), and they take
expected values from the task, never from the workspace (see `make_tasks`).

The workspace is a `Workspace`: size-capped (`disk_bytes`, a tmpfs as root), recorded with its
owner so `skyrl sandbox reap` removes it after a SIGKILL, and released by `close()` or the next
`reset()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import ClassVar, TypedDict

from skyrl_gym.sandbox_env import EpisodeInfo, SandboxToolEnv
from skyrl_gym.stages import StageStop
from skyrl_gym.tasks import TaskRow, load_tasks
from skyrl_sdk.sandboxes import (
    DEFAULT_DISK_BYTES,
    Backend,
    GradingIsolation,
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
SINGLE_UID_NOTE = (
    "single_uid: the check's sandbox had no second uid (not root, no exec shim, or another "
    "backend), so the programs it ran from the workspace had the check's uid"
)
"""The episode's note when its grading sandbox had `GradingIsolation.SINGLE_UID`."""


class CheckResult(TypedDict):
    """How the task's check ran on the final workspace (`TerminalEnv.last_check`, and
    `info["episode"]["check"]`)."""

    exit_code: int
    """The check's exit status: 0 passes."""
    output: str
    """The last 2000 characters of its output."""
    timed_out: bool
    """The check ran past `check_timeout_s`."""
    isolation: str
    """The grading sandbox's `GradingIsolation` value (`two_uid`, `single_uid`)."""


class _StageStopInfo(TypedDict, total=False):
    """The optional `stage_stop` of `TerminalEpisodeInfo` (a base of its own: a string
    `NotRequired` annotation is not seen by Python 3.11's TypedDict)."""

    stage_stop: str
    """`verifier_timeout` (a `StageStop` value) when the check ran past `check_timeout_s`
    (no reward; the agent's own limit is the rollout's, its trajectory's `timeout`); absent
    otherwise."""


class TerminalEpisodeInfo(EpisodeInfo, _StageStopInfo):
    """`TerminalEnv.episode_info`: how the check graded the final workspace (in
    `info["episode"]`); `notes` holds `SINGLE_UID_NOTE` when the grading sandbox had no second
    uid."""

    check: CheckResult | None
    """The check's run (`TerminalEnv.last_check`); None before the first graded episode."""


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
        self.last_check: CheckResult | None = None
        """How the last episode's check ran (None before the first graded episode)."""
        super().__init__(
            bundled_tasks() if tasks is None else tasks,
            spec=spec or SandboxSpec(memory_bytes=512 << 20, pids=128, timeout_s=timeout_s),
            backend=backend,
            tool_format=tool_format,
        )

    def make_tools(self, sandbox: Sandbox) -> list[Tool]:
        return [bash_tool(sandbox, timeout_s=self.timeout_s), *file_tools(sandbox)]

    def prompt(self, task: TaskRow) -> str:
        return task["instruction"]

    def sandbox_spec(self, task: TaskRow) -> SandboxSpec:
        # The workspace belongs to the env, not to the agent's sandbox: it must outlive that
        # sandbox so the grading phase can look at it.
        self._drop_workspace()
        self._workspace = Workspace.create("skyrl-terminal-", disk_bytes=self.disk_bytes)
        return replace(
            self.sandbox_template,
            workspace_dir=str(self._workspace.path),
            files=task.get("files") or {},
        )

    async def ascore(self, task: TaskRow, answer: str) -> float:
        """Run the task's check in a fresh sandbox on the agent's final workspace."""
        await self._close_sandbox()  # end the agent phase: every process it left is killed
        assert self._workspace is not None
        spec = replace(
            self.sandbox_template,
            workspace_dir=str(self._workspace.path),
            files={},
            network=False,
            grading=True,  # read-only /proc; agent programs under the agent's uid
        )
        # Leaving the `async with` closes the grading sandbox (killing anything the check
        # started) before the result is used.
        async with create_sandbox(spec, self.backend) as grader:
            check_files = task.get("check_files") or {}
            if check_files:
                # The checker's own: with two uids, the agent's programs the check runs cannot
                # read them (expected values) any more than write them.
                made = await grader.exec(["mkdir", "-m", "700", "-p", GRADER_DIR])
                if not made.ok:
                    raise RuntimeError(f"cannot create {GRADER_DIR}: {made.output[-300:]}")
            for rel, content in check_files.items():
                await grader.write_file(f"{GRADER_DIR}/{rel}", content, mode=0o600)
            result = await grader.exec(
                task["check"],
                timeout=self.check_timeout_s,
                env=grading_env({"GRADER": GRADER_DIR}),
            )
            isolation = grader.grading_isolation
        self.last_check = {
            "exit_code": result.exit_code,
            "output": result.output[-2000:],
            "timed_out": result.timed_out,
            "isolation": isolation.value,
        }
        return 1.0 if result.ok else 0.0

    def episode_info(self) -> TerminalEpisodeInfo:
        info: TerminalEpisodeInfo = {"check": self.last_check}
        if self.last_check and self.last_check["timed_out"]:
            info["stage_stop"] = StageStop.VERIFIER_TIMEOUT.value
        if self.last_check and self.last_check["isolation"] == GradingIsolation.SINGLE_UID.value:
            info["notes"] = [SINGLE_UID_NOTE]
        return info

    def _drop_workspace(self) -> None:
        workspace, self._workspace = self._workspace, None
        if workspace is not None:
            workspace.close()

    def close(self) -> None:
        super().close()
        self._drop_workspace()
