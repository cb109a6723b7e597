"""Evaluation runs: resumable runs, summaries (the engine behind `skyrl eval`).

Policy specs are read by `skyrl_sdk.agents.policy_spec` (the one parser `skyrl serve` uses too).

An evaluation directory holds:
- `trajectories.jsonl`: one line per finished episode, appended as each one finishes;
- `results.json`: the summary and one row per episode, written when the run ends.

Resuming reads `trajectories.jsonl`, keeps every episode that finished without an
infrastructure error, and runs only the missing or errored ones (keyed on (task id, trial):
the episode id, `skyrl_sdk.agents.trials`).

With `trials=K` every task is played K times (`agents.trials`: trial k's sampling seed is
derived from k, the env's seed stays the task's), and `results.json` carries the run's
statistics (`skyrl_sdk.stats`): `trials`, `per_task`, `mean`, `ci95`, `pass_at_k`,
`pass_hat_k` and `flip_rate`.

An env without a task list (its state drawn from the seed, the Gymnasium way) is played by
seeds: `eval_rows` gives seeds `offset .. offset + num - 1` as the rows `seed-<n>`, whose
episodes start with `reset(seed=n)` and whose trajectories and result rows carry `seed`.
"""

from __future__ import annotations

import json
import statistics
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from skyrl_gym.tasks import TaskRow, seed_tasks
from skyrl_sdk.agents import policy_spec
from skyrl_sdk.agents.agent import Agent
from skyrl_sdk.agents.policy import Policy, SamplingParams
from skyrl_sdk.agents.policy_spec import (  # noqa: F401 (re-exported, importable from here)
    POLICY_SPEC_HELP,
    load_renderer,
)
from skyrl_sdk.agents.rollout import EnvFactory, LoopAgent, RolloutLimits, run_episodes
from skyrl_sdk.agents.trajectory import (
    StopReason,
    Trajectory,
    TrajectoryWriter,
    latest_by_episode,
    read_trajectories,
)
from skyrl_sdk.agents.trials import trial_agent, trial_episode_id, trial_episodes
from skyrl_sdk.stats import TrialStats, per_task, trial_stats

TRAJECTORIES = "trajectories.jsonl"
RESULTS = "results.json"
DEFAULT_MAX_TURNS = 8
"""Turn limit of `skyrl eval` for an env registered without one."""


class EvalError(ValueError):
    """The evaluation cannot start (bad spec, output dir in use, no tasks)."""


# -- policies -----------------------------------------------------------------------------


def __getattr__(name: str) -> Any:
    """`load_policy` stays importable from here for one release (deprecated): it returns the
    bare `Policy` and raises `EvalError`, as before the one parser in `policy_spec`."""
    if name == "load_policy":
        warnings.warn(
            "skyrl_sdk.agents.evaluate.load_policy is deprecated: use "
            "skyrl_sdk.agents.policy_spec.load_policy(spec, ...).policy",
            DeprecationWarning,
            stacklevel=2,
        )
        return _deprecated_load_policy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _deprecated_load_policy(spec: str, **kwargs: Any) -> Policy:
    try:
        return policy_spec.load_policy(spec, **kwargs).policy
    except policy_spec.PolicySpecError as e:
        raise EvalError(str(e)) from e


def parse_env_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """`--env-kwarg KEY=VALUE` items as constructor keyword arguments.

    VALUE is read as JSON when it parses (`3`, `true`, `["a"]`), else kept as text
    (`tool_format=hermes`). `EvalError` names an item without `=` or with a bad key.
    """
    kwargs: dict[str, Any] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier():
            raise EvalError(f"--env-kwarg {item!r}: expected KEY=VALUE with KEY a Python name")
        if key == "tasks":  # a path given here would reach the env as a string
            raise EvalError("--env-kwarg tasks=...: give task rows as --tasks FILE")
        try:
            kwargs[key] = json.loads(raw)
        except ValueError:
            kwargs[key] = raw
    return kwargs


