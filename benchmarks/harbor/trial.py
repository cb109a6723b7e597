"""One trial of a Harbor job: one task played by one agent, top to bottom.

`run_trial` prepares (reads the task folder, scales its timeouts), plays (starts the
environment, runs the agent phase under the agent timeout, then the verifier phase), closes
(copies `agent/`, `verifier/`, `artifacts/` from /logs, stops the environment) and records
`<trial>/result.json`. It never raises for a trial's failure: an exception is charged to the
stage running (`Stage`) and its kind is the result's `error`.

A multi-step task (`[[steps]]`) plays its steps in order in one environment with every
agent: each step's setup hook, then its agent phase with the step's instruction (the oracle
runs the step's solve.sh, the command agent runs CMD once per step, the llm agent is told the
next step's instruction in the same episode, `make("harbor")`'s multi-step play), then its
verifier; the trial stops after a step whose verifier fails, whose reward is below its
`min_reward`, or whose `workdir/setup.sh` fails (`step_setup_failed`, no reward).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import secrets
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_gym.envs.harbor.runtime import (
    BuildTimeoutError,
    HarborRuntime,
    TaskEnvironmentError,
    VerifierResult,
)
from skyrl_gym.envs.harbor.task import (
    HarborTask,
    StepSetupError,
    TaskFormatError,
    load_task,
    roll_up_rewards,
)
from skyrl_sdk.agents.policy import SamplingParams
from skyrl_sdk.benchmarks.harbor.agents import (
    AgentFailure,
    AgentKind,
    AgentOutcome,
    run_llm,
    run_oracle,
)
from skyrl_sdk.benchmarks.harbor.records import (
    RESULT_FILE,
    JobConfig,
    Stage,
    StageOutcome,
    StageStatus,
    StepResult,
    TrialError,
    TrialResult,
    stage_outcome,
)
from skyrl_sdk.sandboxes import SandboxError

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.env import HarborEnv
    from skyrl_gym.envs.harbor.task import TaskStep

_AGENT_ERRORS = {
    AgentFailure.TIMEOUT: TrialError.AGENT_TIMEOUT,
    AgentFailure.NONZERO_EXIT: TrialError.AGENT_NONZERO_EXIT,
    AgentFailure.ERROR: TrialError.AGENT_ERROR,
}


def _agent_error(outcome: AgentOutcome) -> TrialError | None:
    """The trial error of an agent phase's failure (None when it went well)."""
    return _AGENT_ERRORS[outcome.failure] if outcome.failure else None


def _verifier_error(verified: VerifierResult) -> TrialError | None:
    """The trial error of a verifier's failure (None when it gave a reward)."""
    return TrialError(verified.error.value) if verified.error is not None else None


def _runtime_options(config: JobConfig) -> dict[str, Any]:
    """The `HarborRuntime` settings a job gives every trial's environment."""
    return {
        "backend": config.backend,
        "rootfs": config.rootfs,
        "network": config.network,
        "pull": config.pull,
    }


@dataclass(frozen=True)
class _TrialPlan:
    """A trial ready to play: what it plays, with what, and where it writes."""

    trial_dir: Path
    """`<out>/<trial_name>`: result.json and the copied logs."""
    header: TrialResult
    """The fields fixed when the trial starts (task, trial name, agent, backend, start time),
    no reward and no error yet: the record step fills in the rest."""
    t0: float
    """`time.perf_counter()` when the trial started (for `duration_s`)."""
    task: HarborTask
    """The task as this job plays it: verifier timeout scaled, `require_exit_zero` applied."""
    agent_timeout: float | None
    """The single-step agent phase's limit, scaled (None: no limit)."""
    config: JobConfig
    """The job's settings."""
    policy: Any
    """The llm agent's `Policy`, or the command agent's `CommandAgentRunner` (None else)."""
    on_trajectory: Callable[[Any], None] | None
    """Called with each graded trajectory (the job's trajectories.jsonl)."""


