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

**Multi-step tasks** (`[[steps]]`, `steps/<name>/...`) play as one episode in one
environment: `reset()` gives step 1's instruction; when the model calls `answer` the step is
verified, and if its reward reaches the step's `min_reward` (and it was not the last) the
observation is the next step's instruction (after that step's `workdir/setup.sh`) and the
episode goes on, with reward 0 for that turn. The last turn's reward is the steps' roll-up
(`multi_step_reward_strategy`: `mean` or `final`); a step whose verifier fails, or whose
setup fails, ends the episode with reward 0. A step's `[steps.agent].timeout_sec` is checked
between turns: the first turn after it has passed ends the step (its action is not run).
Per-step results are in `info["harbor_step"]` of the turn that ended each step and in
`info["episode"]["steps"]`.

Task rows: `{"task_id": <folder name>, "path": <task folder>}`; `task_rows(path)` lists them.
By default the env plays the bundled example tasks.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, TypedDict

import gymnasium as gym

from skyrl_gym.core import Messages, ResetNeeded, StepReturn
from skyrl_gym.envs.harbor.runtime import HarborRuntime, VerifierError, VerifierResult
from skyrl_gym.envs.harbor.task import (
    HarborTask,
    StepSetupError,
    check_env_names,
    find_task_dirs,
    load_task,
    roll_up_rewards,
)
from skyrl_gym.sandbox_env import EpisodeInfo, SandboxToolEnv
from skyrl_gym.stages import StageStop
from skyrl_gym.step_info import StepInfo
from skyrl_gym.tasks import TaskRow
from skyrl_gym.tool_env import ParsedTurn, Tooling, answer
from skyrl_sdk.sandboxes import Backend, Sandbox
from skyrl_sdk.tools import Tool, ToolFormat, Toolset
from skyrl_sdk.tools.bash import bash_tool
from skyrl_sdk.tools.files import file_tools

BUNDLED_TASKS = Path(__file__).with_name("tasks")
"""The bundled offline example tasks."""


def task_rows(path: str | os.PathLike[str] = BUNDLED_TASKS) -> list[TaskRow]:
    """One row per task folder under `path` (or for `path` itself when it is a task)."""
    return [{"task_id": p.name, "path": str(p)} for p in find_task_dirs(path)]


STEP_INFO_KEY = "harbor_step"
"""`info` key of the turn that ended a step of a multi-step task: that step's outcome."""


class StepEnd(enum.StrEnum):
    """What ended one step of a multi-step episode."""

    ANSWER = "answer"
    """The model called `answer`."""
    TIMEOUT = "timeout"
    """A turn came after the step's `[steps.agent].timeout_sec` had passed."""
    EPISODE_END = "episode_end"
    """The episode ended another way (the caller's turn or time limit) and `averify` graded
    the step it was in."""


class StepOutcomeJSON(TypedDict):
    """`StepOutcome.to_json`: one step's record (`info["harbor_step"]`, and an entry of
    `info["episode"]["steps"]`)."""

    name: str
    """The step's name (`[[steps]].name`)."""
    reward: float | None
    """The step's primary reward; None when its verifier gave none."""
    rewards: dict[str, float] | None
    """Every reward the step's verifier wrote; None without a reward."""
    verifier_error: str | None
    """Why the step has no reward (a `VerifierError` value), or None."""
    verifier_message: str
    """Details of that error ("" without one)."""
    agent_s: float
    """Seconds of the step's agent phase (`StepOutcome.agent_s`)."""
    verifier_s: float
    """Seconds of the step's verifier phase."""
    ended_by: str
    """What ended the step (a `StepEnd` value)."""
    below_min_reward: bool
    """The step's reward was below its `min_reward`."""
    stopped_episode: bool
    """The episode ended after this step."""