# -- summaries ----------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalSummary:
    """Aggregate numbers over the episodes of a run."""

    episodes: int
    """Episodes in the summary."""
    mean_reward: float
    """Mean episode reward."""
    success_rate: float
    """Fraction of episodes the env judged successful."""
    mean_turns: float
    """Mean assistant turns per episode."""
    stop_reasons: dict[str, int]
    """Episodes per stop reason."""
    parse_error_rate: float
    """Unparseable replies per turn."""
    generated_tokens: int
    """Sampled tokens over all episodes."""
    mean_duration_s: float
    """Mean wall-clock seconds per episode."""
    errored: int
    """Episodes that ended in an env or policy error (rerun by `--resume`)."""
    trainable: int
    """Episodes with exact token ids and logprobs."""

    def to_json(self) -> dict[str, int | float | dict[str, int]]:
        """The summary as a JSON object (`results.json`'s `summary`)."""
        return asdict(self)


def summarize(trajectories: Sequence[Trajectory]) -> EvalSummary:
    """Summary numbers for a set of trajectories."""
    n = len(trajectories)
    turns = sum(len(t.turns) for t in trajectories)

    def mean(values: list[float]) -> float:
        return statistics.fmean(values) if values else 0.0

    return EvalSummary(
        episodes=n,
        mean_reward=mean([t.reward for t in trajectories]),
        success_rate=mean([float(t.success) for t in trajectories]),
        mean_turns=mean([float(len(t.turns)) for t in trajectories]),
        stop_reasons=dict(Counter(t.stop_reason.value for t in trajectories).most_common()),
        parse_error_rate=sum(t.parse_errors for t in trajectories) / turns if turns else 0.0,
        generated_tokens=sum(t.num_generated_tokens for t in trajectories),
        mean_duration_s=mean([t.duration_s for t in trajectories]),
        errored=sum(t.stop_reason.is_error for t in trajectories),
        trainable=sum(t.trainable for t in trajectories),
    )


# -- runs ---------------------------------------------------------------------------------


def eval_rows(
    rows: Sequence[TaskRow],
    *,
    env_id: str,
    num: int | None = None,
    seed_offset: int | None = None,
) -> list[TaskRow]:
    """The rows an evaluation plays.

    `rows` are the task rows (the env's own, or `--tasks`): their first `num`. With none, the
    env is played by seeds: `num` seed rows from `seed_offset` (default 0) up. `EvalError`
    for a seed env without `num`, and for `seed_offset` on an env that has tasks.
    """
    if rows:
        if seed_offset is not None:
            raise EvalError(
                f"--seed-offset: env {env_id!r} has {len(rows)} task row(s), which pick its "
                "episodes; --seed-offset is for envs played by seeds (no task list)"
            )
        return list(rows[:num]) if num is not None else list(rows)
    if num is None:
        raise EvalError(
            f"--num: env {env_id!r} has no task list, so it is played by seeds: pass --num N "
            "for seeds 0..N-1 (--seed-offset K shifts them), or --tasks FILE"
        )
    return seed_tasks(num, seed_offset or 0)


@dataclass(frozen=True)
class EvalPlan:
    """What an evaluation run will do, decided before any episode starts."""

    out_dir: Path
    """Where `trajectories.jsonl` and `results.json` go."""
    episodes: list[tuple[str, TaskRow]]
    """(episode_id, task) pairs still to run."""
    kept: list[Trajectory] = field(default_factory=list)
    """Finished episodes carried over from an earlier run (`--resume`)."""
    total: int = 0
    """Episodes in the whole evaluation (kept + to run)."""
    order: tuple[str, ...] = ()
    """Every episode id of the evaluation in task order (`results.json` lists them so)."""
    trials: int = 1
    """K: trials per task."""
    trial_of: dict[str, int] = field(default_factory=dict)
    """Each episode id's trial (an id missing here is trial 0)."""


