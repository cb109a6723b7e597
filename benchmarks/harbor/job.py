"""Trials and jobs over Harbor task folders.

A trial = one task played by one agent: start the environment, run the agent phase under the
agent timeout, run the verifier phase, write `<trial>/result.json` (plus `agent/`,
`verifier/`, `artifacts/` copied from /logs). A job = every task under a path, `n`
trials at a time; it writes `<out>/job.json` (`mean_reward`, `trials`), `<out>/
trajectories.jsonl` (llm agent) and a summary table. No trial's failure stops a job.

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
import enum
import functools
import json
import os
import secrets
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_gym.envs.harbor.runtime import HarborRuntime, TaskEnvironmentError, VerifierResult
from skyrl_gym.envs.harbor.task import (
    HarborTask,
    StepSetupError,
    TaskFormatError,
    check_env_names,
    find_task_dirs,
    load_task,
    roll_up_rewards,
)
from skyrl_sdk.benchmarks.harbor.agents import (
    AgentFailure,
    AgentKind,
    AgentOutcome,
    run_llm,
    run_oracle,
)
from skyrl_sdk.sandboxes import Backend, SandboxError

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.env import HarborEnv
    from skyrl_gym.envs.harbor.task import TaskStep

JOB_FILE = "job.json"
RESULT_FILE = "result.json"
TRAJECTORIES = "trajectories.jsonl"


class TrialError(enum.StrEnum):
    """The short kind of a trial's error (`error` in job.json)."""

    INVALID_TASK = "invalid_task"
    """The task folder is malformed (bad task.toml, missing test.sh, unknown schema, ...)."""
    ENVIRONMENT = "environment_error"
    """The environment could not be built or started."""
    AGENT_TIMEOUT = "agent_timeout"
    """The agent ran past its timeout (still graded)."""
    AGENT_NONZERO_EXIT = "agent_nonzero_exit"
    """The agent's command exited non-zero (still graded)."""
    AGENT_ERROR = "agent_error"
    """The agent failed (still graded)."""
    VERIFIER_TIMEOUT = "verifier_timeout"
    """test.sh ran past the verifier timeout; no reward."""
    REWARD_FILE_NOT_FOUND = "reward_file_not_found"
    """test.sh wrote no reward file; no reward."""
    REWARD_FILE_EMPTY = "reward_file_empty"
    """The reward file is empty; no reward."""
    REWARD_PARSE_ERROR = "reward_parse_error"
    """The reward file is malformed; no reward."""
    REWARD_FILE_UNSAFE = "reward_file_unsafe"
    """The reward file is a symlink or not a regular file (not read); no reward."""
    VERIFIER_SANDBOX_ERROR = "verifier_sandbox_error"
    """The verifier's sandbox failed; no reward."""
    VERIFIER_KILLED = "verifier_killed"
    """test.sh did not end on its own (a signal killed it, not the timeout); no reward."""
    VERIFIER_EXIT_NONZERO = "verifier_exit_nonzero"
    """The task requires test.sh to exit 0 (`require_exit_zero`) and it did not; no reward."""
    VERIFIER_STRAY_PROCESSES = "verifier_stray_processes"
    """The task requires that nothing test.sh starts outlives its parent (`require_exit_zero`)
    and something did; no reward."""
    REWARD_FILE_FOREIGN = "reward_file_foreign"
    """Two-uid grading: a reward file was not written by the verifier's uid, or lies where the
    agent's uid could write; no reward."""
    REWARD_FILES_DISAGREE = "reward_files_disagree"
    """reward.json's reward and reward.txt's number differ (one is not test.sh's verdict); no
    reward."""
    VERIFIER_COMMAND_NOT_FOUND = "verifier_command_not_found"
    """test.sh could not run a command it needs (`uvx: command not found`, exit 127) and left
    no reward or 0; the message names the command; no reward."""
    STEP_SETUP = "step_setup_failed"
    """A multi-step task's `steps/<name>/workdir/setup.sh` failed (or its workdir/ could not
    be copied in): the message names the step; the trial stops there with no reward."""
    INTERNAL = "internal_error"
    """Anything else (a bug); see `error_message` and exception.txt."""


class Stage(enum.StrEnum):
    """The stages of a trial, in order (`trials[].stages` in job.json)."""

    BUILD = "build"
    """Reading the task folder (and converting a Terminal-Bench 1 folder)."""
    START = "start"
    """Building the environment's root (Dockerfile steps) and opening the agent's sandbox (a
    multi-step trial: every step's sandbox and its `workdir/setup.sh`)."""
    AGENT = "agent"
    """The agent phase."""
    VERIFIER = "verifier"
    """The verifier phase: test.sh and the reward files."""


