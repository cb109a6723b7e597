"""`harbor`: any Harbor task folder (or a folder of them) as a terminal `TextEnv`.

Each episode starts the task's environment (`HarborRuntime`), gives the model `bash`,
`view_file` and `edit_file` in it, and ends when the model calls `answer`: the agent's
sandbox is then closed and the task's own verifier (tests/test.sh) grades the result in a
fresh phase. The reward is the verifier's (0.0 when it gives none; the reason is in
`info["episode"]["verifier_error"]`). That phase is hardened against an agent that wants the
reward (HOME off the working directory, no user site-packages, no agent-writable directory on
PATH/PYTHONPATH, result files never read through a symlink, reward files only from the
verifier: `reward_files_disagree`, `reward_file_foreign`); `info["episode"]["grading_isolation"]`
says whether the agent's programs it ran had a uid of their own (`two_uid`) or the
verifier's (`single_uid`). What a task author must still do is in
`skyrl_gym.envs.harbor.runtime`'s docstring.

Task rows: `{"task_id": <folder name>, "path": <task folder>}`; `task_rows(path)` lists them.
By default the env plays the bundled example tasks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym

from skyrl_gym.core import Messages
from skyrl_gym.envs.harbor.runtime import HarborRuntime, VerifierResult
from skyrl_gym.envs.harbor.task import check_env_names, find_task_dirs, load_task
from skyrl_gym.sandbox_env import SandboxToolEnv
from skyrl_gym.tasks import TaskRow
from skyrl_gym.tool_env import Tooling, answer
from skyrl_sdk.sandboxes import Backend, Sandbox
from skyrl_sdk.tools import Tool, ToolFormat, Toolset
from skyrl_sdk.tools.bash import bash_tool
from skyrl_sdk.tools.files import file_tools

BUNDLED_TASKS = Path(__file__).with_name("tasks")
"""The bundled offline example tasks."""


def task_rows(path: str | os.PathLike[str] = BUNDLED_TASKS) -> list[TaskRow]:
    """One row per task folder under `path` (or for `path` itself when it is a task)."""
    return [{"task_id": p.name, "path": str(p)} for p in find_task_dirs(path)]


class HarborEnv(SandboxToolEnv):
    """Solve a Harbor task in its environment with shell and file tools; the task's verifier
    gives the reward after `answer`."""

    required_fields: ClassVar[tuple[str, ...]] = ("path",)
    system_prompt: ClassVar[str] = (
        "You are an agent working in a Linux terminal. Complete the task with the tools; each "
        "bash call starts a fresh shell in the task's working directory. When you are "
        "finished, call the answer tool with 'done'; your work is then checked by the task's "
        "tests."
    )

    def __init__(
        self,
        tasks: Sequence[TaskRow] | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
        backend: str | Backend = Backend.BWRAP,
        rootfs: str | None = None,
        network: bool | None = None,
        tool_format: str | ToolFormat = "hermes",
        timeout_s: float = 60.0,
        pass_env: Sequence[str] = (),
    ):
        rows = list(tasks) if tasks is not None else task_rows(path or BUNDLED_TASKS)
        self.pass_env = check_env_names(pass_env)
        """Host environment variables task.toml's `${VAR}` may take (none by default: a task
        cannot copy the host's secrets into its environment; see `harbor.task`)."""
        super().__init__(rows, backend=backend, tool_format=tool_format)
        self.rootfs = rootfs
        self.network = network
        self.timeout_s = timeout_s
        self.runtime: HarborRuntime | None = None
        """The current episode's environment (kept after the episode until the next reset)."""
        self.make_runtime: Callable[..., HarborRuntime] = HarborRuntime
        """Builds each episode's runtime from (task, backend=, rootfs=, network=): a command
        agent puts one here whose agent phase forwards the model server's port."""
        self.start_error: str | None = None
        """Why the current episode's environment failed to start, if it did."""
        self.verifier_result: VerifierResult | None = None
        """The current episode's verifier outcome, once graded."""

    def make_tools(self, sandbox: Sandbox) -> list[Tool]:
        shell = self.runtime.shell if self.runtime is not None else "bash"
        return [bash_tool(sandbox, timeout_s=self.timeout_s, shell=shell), *file_tools(sandbox)]

    def prompt(self, task: dict[str, Any]) -> str:
        assert self.runtime is not None
        return self.runtime.task.instruction

    async def _close_sandbox(self) -> None:
        runtime, self.runtime = self.runtime, None
        self.sandbox = None
        if runtime is not None:
            await runtime.close()

    async def _reset(
        self, seed: int | None, options: dict[str, Any] | None
    ) -> tuple[Messages, dict[str, Any]]:
        gym.Env.reset(self, seed=seed)
        row = self.choose_task(options)
        await self._close_sandbox()
        self.task, self.start_error, self.verifier_result = row, None, None
        runtime = self.make_runtime(
            load_task(row["path"], pass_env=self.pass_env),
            backend=Backend(self.backend),
            rootfs=self.rootfs,
            network=self.network,
        )
        self.runtime = runtime
        try:
            self.sandbox = await runtime.start()
        except BaseException as e:
            self.start_error = f"{type(e).__name__}: {e}"
            raise
        self.toolset = Toolset(
            [*self.make_tools(self.sandbox), answer],
            max_output_chars=self.max_output_chars,
        )
        instructions = self.tool_format.instructions(list(self.toolset))
        self.tooling = Tooling(
            self.toolset,
            self.tool_format,
            {"role": "system", "content": f"{self.system_prompt}\n\n{instructions}"},
        )
        return self.start(row), {"task_id": row["task_id"], "notes": list(runtime.notes)}

    def close(self) -> None:
        if self.runtime is not None or self.sandbox is not None:
            self._loop.run(self._close_sandbox())

    async def averify(self) -> VerifierResult:
        """End the agent phase (if still open) and grade the episode. Idempotent."""
        if self.runtime is None:
            raise RuntimeError("reset() first")
        result = await self._loop.arun(self.runtime.verify())
        self.verifier_result = result
        return result

    async def ascore(self, task: dict[str, Any], answer: str) -> float:
        assert self.runtime is not None
        result = await self.runtime.verify()
        self.verifier_result = result
        return result.reward if result.reward is not None else 0.0

    def episode_info(self) -> dict[str, Any]:
        result = self.verifier_result
        if result is None:
            return {}
        return {
            "rewards": result.rewards,
            "verifier_error": result.error.value if result.error else None,
            "verifier_message": result.message,
            "grading_isolation": result.isolation.value if result.isolation else None,
        }