@dataclass(frozen=True)
class _TrialFailure:
    """Why a trial's play stopped early (an exception charged to the stage running)."""

    error: TrialError | None = None
    """The kind (None: the play ran to its end)."""
    message: str = ""
    """Details of `error`."""


@dataclass
class _TrialRun:
    """What a trial has gathered while it plays, filled in stage by stage (mutable: an
    exception part-way leaves what ran so far for the record)."""

    stages: dict[Stage, StageOutcome]
    """Each stage that ran (or failed) so far."""
    read_s: float = 0.0
    """Seconds reading the task folder (the `build` stage's first part; the environment's
    build, `HarborRuntime.build_s`, is the rest)."""
    environment_setup_s: float = 0.0
    """Seconds to build / start the environment."""
    agent_execution_s: float = 0.0
    """Seconds of the agent phase."""
    verifier_s: float = 0.0
    """Seconds of the verifier phase."""
    env: HarborEnv | None = None
    """The llm agent's `make("harbor")` env (closed at the end; it owns `runtime`)."""
    runtime: HarborRuntime | None = None
    """The trial's environment once it exists (its logs are copied at the end)."""
    outcome: AgentOutcome = field(default_factory=AgentOutcome)
    """The agent phase's outcome (a multi-step trial: its first failure)."""
    verified: VerifierResult | None = None
    """The verifier's result (a multi-step trial: the rolled-up one)."""
    steps: list[StepResult] = field(default_factory=list)
    """A multi-step trial's steps that ran."""
    running: Stage = Stage.START
    """The stage now running: an exception is charged to it."""
    since: float = field(default_factory=time.perf_counter)
    """When `running` began."""

    def begin(self, stage: Stage) -> None:
        """`stage` starts now."""
        self.running, self.since = stage, time.perf_counter()

    def fail(self, error: TrialError, message: str) -> _TrialFailure:
        """Charge `error` to the stage running (the environment's build failing while it
        starts: to `build`, reading the task and the build, nothing after it ran)."""
        if self.running is Stage.START and self.runtime is not None and self.runtime.build_failed:
            seconds = self.read_s + self.runtime.build_s
            self.stages[Stage.BUILD] = stage_outcome(seconds, error, message)
            self.stages.pop(Stage.START, None)
            return _TrialFailure(error, message)
        self.stages[self.running] = stage_outcome(time.perf_counter() - self.since, error, message)
        return _TrialFailure(error, message)

    def started(self, seconds: float) -> None:
        """The environment started in `seconds`: its build (`HarborRuntime.build_s`) is
        the `build` stage's (after reading the task), the rest the `start` stage's."""
        build_s = self.runtime.build_s if self.runtime is not None else 0.0
        self.stages[Stage.BUILD] = stage_outcome(self.read_s + build_s)
        self.stages[Stage.START] = stage_outcome(max(seconds - build_s, 0.0))

    def fail_build(self, e: BuildTimeoutError) -> _TrialFailure:
        """The environment's build ran past its limit: a `build_timeout` of the `build`
        stage (reading the task and the build), nothing after it ran; no reward."""
        error, message = TrialError.BUILD_TIMEOUT, str(e)
        build_s = self.runtime.build_s if self.runtime is not None else 0.0
        build_s = build_s or time.perf_counter() - self.since
        self.stages[Stage.BUILD] = stage_outcome(self.read_s + build_s, error, message)
        self.stages.pop(Stage.START, None)
        self.verified = None
        return _TrialFailure(error, message)

    def fail_setup(self, e: StepSetupError) -> _TrialFailure:
        """A step's setup hook failed: charged to `start` (on top of what it took before);
        the step is named in the message; no reward."""
        error, message = TrialError.STEP_SETUP, str(e)
        before = self.stages.get(Stage.START, StageOutcome()).duration_s
        self.stages[Stage.START] = stage_outcome(
            before + time.perf_counter() - self.since, error, message
        )
        self.verified = None
        return _TrialFailure(error, message)