class StageStatus(enum.StrEnum):
    """How one stage ended."""

    OK = "ok"
    """It ran and ended well."""
    FAILED = "failed"
    """It failed; `error` says why."""
    TIMEOUT = "timeout"
    """It ran past its limit."""
    SKIPPED = "skipped"
    """It did not run: an earlier stage failed (or, for the agent, the nop agent)."""


@dataclass(frozen=True)
class StageOutcome:
    """One stage of a trial, as written under `stages` of result.json and job.json."""

    duration_s: float = 0.0
    """Wall-clock seconds of the stage (0 when it did not run)."""
    status: StageStatus = StageStatus.SKIPPED
    """How it ended."""
    error: str | None = None
    """Why it failed: `<error kind>: <message>`, one line (None when it did not fail)."""

    def to_json(self) -> dict[str, Any]:
        return {"duration_s": self.duration_s, "status": self.status.value, "error": self.error}


@dataclass(frozen=True)
class StepResult:
    """One step of a multi-step trial (`steps` of result.json)."""

    name: str
    """The step's name (`[[steps]].name`)."""
    reward: float | None
    """The step's reward; None without one."""
    rewards: dict[str, float] | None
    """Every key of the step's reward file; None without a reward."""
    error: TrialError | None = None
    """Why the step gave no reward (a verifier error, or `step_setup_failed`: its setup hook
    failed and it never reached its agent phase), else its agent's error, else None."""
    error_message: str = ""
    """Details of `error`."""
    agent_s: float = 0.0
    """Seconds of the step's agent phase."""
    verifier_s: float = 0.0
    """Seconds of the step's verifier phase."""
    stopped_trial: bool = False
    """The trial ended after this step: its verifier or its setup failed, or its reward was
    below its `min_reward`."""


_TIMEOUT_ERRORS = frozenset({TrialError.AGENT_TIMEOUT, TrialError.VERIFIER_TIMEOUT})


def _stage(duration_s: float, error: TrialError | None = None, message: str = "") -> StageOutcome:
    """A stage that ran: ok, or failed / timed out with `error`."""
    if error is None:
        return StageOutcome(duration_s, StageStatus.OK)
    status = StageStatus.TIMEOUT if error in _TIMEOUT_ERRORS else StageStatus.FAILED
    line = " ".join(message.split())[:500]
    return StageOutcome(duration_s, status, f"{error.value}: {line}" if line else error.value)


@dataclass(frozen=True)
class JobConfig:
    """What a job runs."""

    path: str | Path
    """A task folder, or a folder of task folders."""
    out: str | Path
    """Output folder (job.json, per-trial folders, trajectories.jsonl)."""
    agent: AgentKind = AgentKind.ORACLE
    """oracle, nop, llm, or command (given as 'command:CMD', which also sets `command`)."""
    backend: Backend = Backend.BWRAP
    """bwrap (host root filesystem or `rootfs`) or docker (Dockerfile built locally)."""
    concurrency: int = 4
    """Trials running at once."""
    policy: str | None = None
    """Policy SPEC for the llm agent (see `skyrl eval --help`)."""
    rootfs: str | None = None
    """bwrap: root filesystem to use instead of the host's."""
    timeout_multiplier: float = 1.0
    """Scales the agent and verifier timeouts of every task."""
    require_exit_zero: bool = False
    """Grade every task as if its task.toml set `[verifier] require_exit_zero = true` (a
    reward counts only when test.sh exited 0 and nothing it started outlived its parent)."""
    max_turns: int = 30
    """llm agent: assistant turns per trial."""
    max_tokens: int = 1024
    """llm agent: tokens per assistant turn."""
    network: bool | None = None
    """Force network on/off (None: each task's `network_mode`)."""
    command: Any = None
    """The `CommandAgent` for `agent: command` (`--agent command:CMD`)."""
    pass_env: tuple[str, ...] = ()
    """Host environment variables task.toml's `${VAR}` may take (`--pass-env NAME`); none by
    default, so a task cannot copy the host's secrets into its environment."""
    pull: bool = False
    """docker: pull a task's `[environment].docker_image` (and its Dockerfile's FROM images)
    when the engine lacks them (`--pull`), bounded by the task's `build_timeout_sec`; never
    by default (a missing image is an environment error naming it)."""

    def __post_init__(self) -> None:
        if isinstance(self.agent, str) and self.agent.startswith("command:"):
            from skyrl_sdk.agents.command_agent import parse_agent

            object.__setattr__(self, "command", parse_agent(self.agent))
            object.__setattr__(self, "agent", AgentKind.COMMAND)
        object.__setattr__(self, "agent", AgentKind(self.agent))
        object.__setattr__(self, "backend", Backend(self.backend))
        object.__setattr__(self, "pass_env", check_env_names(self.pass_env))
        if self.backend is Backend.LOCAL:
            raise ValueError("Harbor tasks need an isolated backend: bwrap or docker")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.timeout_multiplier <= 0:
            raise ValueError(f"timeout_multiplier must be positive, got {self.timeout_multiplier}")
        if self.agent in (AgentKind.LLM, AgentKind.COMMAND) and not self.policy:
            raise ValueError(f"the {self.agent.value} agent needs a policy (--policy SPEC)")
        if self.agent is AgentKind.COMMAND and self.command is None:
            raise ValueError("the command agent needs its command: --agent 'command:CMD'")