class HarborEpisodeInfo(EpisodeInfo, total=False):
    """`HarborEnv.episode_info`: the verifier's outcome (in `info["episode"]`).

    Empty before the episode is graded; the four verifier fields once it is; `steps` and
    `step_setup_error` as well for a multi-step task."""

    rewards: dict[str, float] | None
    """Every reward the verifier wrote (a multi-step task: the steps' roll-up); None without
    a reward."""
    verifier_error: str | None
    """Why there is no reward (a `VerifierError` value), or None."""
    verifier_message: str
    """Details of that error ("" without one)."""
    grading_isolation: str | None
    """The verifier sandbox's `GradingIsolation` value (`two_uid`, `single_uid`); None when it
    did not start."""
    steps: list[StepOutcomeJSON]
    """A multi-step task's verified steps, in order."""
    step_setup_error: str | None
    """A multi-step task's failed `workdir/setup.sh`, if one failed."""
    stage_stop: str
    """`verifier_timeout` (a `StageStop` value) when test.sh ran past `[verifier].timeout_sec`
    (no reward); absent otherwise. The agent's own limit is the rollout's: its trajectory's
    `timeout`."""


@dataclass(frozen=True)
class StepOutcome:
    """One verified step of a multi-step episode (`HarborEnv.step_outcomes`)."""

    name: str
    """The step's name (`[[steps]].name`)."""
    result: VerifierResult
    """The step's verifier outcome (its rewards, or why it gave none)."""
    agent_s: float
    """Seconds from the step's start (after its setup) to the end of its agent phase."""
    ended_by: StepEnd
    """What ended the step."""
    below_min_reward: bool
    """Its reward was below the step's `min_reward` (the episode stopped there)."""
    stopped_episode: bool
    """The episode ended after this step: its verifier failed, its reward was below its
    `min_reward`, or it was the last."""

    def to_json(self) -> StepOutcomeJSON:
        result = self.result
        return {
            "name": self.name,
            "reward": result.reward,
            "rewards": result.rewards,
            "verifier_error": result.error.value if result.error else None,
            "verifier_message": result.message,
            "agent_s": self.agent_s,
            "verifier_s": result.duration_s,
            "ended_by": self.ended_by.value,
            "below_min_reward": self.below_min_reward,
            "stopped_episode": self.stopped_episode,
        }


def scale_timeouts(task: HarborTask, multiplier: float) -> HarborTask:
    """`task` with its build, agent and verifier timeouts (its steps' too) times
    `multiplier`."""
    if multiplier == 1.0:
        return task
    agent_s = task.agent.timeout_s
    build_s = task.environment.build_timeout_s * multiplier
    return replace(
        task,
        environment=replace(task.environment, build_timeout_s=build_s),
        agent=replace(task.agent, timeout_s=agent_s and agent_s * multiplier),
        verifier=replace(task.verifier, timeout_s=task.verifier.timeout_s * multiplier),
        steps=tuple(
            replace(
                s,
                agent_timeout_s=s.agent_timeout_s and s.agent_timeout_s * multiplier,
                verifier_timeout_s=s.verifier_timeout_s * multiplier,
            )
            for s in task.steps
        ),
    )