def plan(
    tasks: Sequence[TaskRow], out_dir: str | Path, *, resume: bool = False, trials: int = 1
) -> EvalPlan:
    """Decide which episodes to run (every task `trials` times); refuses to mix runs
    unless `resume`."""
    out = Path(out_dir)
    path = out / TRAJECTORIES
    if out.exists() and not out.is_dir():
        raise EvalError(f"--out {out}: not a directory")
    if not tasks:
        raise EvalError("no tasks to evaluate")
    if trials < 1:
        raise EvalError(f"--trials {trials}: must be at least 1")
    if len({str(t["task_id"]) for t in tasks}) != len(tasks):
        raise EvalError("task ids must be unique")
    episodes, trial_of = trial_episodes(tasks, trials)
    if len(trial_of) != len(episodes):  # a task id such as 'a#1' next to task 'a'
        raise EvalError("task ids must be unique per trial: an id looks like another's trial")
    previous: dict[str, Trajectory] = {}
    if path.exists() and path.stat().st_size > 0:
        if not resume:
            raise EvalError(f"{path} already has results: pass --resume, or choose another --out")
        previous = latest_by_episode(read_trajectories(path))
    wanted = {e for e, _ in episodes}
    kept = [t for e, t in previous.items() if e in wanted and not t.stop_reason.is_error]
    done = {t.episode_id for t in kept}
    return EvalPlan(
        out,
        [(e, t) for e, t in episodes if e not in done],
        kept,
        len(episodes),
        # Task order, each task's trials together.
        tuple(trial_episode_id(str(t["task_id"]), k) for t in tasks for k in range(trials)),
        trials,
        trial_of,
    )


def check_resume(the_plan: EvalPlan, *, env_id: str, policy: str) -> None:
    """Refuse to resume a run whose kept episodes came from another env or policy.

    Mixing them would report one number for two different evaluations. Errored episodes are
    rerun, not kept, so a run where nothing was kept may go on with any policy.
    """
    for kept in the_plan.kept:
        if kept.env_id != env_id:
            raise EvalError(
                f"--resume would mix envs in {the_plan.out_dir}: env was {kept.env_id!r}, "
                f"now {env_id!r}; choose another --out"
            )
        if kept.policy != policy:
            raise EvalError(
                f"--resume would mix policies in {the_plan.out_dir}: policy was "
                f"{kept.policy!r}, now {policy!r}; choose another --out"
            )


def failure_outside_policy(trajectories: Sequence[Trajectory]) -> str | None:
    """A one-line reason when nothing succeeded because of the env, else None.

    That is: every episode ended in an error, and at least one in an env error (a missing
    database, a crashed sandbox) or an agent error (a command agent that is missing or
    crashes). Episodes that merely scored 0, or a policy that failed
    every episode by itself, are results, not a broken run.
    """
    if not trajectories or not all(t.stop_reason.is_error for t in trajectories):
        return None
    outside = (StopReason.ENV_ERROR, StopReason.AGENT_ERROR)
    env_errors = [t for t in trajectories if t.stop_reason in outside]
    if not env_errors:
        return None
    common, count = Counter(t.error or "unknown error" for t in env_errors).most_common(1)[0]
    first_line = common.strip().splitlines()[0] if common.strip() else "unknown error"
    kinds = ", ".join(
        f"{n} {k}" for k, n in Counter(t.stop_reason.value for t in env_errors).items()
    )
    return (
        f"all {len(trajectories)} episodes failed ({kinds}); most common ({count}x): {first_line}"
    )


def read_trajectory_file(path: str | Path) -> list[Trajectory]:
    """Every trajectory in a JSONL file; `EvalError` naming the first line that is not one.

    A partial (unterminated) last line is skipped, as a kill mid-write leaves one.
    """
    items: list[Trajectory] = []
    number = 0
    try:
        with Path(path).open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):  # noqa: B007  (read after the loop)
                if not line.endswith("\n"):
                    break
                if line.strip():
                    items.append(Trajectory.from_json(json.loads(line)))
    except (ValueError, KeyError, TypeError, AttributeError) as e:  # JSON, UTF-8, fields
        raise EvalError(
            f"{path}: line {number} is not a trajectory (expected the trajectories.jsonl "
            f"written by `skyrl eval` or `skyrl train`): {type(e).__name__}: {e}"
        ) from None
    return items


