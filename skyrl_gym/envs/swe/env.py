"""`swe`: fix a GitHub-style issue in a repository; the reward is the SWE-bench resolved check.

Task rows are SWE-bench instances (plus `task_id` = `instance_id`); by default the bundled
offline instances, whose repositories are built locally on first use. The agent sees the issue
text and a sandbox whose workspace `/testbed` holds the repository at `base_commit`, with the
tools `bash`, `view_file`, `edit_file`, `search` and `submit`.

Grading happens after `submit`, in a fresh phase the agent cannot have changed:
1. the agent's sandbox is closed (every process it started dies);
2. its changes are read as a diff against `base_commit` through a pristine copy of the git
   directory taken before the episode (the workspace's own `.git` is not trusted);
3. changes to test files (test directories, `test_*.py`, `conftest.py`, ...) are dropped;
4. the remaining patch is evaluated like a prediction by the SWE-bench harness: a fresh
   checkout the agent never wrote, in a fresh sandbox, the test files restored from the
   instance's test patch, the FAIL_TO_PASS and PASS_TO_PASS tests run from a process
   environment the agent never wrote (`HOME` off the repository, user site-packages off, pytest
   from a read-only package directory, the repository off the start-up path), with the test
   runner's own files (pytest configuration, conftest.py, sitecustomize, `.pth`, entry
   points) as `base_commit` has them, whatever the agent did to them; see `harness`.
   Reward 1.0 when resolved, else 0.0.

The instance's gold patch and hidden tests never enter the agent's sandbox, which sees the
repository, a read-only directory with pytest (`packages.sandbox_packages`) and the minimal
system, never the project's checkout or venv. The episode's directory is a `Workspace`
(size-capped by `disk_bytes`, reaped after a SIGKILL).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, cast

from skyrl_gym.core import Messages, ResetNeeded, StepReturn, coerce_action
from skyrl_gym.envs.swe.harness import (
    HarnessConfig,
    InstanceResult,
    evaluate_instance,
    prepare_workspace,
    safe_name,
)
from skyrl_gym.envs.swe.instances import (
    Prediction,
    SWEInstance,
    is_test_path,
    load_instances,
    split_patch,
)
from skyrl_gym.envs.swe.repos import snapshot_git_dir, workspace_patch
from skyrl_gym.sandbox_env import EpisodeInfo, SandboxToolEnv
from skyrl_gym.step_info import StepInfo
from skyrl_gym.tasks import TaskRow
from skyrl_gym.tool_env import Tooling, answer
from skyrl_sdk.sandboxes import DEFAULT_DISK_BYTES, Backend, Sandbox, SandboxSpec, Workspace
from skyrl_sdk.tools import ParseError, ParseErrorKind, Tool, ToolFormat, Toolset, tool
from skyrl_sdk.tools.bash import bash_tool, describe_result
from skyrl_sdk.tools.files import file_tools

SUBMIT = "submit"
MAX_SEARCH_LINES = 200


def bundled_rows() -> list[TaskRow]:
    """The bundled instances as task rows."""
    from skyrl_gym.envs.swe.bundled.build import INSTANCES_FILE

    return _instance_rows(load_instances(INSTANCES_FILE))


def _instance_rows(instances: Sequence[SWEInstance]) -> list[TaskRow]:
    """SWE-bench instances as task rows (`task_id` = `instance_id`; the other fields are
    `SWEInstance`'s, which `TaskRow` leaves undeclared)."""
    return [cast(TaskRow, i.to_row()) for i in instances]


class SWEEpisodeInfo(EpisodeInfo):
    """`SWEEnv.episode_info`: how the harness graded the submitted patch (in
    `info["episode"]`)."""

    outcome: str | None
    """The instance's `Outcome` value (`resolved`, `unresolved`, `error`, ...); None before
    grading."""
    error: str | None
    """What went wrong, for errors, timeouts, skips and failed applies."""
    model_patch: str | None
    """The patch that was graded (test-file changes dropped when `strip_tests`)."""
    stripped_test_files: list[str]
    """The test files whose changes were dropped from the patch."""
    tests_status: dict[str, dict[str, list[str]]]
    """SWE-bench's per-test report (`FAIL_TO_PASS`, `PASS_TO_PASS`, ... -> the `success` and
    `failure` test lists); {} when the tests never ran."""


def search_tool(sandbox: Sandbox, *, timeout_s: float = 30.0) -> Tool:
    """A `search` tool: `grep -rnE` over the repository in `sandbox`."""

    async def search(pattern: str, path: str = ".", include: str = "") -> str:
        """Search the repository for a regular expression; lists `file:line:text` matches.

        Args:
            pattern: Extended regular expression, e.g. `def merge` or `class \\w+Cache`.
            path: File or directory to search, relative to the repository root.
            include: Only search files whose name matches this glob, e.g. `*.py`.
        """
        argv = ["grep", "-rnIE", "--exclude-dir=.git"]
        if include:
            argv.append(f"--include={include}")
        argv += ["-e", pattern, "--", path]
        result = await sandbox.exec(argv, timeout=timeout_s)
        if result.exit_code == 1 and not result.stderr:
            return "[no matches]"
        if result.exit_code > 1 or result.timed_out:
            return describe_result(result, timeout_s)
        lines = result.stdout.splitlines()
        shown = "\n".join(line[:300] for line in lines[:MAX_SEARCH_LINES])
        if len(lines) > MAX_SEARCH_LINES:
            shown += f"\n[... {len(lines) - MAX_SEARCH_LINES} more matches; narrow the search]"
        return shown

    return tool(search)


@tool
def submit() -> str:
    """Submit your changes to the repository as the fix. This ends the episode; the changes
    are then tested."""
    return "submitted"


def strip_test_changes(patch: str) -> tuple[str, list[str]]:
    """The patch without its changes to test files, and the paths dropped."""
    kept: list[tuple[str, str]] = []
    dropped: list[tuple[str, str]] = []
    for path, chunk in split_patch(patch):
        (dropped if is_test_path(path) else kept).append((path, chunk))
    return "".join(chunk for _, chunk in kept), [p for p, _ in dropped]


class SWEEnv(SandboxToolEnv):
    """Resolve a SWE-bench instance with shell and file tools, then call `submit`."""

    required_fields: ClassVar[tuple[str, ...]] = ("repo", "base_commit", "test_patch")
    system_prompt: ClassVar[str] = (
        "You are a software engineer. The repository is checked out in /testbed (your working "
        "directory). Fix the issue the user describes by editing the source code with the "
        "tools; you can run code and tests with bash (e.g. `python3 -m pytest -q`). Hidden "
        "tests check your fix, and changes to test files are ignored. When you are done, "
        "call submit."
    )

    def __init__(
        self,
        tasks: Sequence[TaskRow] | None = None,
        *,
        instances: str | None = None,
        repos: str | None = None,
        backend: str | Backend = Backend.BWRAP,
        tool_format: str | ToolFormat = "hermes",
        timeout_s: float = 60.0,
        eval_timeout_s: float = 900.0,
        allow_clone: bool = False,
        strip_tests: bool = True,
        results_dir: str | None = None,
        python: str = sys.executable,
        memory_bytes: int = 2 << 30,
        max_output_chars: int = 16_000,
        disk_bytes: int | None = DEFAULT_DISK_BYTES,
    ):
        if tasks is None:
            tasks = _instance_rows(load_instances(instances)) if instances else None
        self._bundled = tasks is None
        self.timeout_s = timeout_s
        self.strip_tests = strip_tests
        self.results_dir = Path(results_dir) if results_dir else None
        self.harness = HarnessConfig(
            backend=str(Backend(backend).value),
            repos_dir=repos,
            allow_clone=allow_clone,
            timeout_s=eval_timeout_s,
            python=python,
            memory_bytes=memory_bytes,
            pids=512,
            workers=1,
            disk_bytes=disk_bytes,
        )
        self.disk_bytes = disk_bytes
        """Size cap of the episode's directory (repository + pristine git dir); None: none."""
        self._workspace: Workspace | None = None
        self.last_result: InstanceResult | None = None
        self.last_patch: str | None = None
        self.stripped: list[str] = []
        super().__init__(
            bundled_rows() if tasks is None else tasks,
            spec=SandboxSpec(memory_bytes=memory_bytes, pids=512, timeout_s=timeout_s),
            backend=backend,
            tool_format=tool_format,
            max_output_chars=max_output_chars,
        )

    # ---- episode set-up ---------------------------------------------------------------------

    def _config(self) -> HarnessConfig:
        if self._bundled and self.harness.repos_dir is None:
            from skyrl_gym.envs.swe.bundled.build import ensure_repos

            self.harness = replace(self.harness, repos_dir=str(ensure_repos()))
        return self.harness

    def make_tools(self, sandbox: Sandbox) -> list[Tool]:
        return [
            bash_tool(sandbox, timeout_s=self.timeout_s),
            *file_tools(sandbox),
            search_tool(sandbox, timeout_s=self.timeout_s),
            submit,
        ]

    def prompt(self, task: TaskRow) -> str:
        row: Mapping[str, Any] = task  # SWEInstance's fields, which TaskRow leaves undeclared
        return (
            f"Repository: {row['repo']} (checked out in /testbed)\n\n"
            f"<issue>\n{row.get('problem_statement', '').strip()}\n</issue>\n\n"
            "Change the source code so that the issue is resolved, then call submit."
        )

    def sandbox_spec(self, task: TaskRow) -> SandboxSpec:
        # The workspace belongs to the env: it outlives the agent's sandbox so the grading
        # phase can read it; the pristine git directory next to it is never mounted.
        self._drop_workspace()
        self._workspace = Workspace.create("skyrl-swe-env-", disk_bytes=self.disk_bytes)
        self._root.chmod(0o711)  # the sandbox user must reach the workspace inside it
        workspace = self._root / "testbed"
        instance = SWEInstance.from_row(task)
        config = self._config()
        spec, _ = prepare_workspace(instance, workspace, config)
        snapshot_git_dir(workspace, self._root / "pristine.git")
        return replace(spec, timeout_s=self.timeout_s, pids=self.sandbox_template.pids)

    async def _reset(
        self, seed: int | None, options: dict[str, Any] | None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        self.last_result, self.last_patch, self.stripped = None, None, []
        _, info = await super()._reset(seed, options)
        # The base class ends episodes with `answer`; this env ends them with `submit`.
        tools = [t for t in self.toolset if t.name != answer.name]
        self.toolset = Toolset(tools, max_output_chars=self.max_output_chars)
        instructions = self.tool_format.instructions(tools)
        self.tooling = Tooling(
            self.toolset,
            self.tool_format,
            {"role": "system", "content": f"{self.system_prompt}\n\n{instructions}"},
        )
        assert self.task is not None
        return self.start(self.task), info

    async def _step(self, action: str) -> StepReturn:
        if self.task is None or self.sandbox is None:
            raise ResetNeeded("call reset() before step()")
        parsed = self.tool_format.parse(coerce_action(action))
        calls = parsed.tool_calls
        error = parsed.error or next(filter(None, map(self.toolset.check, calls)), None)
        if error is None and not calls:
            error = ParseError(
                ParseErrorKind.NO_ACTION, "call a tool, or call `submit` when the issue is fixed"
            )
        info = StepInfo(tuple(calls), error).write()
        if error is not None:
            return [self.tool_format.error_message(error)], 0.0, False, False, info
        observations: Messages = []
        for call in calls:
            if call.name == SUBMIT:
                reward = float(await self.ascore(self.task, ""))
                StepInfo(tuple(calls), correct=reward > 0, episode=self.episode_info()).write(info)
                return observations, reward, True, False, info
            result = await self.toolset.aexecute(call)
            observations.append(self.tool_format.render_result(result))
        return observations, 0.0, False, False, info

    # ---- grading ----------------------------------------------------------------------------

    async def ascore(self, task: TaskRow, answer: str) -> float:
        """Evaluate the agent's changes in a fresh phase; 1.0 when the instance is resolved."""
        import asyncio

        await self._close_sandbox()  # end the agent phase: every process it left is killed
        instance = SWEInstance.from_row(task)
        patch = await asyncio.to_thread(
            workspace_patch,
            self._root / "testbed",
            self._root / "pristine.git",
            instance.base_commit,
        )
        if self.strip_tests:
            patch, self.stripped = strip_test_changes(patch)
        self.last_patch = patch
        prediction = Prediction(
            instance_id=instance.instance_id, model_name_or_path="swe-env", model_patch=patch
        )
        log_dir = None
        if self.results_dir is not None:
            log_dir = self.results_dir / safe_name(instance.instance_id)
        result = await evaluate_instance(instance, prediction, self._config(), log_dir)
        self.last_result = result
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            (log_dir / "prediction.json").write_text(
                json.dumps(prediction.model_dump()) + "\n", encoding="utf-8"
            )
            (log_dir / "result.json").write_text(
                json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8"
            )
        return 1.0 if result.resolved else 0.0

    def episode_info(self) -> SWEEpisodeInfo:
        result = self.last_result
        return {
            "outcome": result.outcome.value if result else None,
            "error": result.error if result else None,
            "model_patch": self.last_patch,
            "stripped_test_files": list(self.stripped),
            "tests_status": (result.report.get("tests_status") if result else None) or {},
        }

    @property
    def _root(self) -> Path:
        assert self._workspace is not None, "reset() first"
        return self._workspace.path

    def _drop_workspace(self) -> None:
        workspace, self._workspace = self._workspace, None
        if workspace is not None:
            workspace.close()

    def close(self) -> None:
        super().close()
        self._drop_workspace()