async def run_trial(
    task_dir: Path,
    config: JobConfig,
    out: Path,
    *,
    policy: Any = None,
    on_trajectory: Callable[[Any], None] | None = None,
) -> TrialResult:
    """Run one trial; never raises for trial failures (they are in the result).

    Top to bottom: prepare (read the task folder, scale its timeouts), play (start the
    environment, the agent phase, per step for a multi-step task, and the verifier), close
    (copy the logs, stop the environment), record (`<trial>/result.json`)."""
    trial_name = f"{task_dir.name}__{secrets.token_hex(4)[:7]}"
    trial_dir = out / trial_name
    trial_dir.mkdir(parents=True, exist_ok=True)
    started, t0 = time.time(), time.perf_counter()
    header = TrialResult(
        task=task_dir.name,
        trial_name=trial_name,
        task_path=str(task_dir),
        agent=config.agent.value,
        backend=config.backend.value,
        reward=None,
        rewards=None,
        error=None,
        started_at=started,
    )
    try:
        task = load_task(task_dir, pass_env=config.pass_env)
    except TaskFormatError as e:
        return _invalid_task(trial_dir, header, t0, e)
    read_s = time.perf_counter() - t0
    run = _TrialRun(stages={Stage.BUILD: stage_outcome(read_s)}, read_s=read_s)
    plan = _prepare(trial_dir, header, t0, task, config, policy, on_trajectory)
    run.begin(Stage.START)
    failure = _TrialFailure()
    try:
        await _play(plan, run)
    except StepSetupError as e:
        failure = run.fail_setup(e)
    except BuildTimeoutError as e:  # before its base class: the build's own stop reason
        failure = run.fail_build(e)
    except (TaskEnvironmentError, SandboxError, OSError) as e:
        failure = run.fail(TrialError.ENVIRONMENT, f"{type(e).__name__}: {e}")
    except Exception as e:  # a bug: record it, keep the job going
        failure = run.fail(TrialError.INTERNAL, f"{type(e).__name__}: {e}")
        (trial_dir / "exception.txt").write_text(traceback.format_exc())
    finally:
        notes = await _close(run, trial_dir)
    return _record(plan, run, failure, notes)


def _invalid_task(
    trial_dir: Path, header: TrialResult, t0: float, e: TaskFormatError
) -> TrialResult:
    """The record of a trial whose task folder is malformed (nothing else ran)."""
    stages = {Stage.BUILD: stage_outcome(time.perf_counter() - t0, TrialError.INVALID_TASK, str(e))}
    result = replace(
        header,
        error=TrialError.INVALID_TASK,
        error_message=str(e),
        duration_s=time.perf_counter() - t0,
        stages=stages,
    )
    return _write_trial(trial_dir, result)


def _prepare(
    trial_dir: Path,
    header: TrialResult,
    t0: float,
    task: HarborTask,
    config: JobConfig,
    policy: Any,
    on_trajectory: Callable[[Any], None] | None,
) -> _TrialPlan:
    """The trial's plan: the task's timeouts scaled by the job's multiplier, and its
    verifier held to `require_exit_zero` when the job asks for it."""
    scale = config.timeout_multiplier
    agent_timeout = task.agent.timeout_s * scale if task.agent.timeout_s else None
    if scale != 1.0:
        build_s = task.environment.build_timeout_s * scale
        task = replace(
            task,
            environment=replace(task.environment, build_timeout_s=build_s),
            verifier=replace(task.verifier, timeout_s=task.verifier.timeout_s * scale),
        )
    if config.require_exit_zero:
        task = replace(task, verifier=replace(task.verifier, require_exit_zero=True))
    return _TrialPlan(trial_dir, header, t0, task, agent_timeout, config, policy, on_trajectory)


async def _play(plan: _TrialPlan, run: _TrialRun) -> None:
    """Start the environment, play the agent phase and verify, by agent: the llm agent in a
    `make("harbor")` episode; a multi-step task step by step; the command agent; the oracle
    or nop agent in a plain runtime."""
    if plan.config.agent is AgentKind.LLM:
        await _play_llm(plan, run)
    elif plan.task.steps:
        await _play_steps(plan, run)
    elif plan.config.agent is AgentKind.COMMAND:
        await _play_command(plan, run)
    else:
        await _play_runtime(plan, run)