class HarborEnv(SandboxToolEnv):
    """Solve a Harbor task in its environment with shell and file tools; the task's verifier
    gives the reward after `answer` (a multi-step task: after each step's `answer`, and the
    episode goes on with the next step; see the module docstring).

    `timeout_multiplier` scales every task's build, agent and verifier timeouts (its steps'
    too)."""

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
        timeout_multiplier: float = 1.0,
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
        """The current episode's verifier outcome, once graded (a multi-step task: the
        steps' roll-up, or the failed step's outcome)."""
        if timeout_multiplier <= 0:
            raise ValueError(f"timeout_multiplier must be positive, got {timeout_multiplier}")
        self.timeout_multiplier = timeout_multiplier
        """Scales every task's agent and verifier timeouts (its steps' too)."""
        self.step_outcomes: list[StepOutcome] = []
        """A multi-step episode's verified steps so far, in order (empty otherwise)."""
        self.step_setup_error: StepSetupError | None = None
        """The step whose `workdir/setup.sh` failed in this episode, if one did."""
        self._step_index = 0
        self._step_started = 0.0
        self._steps_over = False
        self._prestarted: str | None = None  # the task id `astart_environment` started

    def make_tools(self, sandbox: Sandbox) -> list[Tool]:
        shell = self.runtime.shell if self.runtime is not None else "bash"
        return [bash_tool(sandbox, timeout_s=self.timeout_s, shell=shell), *file_tools(sandbox)]

    def prompt(self, task: TaskRow) -> str:
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
        prestarted = self._prestarted == row["task_id"] and self.runtime is not None
        self._prestarted = None
        if not prestarted:
            await self._start_environment(row)
        runtime = self.runtime
        assert runtime is not None and self.sandbox is not None
        self._step_started = time.monotonic()
        self._bind_tools(self.sandbox)
        return self.start(row), {"task_id": row["task_id"], "notes": list(runtime.notes)}

    async def astart_environment(self, task: TaskRow) -> None:
        """Build and start `task`'s environment ahead of the reset that plays it
        (`reset(options={"task": task})`), which then takes it as it is: the agent's clock
        (the rollout's timeout counts from the reset) starts with its agent phase, and the
        build and start are never charged to it. Raises what starting raises (recorded in
        `start_error`, `step_setup_error`)."""
        row = self.choose_task({"task": task})
        # On the env's own loop, as reset and step: the sandbox is bound to it.
        await self._loop.arun(self._start_environment(row))
        self._prestarted = row["task_id"]

    async def _start_environment(self, row: TaskRow) -> None:
        """Close the last episode's environment, then build and start `row`'s (a multi-step
        task: step 1's sandbox and its setup hook)."""
        await self._close_sandbox()
        self.task, self.start_error, self.verifier_result = row, None, None
        self.step_outcomes, self.step_setup_error = [], None
        self._step_index, self._steps_over = 0, False
        task = scale_timeouts(
            load_task(row["path"], pass_env=self.pass_env), self.timeout_multiplier
        )
        runtime = self.make_runtime(
            task, backend=Backend(self.backend), rootfs=self.rootfs, network=self.network
        )
        self.runtime = runtime
        try:
            if task.steps:  # step 1's view of the task: its instruction, tests, setup hook
                self.sandbox = await runtime.begin_step(task.steps[0])
            else:
                self.sandbox = await runtime.start()
        except BaseException as e:
            if isinstance(e, StepSetupError):
                self.step_setup_error = e
            self.start_error = f"{type(e).__name__}: {e}"
            raise

    def _bind_tools(self, sandbox: Sandbox) -> None:
        """The episode's tools on `sandbox` (each step of a multi-step task has its own)."""
        self.toolset = Toolset(
            [*self.make_tools(sandbox), answer], max_output_chars=self.max_output_chars
        )
        # The same schemas every time, hence the same system message.
        instructions = self.tool_format.instructions(list(self.toolset))
        self.tooling = Tooling(
            self.toolset,
            self.tool_format,
            {"role": "system", "content": f"{self.system_prompt}\n\n{instructions}"},
        )

    # ---- multi-step tasks ---------------------------------------------------------------------

    @property
    def multi_step(self) -> bool:
        """True when the current episode plays a multi-step task."""
        runtime = self.runtime
        return runtime is not None and bool((runtime.base_task or runtime.task).steps)

    def _step_overdue(self) -> bool:
        assert self.runtime is not None
        limit = self.runtime.task.agent.timeout_s
        return limit is not None and time.monotonic() - self._step_started > limit

    async def _step(self, action: str) -> StepReturn:
        if not self.multi_step:
            return await super()._step(action)
        if self.task is None or self.sandbox is None or self._steps_over:
            raise ResetNeeded("call reset() before step()")
        turn = self.interpret(action)
        if self._step_overdue():  # this turn came too late: the step ends without it
            return await self._end_step(turn, StepEnd.TIMEOUT)
        if turn.error is not None:
            return [self.tool_format.error_message(turn.error)], 0.0, False, False, turn.info
        if turn.answer is not None:
            return await self._end_step(turn, StepEnd.ANSWER)
        observations = []
        for call in turn.calls:
            result = await self.toolset.aexecute(call)
            observations.append(self.tool_format.render_result(result))
        return observations, 0.0, False, False, turn.info

    async def _verify_step(self, ended_by: StepEnd) -> tuple[StepOutcome, bool]:
        """Grade the current step; returns its outcome and whether the episode goes on."""
        runtime = self.runtime
        assert runtime is not None and runtime.base_task is not None
        agent_s = time.monotonic() - self._step_started
        result = await runtime.verify()
        steps = runtime.base_task.steps
        step = steps[self._step_index]
        below = step.below_min_reward(result.reward, result.rewards)
        goes_on = result.error is None and not below and self._step_index + 1 < len(steps)
        outcome = StepOutcome(step.name, result, agent_s, ended_by, below, not goes_on)
        self.step_outcomes.append(outcome)
        return outcome, goes_on

    async def _end_step(self, turn: ParsedTurn, ended_by: StepEnd) -> StepReturn:
        """Verify the current step, then go on to the next one (its instruction is the
        observation) or end the episode with the roll-up."""
        runtime = self.runtime
        assert runtime is not None and runtime.base_task is not None
        outcome, goes_on = await self._verify_step(ended_by)
        turn.info[STEP_INFO_KEY] = outcome.to_json()
        if goes_on:
            self._step_index += 1
            self.sandbox = None
            try:
                self.sandbox = await runtime.begin_step(runtime.base_task.steps[self._step_index])
            except StepSetupError as e:  # the episode ends here, with no reward
                self.step_setup_error = e
            except Exception as e:  # the environment broke: no reward either (a cancelled
                # episode, e.g. the caller's time limit, is not the environment's fault)
                self.start_error = f"{type(e).__name__}: {e}"
                raise
            else:
                self._step_started = time.monotonic()
                self._bind_tools(self.sandbox)
                message = {"role": "user", "content": runtime.task.instruction}
                return [message], 0.0, False, False, turn.info
        final = self._finish_steps()
        reward = final.reward if final.reward is not None else 0.0
        metrics = {**self.episode_metrics(turn.answer or "", reward), **self.episode_info()}
        StepInfo(tuple(turn.calls), episode=metrics).write(turn.info)
        return [], reward, True, False, turn.info

    def _finish_steps(self) -> VerifierResult:
        """The episode's result from its steps: the failed step's, a void one after a failed
        setup, else the roll-up (`multi_step_reward_strategy`)."""
        runtime = self.runtime
        assert runtime is not None and runtime.base_task is not None
        self._steps_over = True
        spent = sum(o.result.duration_s for o in self.step_outcomes)
        failed = next((o for o in self.step_outcomes if o.result.error is not None), None)
        if failed is not None:
            message = f"step {failed.name}: {failed.result.message}"
            final = replace(failed.result, message=message, duration_s=spent)
        elif self.step_setup_error is not None or self.start_error is not None:
            why = str(self.step_setup_error or self.start_error)
            final = VerifierResult(None, None, why, duration_s=spent)
        else:
            verified = [o.result.rewards for o in self.step_outcomes if o.result.rewards]
            rolled = roll_up_rewards(verified, runtime.base_task.reward_strategy)
            final = VerifierResult(rolled, None, duration_s=spent)
        self.verifier_result = final
        return final

    def close(self) -> None:
        if self.runtime is not None or self.sandbox is not None:
            self._loop.run(self._close_sandbox())

    async def averify(self) -> VerifierResult:
        """End the agent phase (if still open) and grade the episode. Idempotent."""
        if self.runtime is None:
            raise RuntimeError("reset() first")
        if self.multi_step:
            return await self._loop.arun(self._averify_steps())
        result = await self._loop.arun(self.runtime.verify())
        self.verifier_result = result
        return result

    async def _averify_steps(self) -> VerifierResult:
        """A multi-step episode's result; the step it was in (if any) is graded first."""
        if self._steps_over:
            assert self.verifier_result is not None
            return self.verifier_result
        runtime = self.runtime
        in_step = self.sandbox is not None and runtime is not None and runtime.base_task
        if in_step and self.step_setup_error is None and self.start_error is None:
            await self._verify_step(StepEnd.EPISODE_END)
        return self._finish_steps()

    async def ascore(self, task: TaskRow, answer: str) -> float:
        assert self.runtime is not None
        result = await self.runtime.verify()
        self.verifier_result = result
        return result.reward if result.reward is not None else 0.0

    def episode_info(self) -> HarborEpisodeInfo:
        result = self.verifier_result
        if result is None:
            return {}
        info: HarborEpisodeInfo = {
            "rewards": result.rewards,
            "verifier_error": result.error.value if result.error else None,
            "verifier_message": result.message,
            "grading_isolation": result.isolation.value if result.isolation else None,
        }
        if result.error is VerifierError.TIMEOUT:
            info["stage_stop"] = StageStop.VERIFIER_TIMEOUT.value
        if self.multi_step:
            info["steps"] = [o.to_json() for o in self.step_outcomes]
            info["step_setup_error"] = (
                str(self.step_setup_error) if self.step_setup_error is not None else None
            )
        return info