@dataclass(frozen=True)
class TrialResult:
    """One trial, as written to `<trial>/result.json`."""

    task: str
    """Task name (its folder name)."""
    trial_name: str
    """`<task>__<random>`: the trial's folder under the job's output."""
    task_path: str
    """The task folder."""
    agent: str
    """oracle, nop or llm."""
    backend: str
    """bwrap or docker."""
    reward: float | None
    """The trial's reward (`reward` of reward.json, or reward.txt); None without one."""
    rewards: dict[str, float] | None
    """Every key of reward.json (`{"reward": x}` for reward.txt); None without a reward."""
    error: TrialError | None
    """The most important error: a verifier/environment/task error (no reward), else an agent
    error (reward still valid), else None."""
    error_message: str = ""
    """Details of `error`."""
    agent_error: TrialError | None = None
    """What went wrong in the agent phase (graded anyway)."""
    environment_notes: tuple[str, ...] = ()
    """What of the task's environment could not be applied (bwrap backend), one line each."""
    verifier_exit_code: int | None = None
    """test.sh's exit status (ignored for the reward, as in Harbor, unless a signal killed it
    or the task sets `require_exit_zero`)."""
    verifier_left_running: int | None = None
    """Processes test.sh left running when it exited (killed then; None: not counted)."""
    verifier_orphaned: int | None = None
    """Processes test.sh started that outlived their parent and ended before it."""
    verifier_isolation: str | None = None
    """`two_uid` (the programs test.sh ran had the agent's uid; reward files' owner checked)
    or `single_uid` (they had the verifier's uid; also an environment note); None when the
    verifier sandbox did not start."""
    started_at: float = 0.0
    """Unix time the trial started."""
    environment_setup_s: float = 0.0
    """Seconds to build / start the environment."""
    agent_execution_s: float = 0.0
    """Seconds of the agent phase."""
    verifier_s: float = 0.0
    """Seconds of the verifier phase."""
    duration_s: float = 0.0
    """Seconds for the whole trial."""
    stages: dict[Stage, StageOutcome] = field(default_factory=dict)
    """Each stage (`build`, `start`, `agent`, `verifier`): its seconds, status and error (a
    multi-step trial's agent and verifier stages add up its steps')."""
    steps: tuple[StepResult, ...] = ()
    """A multi-step task's steps that ran, in order (empty for a single-step task); `reward`
    is their roll-up (`multi_step_reward_strategy`)."""

    @property
    def failed_stage(self) -> Stage | None:
        """The first stage that failed or timed out (None when none did)."""
        for name in Stage:
            outcome = self.stages.get(name)
            if outcome is not None and outcome.status in (StageStatus.FAILED, StageStatus.TIMEOUT):
                return name
        return None

    @property
    def reward_valid(self) -> bool:
        """True when the verifier produced a reward."""
        return self.reward is not None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["error"] = self.error.value if self.error else None
        data["agent_error"] = self.agent_error.value if self.agent_error else None
        data["environment_notes"] = list(self.environment_notes)
        data["reward_valid"] = self.reward_valid
        data["stages"] = _stages_json(self.stages)
        data["steps"] = [
            {**asdict(step), "error": step.error.value if step.error else None}
            for step in self.steps
        ]
        return data