def _harbor_env(task: HarborTask, config: JobConfig) -> HarborEnv:
    """The llm agent's `make("harbor")` env over the one task, with the job's settings."""
    from skyrl_gym.envs.harbor.env import HarborEnv

    env = HarborEnv(
        [{"task_id": task.name, "path": str(task.path)}],
        backend=config.backend,
        rootfs=config.rootfs,
        network=config.network,
        pass_env=config.pass_env,
        timeout_multiplier=config.timeout_multiplier,
    )
    if config.require_exit_zero or config.pull:
        env.make_runtime = functools.partial(
            HarborRuntime,
            require_exit_zero=True if config.require_exit_zero else None,
            pull=config.pull,
        )
    return env


async def _play_llm(plan: _TrialPlan, run: _TrialRun) -> None:
    """The llm agent: one episode of our agent loop. The environment is built and started
    before the episode (`HarborEnv.astart_environment`: the `build` and `start` stages), so
    the agent's clock starts with its agent phase; a multi-step task's steps are verified as
    the episode goes on (`make("harbor")`'s multi-step play)."""
    task, config = plan.task, plan.config
    env = run.env = _harbor_env(task, config)
    t0 = time.perf_counter()
    try:
        await env.astart_environment(env.tasks[0])
    except StepSetupError:  # step 1's setup hook failed: recorded as a step
        run.steps[:] = _env_steps(env)
        raise
    finally:
        run.runtime = env.runtime
    run.started(time.perf_counter() - t0)
    run.begin(Stage.AGENT)
    t1 = time.perf_counter()
    run.outcome = await run_llm(
        env,
        plan.policy,
        env.tasks[0],
        # A multi-step episode: the env ends each step at its own timeout.
        timeout_s=(
            _steps_timeout(task, config.timeout_multiplier) if task.steps else plan.agent_timeout
        ),
        max_turns=config.max_turns,
        max_tokens=config.max_tokens,
        sampling=None if config.seed is None else SamplingParams(seed=config.seed),
    )
    run.agent_execution_s = time.perf_counter() - t1
    run.runtime = env.runtime
    if env.step_setup_error is not None and not env.step_outcomes:  # step 1's setup
        run.steps[:] = _env_steps(env)
        run.begin(Stage.START)
        raise env.step_setup_error
    if env.start_error is not None or run.runtime is None:
        run.begin(Stage.START)
        raise TaskEnvironmentError(env.start_error or "the environment did not start")
    run.stages[Stage.AGENT] = _agent_stage(run.agent_execution_s, run.outcome)
    if run.outcome.trajectory is not None and plan.on_trajectory is not None:
        plan.on_trajectory(run.outcome.trajectory)
    run.begin(Stage.VERIFIER)
    t2 = time.perf_counter()
    verified = run.verified = await env.averify()
    run.verifier_s = time.perf_counter() - t2
    if task.steps:  # the env verified each step as the episode went on
        run.steps[:] = _env_steps(env)
        run.verifier_s = verified.duration_s
        run.stages[Stage.VERIFIER] = stage_outcome(
            verified.duration_s, _verifier_error(verified), verified.message
        )
        if env.step_setup_error is not None:
            run.begin(Stage.START)
            raise env.step_setup_error


async def _play_steps(plan: _TrialPlan, run: _TrialRun) -> None:
    """A multi-step task with the oracle, nop or command agent: one runtime, its steps in
    order (`_run_steps`)."""
    config, policy = plan.config, plan.policy
    play: _StepAgent | None = None
    if config.agent is AgentKind.COMMAND:
        from skyrl_sdk.benchmarks.harbor.command import command_runtime, step_player

        await asyncio.to_thread(policy.server)  # started once, shared by every trial
        runtime = run.runtime = command_runtime(
            policy, plan.task, multi_step=True, **_runtime_options(config)
        )
        play = step_player(policy)
    else:
        runtime = run.runtime = HarborRuntime(plan.task, **_runtime_options(config))
        if config.agent is AgentKind.ORACLE:
            play = _play_oracle
    run.verified, run.outcome = await _run_steps(
        runtime, plan, run, play=play, on_step_trajectory=functools.partial(_step_trajectory, plan)
    )