async def run_plan(
    the_plan: EvalPlan,
    make_env: EnvFactory,
    policy: Policy,
    *,
    env_id: str,
    concurrency: int = 8,
    limits: RolloutLimits | None = None,
    sampling: SamplingParams | None = None,
    on_done: Callable[[Trajectory], None] | None = None,
    agent: Agent | None = None,
) -> list[Trajectory]:
    """Run the plan's episodes, streaming each to `trajectories.jsonl`; then write
    `results.json` over every episode of the evaluation (kept + new).

    The episodes are played by `agent` (e.g. a command agent over `policy`, whose `limits`
    and `sampling` are then the harness's business), by default the loop agent
    `LoopAgent(policy, limits, sampling)`; with several trials, trial k's loop agent samples
    with `trial_seed(sampling.seed, k, K)` (`agents.trials`)."""
    if the_plan.trials == 1:
        player: Agent = (
            agent if agent is not None else LoopAgent(policy, limits or RolloutLimits(), sampling)
        )
    else:
        player = trial_agent(
            the_plan.trial_of,
            the_plan.trials,
            policy=policy,
            limits=limits,
            sampling=sampling,
            agent=agent,
        )
    the_plan.out_dir.mkdir(parents=True, exist_ok=True)
    with TrajectoryWriter(the_plan.out_dir / TRAJECTORIES) as writer:
        new = await run_episodes(
            make_env,
            player,
            the_plan.episodes,
            concurrency=concurrency,
            env_id=env_id,
            writer=writer,
            on_done=on_done,
        )
    # Task order, kept episodes in their places (a plan built by hand may lack `order`).
    order = {e: i for i, e in enumerate(the_plan.order or [e for e, _ in the_plan.episodes])}
    everything = sorted(
        # An episode that failed before its agent played (the env could not be made) was
        # recorded without its trial: the plan knows it.
        [_with_trial(t, the_plan.trial_of) for t in (*the_plan.kept, *new)],
        key=lambda t: (t.episode_id not in order, order.get(t.episode_id, 0), t.episode_id),
    )
    write_results(the_plan.out_dir, everything, env_id=env_id, policy=player.name)
    return everything


def _with_trial(trajectory: Trajectory, trial_of: dict[str, int]) -> Trajectory:
    """`trajectory` with its plan's trial, where it was recorded without one (trial 0)."""
    trial = trial_of.get(trajectory.episode_id, 0)
    if trajectory.trial or trial == trajectory.trial:
        return trajectory
    return replace(trajectory, trial=trial)


def run_stats(trajectories: Sequence[Trajectory]) -> TrialStats:
    """The run's success statistics over its tasks and trials (`skyrl_sdk.stats`): success
    is the env's verdict, and an episode that errored counts as a failure."""
    return trial_stats(per_task((t.task_id, t.success) for t in trajectories))


def write_results(
    out_dir: Path, trajectories: Sequence[Trajectory], *, env_id: str, policy: str
) -> None:
    """Write `results.json`: the summary plus one row per episode."""
    rows = [
        {
            "episode_id": t.episode_id,
            "task_id": t.task_id,
            "seed": t.seed,
            "trial": t.trial,
            "reward": t.reward,
            "success": t.success,
            "stop_reason": t.stop_reason.value,
            "turns": len(t.turns),
            "generated_tokens": t.num_generated_tokens,
            "duration_s": round(t.duration_s, 4),
            "trainable": t.trainable,
            "error": t.error,
        }
        for t in trajectories
    ]
    data = {
        "env": env_id,
        "policy": policy,
        "summary": summarize(trajectories).to_json(),
        **(run_stats(trajectories).to_json() if trajectories else {}),
        "episodes": rows,
    }
    tmp = out_dir / (RESULTS + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out_dir / RESULTS)