@dataclass(frozen=True)
class JobResult:
    """A job's outcome, as written to `<out>/job.json`."""

    agent: str
    """The agent that played."""
    backend: str
    """The sandbox backend."""
    path: str
    """The task or dataset folder."""
    trials: tuple[TrialResult, ...]
    """One per task, in task order."""
    duration_s: float = 0.0
    """Wall-clock seconds of the job."""

    @property
    def mean_reward(self) -> float:
        """Mean reward over all trials; a trial without a reward counts as 0."""
        if not self.trials:
            return 0.0
        return sum(t.reward or 0.0 for t in self.trials) / len(self.trials)

    @property
    def errors_by_kind(self) -> dict[str, int]:
        """Trials per error kind."""
        return dict(Counter(t.error.value for t in self.trials if t.error is not None))

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "backend": self.backend,
            "path": self.path,
            "n_trials": len(self.trials),
            "n_errors": sum(t.error is not None for t in self.trials),
            "mean_reward": self.mean_reward,
            "errors_by_kind": self.errors_by_kind,
            "duration_s": self.duration_s,
            "trials": [
                {
                    "task": t.task,
                    "reward": t.reward,
                    "rewards": t.rewards,
                    "error": t.error.value if t.error else None,
                    "trial_name": t.trial_name,
                    "stages": _stages_json(t.stages),
                    **({"steps": [_step_json(s) for s in t.steps]} if t.steps else {}),
                }
                for t in self.trials
            ],
        }


def _step_json(step: StepResult) -> dict[str, Any]:
    return {
        "name": step.name,
        "reward": step.reward,
        "rewards": step.rewards,
        "error": step.error.value if step.error else None,
    }