def _step_trajectory(plan: _TrialPlan, step: str, trajectory: Any, reward: float | None) -> None:
    """One trajectory per step (CMD runs once per step), graded with its reward."""
    from skyrl_sdk.benchmarks.harbor.command import graded

    trajectory = replace(graded(trajectory, reward), episode_id=f"{plan.task.name}/{step}")
    if plan.on_trajectory is not None:
        plan.on_trajectory(trajectory)


async def _start_runtime(run: _TrialRun, runtime: HarborRuntime, *, with_solution: bool) -> None:
    """Build and start a single-step trial's environment (the `start` stage)."""
    t1 = time.perf_counter()
    await runtime.start(with_solution=with_solution)
    run.environment_setup_s = time.perf_counter() - t1
    run.started(run.environment_setup_s)


async def _verify_runtime(run: _TrialRun, runtime: HarborRuntime) -> VerifierResult:
    """A single-step trial's verifier phase (its stage is recorded with the result)."""
    run.begin(Stage.VERIFIER)
    t2 = time.perf_counter()
    verified = run.verified = await runtime.verify()
    run.verifier_s = time.perf_counter() - t2
    return verified


async def _play_command(plan: _TrialPlan, run: _TrialRun) -> None:
    """The command agent on a single-step task: CMD in the environment against the served
    policy; its captured tokens, graded with the verifier's reward, are the trajectory."""
    from skyrl_sdk.benchmarks.harbor.command import command_runtime, graded, run_command

    policy = plan.policy
    await asyncio.to_thread(policy.server)  # started once, shared by every trial
    runtime = command_runtime(policy, plan.task, **_runtime_options(plan.config))
    run.runtime = runtime
    await _start_runtime(run, runtime, with_solution=False)
    run.begin(Stage.AGENT)
    t1 = time.perf_counter()
    run.outcome = await run_command(runtime, policy, plan.agent_timeout)
    run.agent_execution_s = time.perf_counter() - t1
    run.stages[Stage.AGENT] = _agent_stage(run.agent_execution_s, run.outcome)
    verified = await _verify_runtime(run, runtime)
    if run.outcome.trajectory is not None:
        run.outcome = replace(
            run.outcome, trajectory=graded(run.outcome.trajectory, verified.reward)
        )
        if plan.on_trajectory is not None:
            plan.on_trajectory(run.outcome.trajectory)


async def _play_runtime(plan: _TrialPlan, run: _TrialRun) -> None:
    """The oracle (solve.sh under the agent timeout) or the nop agent (nothing; its agent
    stage stays skipped) on a single-step task."""
    oracle = plan.config.agent is AgentKind.ORACLE
    runtime = run.runtime = HarborRuntime(plan.task, **_runtime_options(plan.config))
    await _start_runtime(run, runtime, with_solution=oracle)
    run.begin(Stage.AGENT)
    t1 = time.perf_counter()
    if oracle:
        run.outcome = await _oracle_in_time(runtime, plan.agent_timeout)
    run.agent_execution_s = time.perf_counter() - t1
    if oracle:
        run.stages[Stage.AGENT] = _agent_stage(run.agent_execution_s, run.outcome)
    await _verify_runtime(run, runtime)


