"""What a Harbor job runs and what it records: `JobConfig`, each trial's `TrialResult`
(`<trial>/result.json`: its stages, its steps, its error kind) and the `JobResult`
(`<out>/job.json`)."""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from skyrl_gym.envs.harbor.task import check_env_names
from skyrl_gym.stages import StageStop
from skyrl_sdk.benchmarks.harbor.agents import AgentKind
from skyrl_sdk.sandboxes import Backend
from skyrl_sdk.stats import TrialStats, per_task, trial_stats

JOB_FILE = "job.json"
RESULT_FILE = "result.json"
TRAJECTORIES = "trajectories.jsonl"


class TrialError(enum.StrEnum):
    """The short kind of a trial's error (`error` in job.json). The three stage limits'
    kinds are `skyrl_gym.stages.StageStop`'s words, as SWE and terminal episodes use them."""

    INVALID_TASK = "invalid_task"
    """The task folder is malformed (bad task.toml, missing test.sh, unknown schema, ...)."""
    ENVIRONMENT = "environment_error"
    """The environment could not be built or started."""
    BUILD_TIMEOUT = StageStop.BUILD_TIMEOUT.value
    """Building the environment (its image or root, the Dockerfile's steps) ran past
    `[environment].build_timeout_sec` times the timeout multiplier; the agent never ran and
    there is no reward."""
    AGENT_TIMEOUT = StageStop.AGENT_TIMEOUT.value
    """The agent ran past its timeout (still graded)."""
    AGENT_NONZERO_EXIT = "agent_nonzero_exit"
    """The agent's command exited non-zero (still graded)."""
    AGENT_ERROR = "agent_error"
    """The agent failed (still graded)."""
    VERIFIER_TIMEOUT = StageStop.VERIFIER_TIMEOUT.value
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
    """Reading the task folder (and converting a Terminal-Bench 1 folder), then building
    the environment: its root or image and the Dockerfile's steps, limited by
    `[environment].build_timeout_sec` (`build_timeout`)."""
    START = "start"
    """Opening the agent's sandbox over the built environment and its healthcheck (a
    multi-step trial: every step's sandbox and its `workdir/setup.sh`)."""
    AGENT = "agent"
    """The agent phase, limited by `[agent].timeout_sec` (`agent_timeout`); its clock
    starts after the environment has started, whatever the agent."""
    VERIFIER = "verifier"
    """The verifier phase: test.sh and the reward files, limited by `[verifier].timeout_sec`
    (`verifier_timeout`)."""


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


_TIMEOUT_ERRORS = frozenset(
    {TrialError.BUILD_TIMEOUT, TrialError.AGENT_TIMEOUT, TrialError.VERIFIER_TIMEOUT}
)


def stage_outcome(
    duration_s: float, error: TrialError | None = None, message: str = ""
) -> StageOutcome:
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
    """Scales the build, agent and verifier timeouts of every task."""
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
    trials: int = 1
    """Trials per task (`--trials K`, Harbor's `-k/--n-attempts`)."""
    seed: int | None = None
    """llm agent: the sampling seed of trial 0 (`--seed`); trial k samples with
    `trials.trial_seed(seed, k, trials)`, so trials differ and a rerun repeats them."""

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
        if self.trials < 1:
            raise ValueError(f"trials must be >= 1, got {self.trials}")
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
    trial: int = 0
    """Which of the task's trials this is (0..K-1 with `--trials K`)."""

    @property
    def success(self) -> bool:
        """Harbor's verdict: a reward of at least 1."""
        return self.reward is not None and self.reward >= 1

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
    """One per task and trial, in task order (a task's trials together)."""
    duration_s: float = 0.0
    """Wall-clock seconds of the job."""

    @property
    def mean_reward(self) -> float:
        """Mean reward over all trials; a trial without a reward counts as 0."""
        if not self.trials:
            return 0.0
        return sum(t.reward or 0.0 for t in self.trials) / len(self.trials)

    def statistics(self) -> TrialStats | None:
        """Success (reward >= 1) over tasks and trials (`skyrl_sdk.stats`); None without
        trials."""
        if not self.trials:
            return None
        return trial_stats(per_task((t.task, t.success) for t in self.trials))

    @property
    def stage_seconds(self) -> dict[Stage, float]:
        """Seconds per stage over all trials, every stage in order: where the job's time
        went (a slow build is in `build`, never in `agent`)."""
        return {
            name: sum(t.stages.get(name, StageOutcome()).duration_s for t in self.trials)
            for name in Stage
        }

    @property
    def errors_by_kind(self) -> dict[str, int]:
        """Trials per error kind."""
        return dict(Counter(t.error.value for t in self.trials if t.error is not None))

    def to_json(self) -> dict[str, Any]:
        stats = self.statistics()
        return {
            "agent": self.agent,
            "backend": self.backend,
            "path": self.path,
            "n_trials": len(self.trials),
            "n_errors": sum(t.error is not None for t in self.trials),
            "mean_reward": self.mean_reward,
            "errors_by_kind": self.errors_by_kind,
            "duration_s": self.duration_s,
            "stage_seconds": {k.value: v for k, v in self.stage_seconds.items()},
            # trials, per_task, mean, ci95, pass_at_k, pass_hat_k, flip_rate (success is
            # reward >= 1): the same statistics as `skyrl eval`'s results.json.
            **({"statistics": stats.to_json()} if stats is not None else {}),
            "trials": [
                {
                    "task": t.task,
                    "trial": t.trial,
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


__all__ = [
    "JOB_FILE",
    "RESULT_FILE",
    "TRAJECTORIES",
    "JobConfig",
    "JobResult",
    "Stage",
    "StageOutcome",
    "StageStatus",
    "StepResult",
    "TrialError",
    "TrialResult",
    "stage_outcome",
]