def _stages_json(stages: dict[Stage, StageOutcome]) -> dict[str, Any]:
    """Every stage in order, a missing one as skipped."""
    return {name.value: stages.get(name, StageOutcome()).to_json() for name in Stage}


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
        """Charge `error` to the stage running."""
        self.stages[self.running] = _stage(time.perf_counter() - self.since, error, message)
        return _TrialFailure(error, message)

    def fail_setup(self, e: StepSetupError) -> _TrialFailure:
        """A step's setup hook failed: charged to `start` (on top of what it took before);
        the step is named in the message; no reward."""
        error, message = TrialError.STEP_SETUP, str(e)
        before = self.stages.get(Stage.START, StageOutcome()).duration_s
        self.stages[Stage.START] = _stage(before + time.perf_counter() - self.since, error, message)
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
    run = _TrialRun(stages={Stage.BUILD: _stage(time.perf_counter() - t0)})
    plan = _prepare(trial_dir, header, t0, task, config, policy, on_trajectory)
    run.begin(Stage.START)
    failure = _TrialFailure()
    try:
        await _play(plan, run)
    except StepSetupError as e:
        failure = run.fail_setup(e)
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
    stages = {Stage.BUILD: _stage(time.perf_counter() - t0, TrialError.INVALID_TASK, str(e))}
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
        task = replace(
            task, verifier=replace(task.verifier, timeout_s=task.verifier.timeout_s * scale)
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
    """The llm agent: one episode of our agent loop; the environment starts inside the
    episode's reset (its time is the agent's) and a multi-step task's steps are verified as
    the episode goes on (`make("harbor")`'s multi-step play)."""
    task, config = plan.task, plan.config
    env = run.env = _harbor_env(task, config)
    run.stages[Stage.START] = _stage(0.0)
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
        run.stages[Stage.VERIFIER] = _stage(
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
    run.stages[Stage.START] = _stage(run.environment_setup_s)


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
        run.stages[Stage.VERIFIER] = _stage(
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
            _stage(self.agent_s, _agent_error(self.first_failure), self.first_failure.message)
            if played
            else StageOutcome(self.agent_s, StageStatus.SKIPPED)
        )
        if self.failed is not None:
            run.stages[Stage.VERIFIER] = _stage(
                self.verifier_s, _verifier_error(self.failed), self.failed.message
            )
        elif self.verifier_s:
            run.stages[Stage.VERIFIER] = _stage(self.verifier_s)


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
    run.stages[Stage.START] = _stage(tally.start_s)


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
    return _stage(duration_s, _agent_error(outcome), outcome.message)


def _write_new(path: Path, text: str) -> None:
    """Write `path` as a new file: a symlink (or anything) already there is replaced, never
    written through (the trial folder holds links the sandboxed agent chose)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _write_trial(trial_dir: Path, result: TrialResult) -> TrialResult:
    _write_new(trial_dir / RESULT_FILE, json.dumps(result.to_json(), indent=2))
    return result


async def run_job(
    config: JobConfig,
    *,
    policy: Any = None,
    on_trial: Callable[[TrialResult], None] | None = None,
) -> JobResult:
    """Run every task under `config.path`; write job.json and return the result.

    `policy` (an `agents.Policy`) overrides `config.policy` for the llm agent.
    """
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    task_dirs = find_task_dirs(config.path)
    if config.agent in (AgentKind.LLM, AgentKind.COMMAND) and policy is None:
        from skyrl_sdk.agents.policy_spec import load_policy

        spec = config.policy or ""
        tokenizer = (
            "tiny" if config.agent is AgentKind.COMMAND and spec.startswith("scripted:") else None
        )
        policy = load_policy(spec, tokenizer=tokenizer).policy
    runner = None
    if config.agent is AgentKind.COMMAND:
        from skyrl_sdk.agents.command_agent import CommandAgentRunner

        if policy.renderer is None:
            raise ValueError(
                "the command agent serves the policy with exact token ids: it needs a tokenizer"
            )
        runner = CommandAgentRunner(
            config.command, policy, capture_dir=out / "capture", log_dir=out / "agent_logs"
        )
    writer = None
    if config.agent in (AgentKind.LLM, AgentKind.COMMAND):
        from skyrl_sdk.agents.trajectory import TrajectoryWriter

        writer = TrajectoryWriter(out / TRAJECTORIES)
    limit = asyncio.Semaphore(config.concurrency)
    t0 = time.perf_counter()

    async def one(task_dir: Path) -> TrialResult:
        async with limit:
            result = await run_trial(
                task_dir,
                config,
                out,
                policy=runner or policy,
                on_trajectory=writer.write if writer else None,
            )
        if on_trial is not None:
            on_trial(result)
        return result

    try:
        results: Sequence[TrialResult] = await asyncio.gather(*(one(d) for d in task_dirs))
    finally:
        if writer is not None:
            writer.close()
        if runner is not None:
            runner.close()
    job = JobResult(
        agent=config.agent.value,
        backend=config.backend.value,
        path=str(Path(config.path).resolve()),
        trials=tuple(results),
        duration_s=time.perf_counter() - t0,
    )
    (out / JOB_FILE).write_text(json.dumps(job.to_json(), indent=2))
    return job


def _stage_cell(outcome: StageOutcome | None) -> str:
    if outcome is None or outcome.status is StageStatus.SKIPPED:
        return "-"
    mark = "" if outcome.status is StageStatus.OK else "!"
    return f"{outcome.duration_s:.1f}{mark}"


def summary_table(job: JobResult) -> Any:
    """A rich table: one row per trial, then the mean reward and errors by kind."""
    from rich.table import Table

    table = Table(title=f"harbor: {job.agent} on {Path(job.path).name} ({job.backend})")
    table.add_column("task")
    table.add_column("reward", justify="right")
    table.add_column("rewards")
    table.add_column("error")
    # Seconds per stage, in order; "-" where it did not run, "!" where it failed.
    table.add_column("/".join(name.value for name in Stage) + " s", justify="right")
    table.add_column("failed stage")
    table.add_column("s", justify="right")
    for t in job.trials:
        extra = {k: v for k, v in (t.rewards or {}).items() if k != "reward"}
        failed = t.failed_stage
        # The kind is in the error column: the stage and the start of its reason here.
        why = (t.stages[failed].error or "").partition(": ")[2] if failed is not None else ""
        table.add_row(
            t.task,
            "-" if t.reward is None else f"{t.reward:g}",
            ", ".join(f"{k}={v:g}" for k, v in extra.items()),
            t.error.value if t.error else "",
            "/".join(_stage_cell(t.stages.get(name)) for name in Stage),
            f"{failed.value}: {why[:80]}" if failed is not None else "",
            f"{t.duration_s:.1f}",
        )
    errors = ", ".join(f"{k}: {v}" for k, v in sorted(job.errors_by_kind.items())) or "none"
    table.caption = (
        f"mean reward {job.mean_reward:.3f} over {len(job.trials)} trial(s); errors: {errors}"
    )
    return table


__all__ = [
    "JobConfig",
    "JobResult",
    "Stage",
    "StageOutcome",
    "StageStatus",
    "StepResult",
    "TrialError",
    "TrialResult",
    "run_job",
    "run_trial",
    "summary_table",
]