async def _close(run: _TrialRun, trial_dir: Path) -> tuple[str, ...]:
    """End the agent phase, copy the logs into the trial folder and stop the environment
    (never raises); returns the environment's notes, the copy's included."""
    runtime = run.runtime
    notes: tuple[str, ...] = tuple(runtime.notes) if runtime is not None else ()
    if runtime is not None:
        with contextlib.suppress(Exception):
            # No sandboxed process may run while its logs are copied (nothing can swap a
            # file for a link mid-copy); copy_logs itself never follows a link.
            await runtime.end_agent_phase()
            copied = runtime.copy_logs(trial_dir)
            notes += tuple(f"logs: {line}" for line in copied)
    if run.env is not None:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(run.env.close)
    elif runtime is not None:
        with contextlib.suppress(Exception):
            await runtime.close()
    return notes


def _record(
    plan: _TrialPlan, run: _TrialRun, failure: _TrialFailure, notes: tuple[str, ...]
) -> TrialResult:
    """Write the trial's result.json (and the llm agent's ATIF trajectory): the error is the
    play's own, else the verifier's (no reward), else the agent's (still graded)."""
    outcome, verified = run.outcome, run.verified
    if outcome.trajectory is not None:
        from skyrl_sdk.benchmarks.harbor.atif import to_atif

        agent_dir = plan.trial_dir / "agent"
        agent_dir.mkdir(parents=True, exist_ok=True)
        # The agent may have left /logs/agent/trajectory.json as a symlink (copied as a
        # link): replace it, never write through it.
        _write_new(agent_dir / "trajectory.json", json.dumps(to_atif(outcome.trajectory), indent=2))
    agent_error = _agent_error(outcome)
    if verified is not None and not plan.task.steps:  # a multi-step trial's are its steps'
        run.stages[Stage.VERIFIER] = stage_outcome(
            verified.duration_s, _verifier_error(verified), verified.message
        )
    error, message = failure.error, failure.message
    if error is None and verified is not None and verified.error is not None:
        error, message = _verifier_error(verified), verified.message
    if error is None and agent_error is not None:
        error, message = agent_error, outcome.message
    result = replace(
        plan.header,
        reward=verified.reward if verified is not None else None,
        rewards=verified.rewards if verified is not None else None,
        error=error,
        error_message=message,
        agent_error=agent_error,
        environment_notes=notes,
        verifier_exit_code=verified.exit_code if verified is not None else None,
        verifier_left_running=verified.left_running if verified is not None else None,
        verifier_orphaned=verified.orphaned if verified is not None else None,
        verifier_isolation=(
            verified.isolation.value if verified is not None and verified.isolation else None
        ),
        environment_setup_s=run.environment_setup_s,
        agent_execution_s=run.agent_execution_s,
        verifier_s=run.verifier_s,
        duration_s=time.perf_counter() - plan.t0,
        stages=run.stages,
        steps=tuple(run.steps),
    )
    return _write_trial(plan.trial_dir, result)


_StepAgent = Callable[[HarborRuntime, float | None], Awaitable[AgentOutcome]]
"""One step's agent phase in the runtime's open step, under the step's timeout."""


async def _oracle_in_time(runtime: HarborRuntime, timeout: float | None) -> AgentOutcome:
    """solve.sh under `timeout` (plus 10 s for the sandbox to stop it itself)."""
    try:
        async with asyncio.timeout(timeout and timeout + 10):
            return await run_oracle(runtime, timeout)
    except TimeoutError:
        return AgentOutcome(AgentFailure.TIMEOUT, f"agent ran past {timeout}s")


async def _play_oracle(runtime: HarborRuntime, timeout: float | None) -> AgentOutcome:
    """The oracle's step: the step's solve.sh (nothing when the step has none)."""
    if not runtime.solution_uploaded:
        return AgentOutcome()
    return await _oracle_in_time(runtime, timeout)


def _steps_timeout(task: HarborTask, scale: float) -> float | None:
    """A multi-step episode's whole time (None: a step has no agent timeout): every step's
    agent and verifier timeouts, and its setup's limit when it has one (all run inside the
    episode; the env holds each step's agent phase to its own timeout)."""
    total = 0.0
    for step in task.steps:
        limit = step.agent_timeout_s or task.agent.timeout_s
        if limit is None:
            return None
        total += (limit + step.verifier_timeout_s) * scale
        if step.setup_script is not None:
            total += task.environment.build_timeout_s
    return total


def _env_steps(env: HarborEnv) -> list[StepResult]:
    """The steps a `make("harbor")` episode played (`HarborEnv.step_outcomes`), plus the one
    whose setup failed."""
    results = [
        StepResult(
            name=o.name,
            reward=o.result.reward,
            rewards=o.result.rewards,
            error=TrialError(o.result.error.value) if o.result.error else None,
            error_message=o.result.message,
            agent_s=o.agent_s,
            verifier_s=o.result.duration_s,
            stopped_trial=o.result.error is not None or o.below_min_reward,
        )
        for o in env.step_outcomes
    ]
    if env.step_setup_error is not None:
        results.append(_setup_failed_step(env.step_setup_error))
    return results


def _setup_failed_step(e: StepSetupError) -> StepResult:
    """The record of a step whose setup hook failed (it never reached its agent phase)."""
    return StepResult(
        name=e.step,
        reward=None,
        rewards=None,
        error=TrialError.STEP_SETUP,
        error_message=e.problem,
        stopped_trial=True,
    )


_StepTrajectory = Callable[[str, Any, float | None], None]
"""Called with a step's name, its agent's trajectory and the step's reward."""


@dataclass
class _StepsTally:
    """What a multi-step trial's steps have added up to so far (mutable: one step at a time)."""

    start_s: float = 0.0
    """Seconds opening the steps' sandboxes (and running their setup hooks)."""
    agent_s: float = 0.0
    """Seconds of the steps' agent phases."""
    verifier_s: float = 0.0
    """Seconds of the steps' verifiers."""
    first_failure: AgentOutcome = field(default_factory=AgentOutcome)
    """The first step's agent failure (its message names the step), else a clean outcome."""
    failed: VerifierResult | None = None
    """The verifier result of the step whose verifier failed (the trial stopped there)."""
    rewards: list[dict[str, float]] = field(default_factory=list)
    """Every verified step's reward keys, in order (rolled up at the end)."""

    def record(self, run: _TrialRun, *, played: bool) -> None:
        """Write the steps' totals as the trial's timings and its agent and verifier stages
        (`played`: an agent played; the nop agent's stage stays skipped)."""
        run.environment_setup_s = self.start_s
        run.agent_execution_s = self.agent_s
        run.verifier_s = self.verifier_s
        run.stages[Stage.AGENT] = (
            stage_outcome(
                self.agent_s, _agent_error(self.first_failure), self.first_failure.message
            )
            if played
            else StageOutcome(self.agent_s, StageStatus.SKIPPED)
        )
        if self.failed is not None:
            run.stages[Stage.VERIFIER] = stage_outcome(
                self.verifier_s, _verifier_error(self.failed), self.failed.message
            )
        elif self.verifier_s:
            run.stages[Stage.VERIFIER] = stage_outcome(self.verifier_s)


async def _run_steps(
    runtime: HarborRuntime,
    plan: _TrialPlan,
    run: _TrialRun,
    *,
    play: _StepAgent | None,
    on_step_trajectory: _StepTrajectory | None = None,
) -> tuple[VerifierResult, AgentOutcome]:
    """Play a multi-step task's steps in order in one environment (Harbor's multi-step
    trial): each step's setup hook and agent phase (`play`; None for the nop agent), then
    its verifier; the trial stops after a step whose verifier fails or whose reward is below
    its `min_reward`. The steps that ran are appended to `run.steps`. Returns the rolled-up
    verifier result and the first agent failure (else a clean outcome); a failed setup
    raises `StepSetupError` after the stages so far are recorded."""
    tally = _StepsTally()
    scale = plan.config.timeout_multiplier
    for step in plan.task.steps:
        step = replace(
            step,
            agent_timeout_s=step.agent_timeout_s and step.agent_timeout_s * scale,
            verifier_timeout_s=step.verifier_timeout_s * scale,
        )
        await _begin_step(runtime, step, plan.config, run, tally, played=play is not None)
        if not await _play_step(runtime, step, run, tally, play, on_step_trajectory):
            break
    tally.record(run, played=play is not None)
    # The trial-level outcome carries no trajectory: each step's went to on_step_trajectory.
    first_failure = replace(tally.first_failure, trajectory=None)
    if tally.failed is not None:
        return replace(tally.failed, duration_s=tally.verifier_s), first_failure
    rolled = roll_up_rewards(tally.rewards, plan.task.reward_strategy)
    return VerifierResult(rolled, None, duration_s=tally.verifier_s), first_failure


async def _begin_step(
    runtime: HarborRuntime,
    step: TaskStep,
    config: JobConfig,
    run: _TrialRun,
    tally: _StepsTally,
    *,
    played: bool,
) -> None:
    """Open the step's sandbox and run its setup hook (preparing the environment: `start`);
    a failed setup is recorded as a step and the stages so far, then re-raised."""
    run.begin(Stage.START)
    t1 = time.perf_counter()
    try:
        await runtime.begin_step(step, with_solution=config.agent is AgentKind.ORACLE)
    except StepSetupError as e:
        tally.start_s += time.perf_counter() - t1
        run.steps.append(_setup_failed_step(e))
        tally.record(run, played=played)
        run.begin(Stage.START)  # the caller charges the failure to `start`
        run.stages[Stage.START] = StageOutcome(tally.start_s, StageStatus.OK)
        raise
    tally.start_s += time.perf_counter() - t1
    run.started(tally.start_s)


async def _play_step(
    runtime: HarborRuntime,
    step: TaskStep,
    run: _TrialRun,
    tally: _StepsTally,
    play: _StepAgent | None,
    on_step_trajectory: _StepTrajectory | None,
) -> bool:
    """The open step's agent phase and verifier, recorded as a `StepResult`; False when the
    trial stops after it (its verifier failed or its reward is below `min_reward`)."""
    run.begin(Stage.AGENT)
    timeout = runtime.task.agent.timeout_s
    t1 = time.perf_counter()
    outcome = await play(runtime, timeout) if play is not None else AgentOutcome()
    agent_s = time.perf_counter() - t1
    tally.agent_s += agent_s
    if outcome.failure and not tally.first_failure.failure:
        tally.first_failure = replace(outcome, message=f"step {step.name}: {outcome.message}")
    run.begin(Stage.VERIFIER)
    v = await runtime.verify()
    tally.verifier_s += v.duration_s
    if outcome.trajectory is not None and on_step_trajectory is not None:
        on_step_trajectory(step.name, outcome.trajectory, v.reward)
    kind = _verifier_error(v)
    below = step.below_min_reward(v.reward, v.rewards)
    run.steps.append(
        StepResult(
            name=step.name,
            reward=v.reward,
            rewards=v.rewards,
            error=kind or _agent_error(outcome),
            error_message=v.message if kind else outcome.message,
            agent_s=agent_s,
            verifier_s=v.duration_s,
            stopped_trial=kind is not None or below,
        )
    )
    if v.error is not None:
        tally.failed = replace(v, message=f"step {step.name}: {v.message}")
        return False
    assert v.rewards is not None
    tally.rewards.append(v.rewards)
    return not below


def _agent_stage(duration_s: float, outcome: AgentOutcome) -> StageOutcome:
    """The agent stage from the agent's outcome (a failed agent is still graded)."""
    return stage_outcome(duration_s, _agent_error(outcome), outcome.message)


def _write_new(path: Path, text: str) -> None:
    """Write `path` as a new file: a symlink (or anything) already there is replaced, never
    written through (the trial folder holds links the sandboxed agent chose)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _write_trial(trial_dir: Path, result: TrialResult) -> TrialResult:
    _write_new(trial_dir / RESULT_FILE, json.dumps(result.to_json(), indent=2))
    return result


__all__ = ["run_trial"]
