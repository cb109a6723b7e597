"""Held-out evaluation: how often the policy succeeds on tasks the run never trains on.

A run's training reward says the trainer learns; only tasks outside the training set say the
policy generalises. `HeldoutEvaluator` plays `heldout.episodes` episodes on the env built with
`heldout.env_kwargs` (over `env.kwargs`: e.g. a held-out split) and reports the success rate
with a 95% Wilson interval, overall and per task family, and the flip rate of the tasks it
plays more than once (`skyrl_sdk.stats`, the statistics `skyrl eval` reports).

An env without tasks (the Gymnasium way: its state drawn from the seed) is evaluated on seeds
`heldout.seed_offset`, `+1`, ... (task ids `seed-<n>`); training draws its seeds below
`heldout.seed_offset`, so no held-out episode is ever trained on.

Every evaluation plays the same episodes with the same sampling seeds (episode ids do not
include the step), so two evaluations of one run differ only by the weights: common random
numbers, which make a before/after difference less noisy than two independent samples.
`compare_evaluations` pairs two of them task by task (`skyrl compare`'s statistics).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import skyrl_gym
from skyrl_gym.tasks import TaskRow, seed_tasks
from skyrl_sdk.agents.agent import PlayableEnv
from skyrl_sdk.agents.policy import Policy, SamplingParams
from skyrl_sdk.agents.rollout import LoopAgent, RolloutLimits, run_episodes
from skyrl_sdk.agents.trajectory import Trajectory, TrajectoryWriter
from skyrl_sdk.stats import Z_95, Comparison, TaskOutcome, compare_runs, flip_rate
from skyrl_sdk.stats import wilson_interval as _wilson
from skyrl_sdk.trainer.config import TrainConfig

RESULTS_FILE = "heldout.jsonl"
"""One JSON row per evaluation (a `HeldoutResult`), in the run directory."""
TRAJECTORIES_FILE = "heldout_trajectories.jsonl"
"""Every held-out episode (for `skyrl view`), in the run directory."""


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (`skyrl_sdk.stats`: sound near 0
    and 1, unlike the normal approximation); (0, 1) when `n` is 0."""
    if n == 0:
        return 0.0, 1.0
    interval = _wilson(successes, n, z=z)
    return interval.low, interval.high


@dataclass(frozen=True)
class FamilyResult:
    """Held-out success of the tasks of one family."""

    episodes: int
    """Episodes played on this family's tasks."""
    successes: int
    """Of which the env judged successful."""
    success: float
    """`successes / episodes`."""


@dataclass(frozen=True)
class HeldoutResult:
    """One held-out evaluation."""

    step: int
    """Optimizer steps taken before it (0: the untrained policy)."""
    version: int
    """Policy version every held-out token was sampled with."""
    episodes: int
    """Episodes played."""
    successes: int
    """Episodes the env judged successful."""
    success: float
    """`successes / episodes`."""
    ci_low: float
    """Lower end of the 95% Wilson interval of `success`."""
    ci_high: float
    """Upper end of the 95% Wilson interval of `success`."""
    reward_mean: float
    """Mean episode reward."""
    errors: int
    """Episodes that ended on an env or policy error (counted as failures)."""
    temperature: float
    """Sampling temperature of the episodes."""
    families: dict[str, FamilyResult]
    """Per task family (the task row's `family`; the env id when rows have none)."""
    flip_rate: float | None = None
    """Of the tasks played more than once (the episodes cycle through the tasks), the
    fraction whose episodes disagree; None when no task repeats."""
    per_task: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Each task's episode outcomes (1: success) in play order: what pairs two evaluations
    task by task (`compare_evaluations`)."""


def summarize(
    trajectories: Sequence[Trajectory],
    families: Sequence[str],
    *,
    step: int,
    version: int,
    temperature: float,
) -> HeldoutResult:
    """A `HeldoutResult` of finished episodes (`families[i]` is episode i's family)."""
    n = len(trajectories)
    wins = sum(t.success for t in trajectories)
    low, high = wilson_interval(wins, n)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    outcomes: dict[str, list[int]] = defaultdict(list)
    for t, family in zip(trajectories, families, strict=True):
        counts[family][0] += 1
        counts[family][1] += int(t.success)
        outcomes[t.task_id].append(int(t.success))
    tasks = {task: TaskOutcome(sum(v), len(v)) for task, v in outcomes.items()}
    return HeldoutResult(
        step=step,
        version=version,
        episodes=n,
        successes=wins,
        success=wins / n if n else 0.0,
        ci_low=low,
        ci_high=high,
        reward_mean=sum(t.reward for t in trajectories) / n if n else 0.0,
        errors=sum(t.stop_reason.is_error for t in trajectories),
        temperature=temperature,
        families={
            name: FamilyResult(played, won, won / played)
            for name, (played, won) in sorted(counts.items())
        },
        flip_rate=flip_rate(tasks),
        per_task={task: tuple(v) for task, v in outcomes.items()},
    )


def compare_evaluations(
    before: HeldoutResult, after: HeldoutResult, tasks: Callable[[str], bool] | None = None
) -> Comparison | None:
    """`after` against `before`, paired task by task and episode by episode (both played the
    same episodes with the same seeds), over the task ids `tasks` keeps (None: all): the
    difference with its paired bootstrap interval and a verdict
    (`skyrl_sdk.stats.compare_runs`). None when either lacks its per-task outcomes (an
    evaluation recorded before they were kept) or they share no task."""
    if not before.per_task or not after.per_task:
        return None

    def keyed(result: HeldoutResult) -> dict[tuple[str, int], bool]:
        return {
            (t, k): bool(v)
            for t, vs in result.per_task.items()
            if tasks is None or tasks(t)
            for k, v in enumerate(vs)
        }

    try:
        return compare_runs(keyed(before), keyed(after))
    except ValueError:  # no task in common
        return None


def heldout_env_kwargs(
    config: TrainConfig, env_kwargs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The held-out env's constructor arguments: `heldout.env_kwargs` over the run's
    (`env_kwargs`, default `env.kwargs`), task rows of a path in `heldout.env_kwargs.tasks`
    read once (a `ConfigError` naming that field)."""
    from skyrl_sdk.trainer.run_env import TASKS_FIELD, read_task_rows

    if config.heldout.env_kwargs is None:
        raise ValueError("heldout.env_kwargs is not set: there is no held-out split")
    own = dict(config.heldout.env_kwargs)
    if isinstance(own.get(TASKS_FIELD), str | list | tuple):
        own[TASKS_FIELD] = read_task_rows(own[TASKS_FIELD], "heldout.env_kwargs.tasks")
    base = config.env.kwargs if env_kwargs is None else env_kwargs
    return {**base, **own}


def heldout_tasks(
    config: TrainConfig, env_kwargs: Mapping[str, Any] | None = None
) -> list[TaskRow]:
    """The episodes of every held-out evaluation: `heldout.episodes` rows cycling through the
    held-out env's tasks, or, for an env without tasks, the seed rows `heldout.seed_offset`
    up. Bad settings (rows, arguments the env rejects) are a `ConfigError` naming the field."""
    from skyrl_sdk.trainer.run_env import build_env, require_env_id

    settings = config.heldout
    kwargs = heldout_env_kwargs(config, env_kwargs)
    probe = build_env(require_env_id(config), config.env.max_turns, kwargs, "heldout.env_kwargs")
    try:
        tasks = list(getattr(probe.unwrapped, "tasks", None) or ())
    finally:
        probe.close()
    if not tasks:
        return seed_tasks(settings.episodes, settings.seed_offset)
    return [tasks[i % len(tasks)] for i in range(settings.episodes)]


class HeldoutEvaluator:
    """Plays a run's held-out episodes and records the results (see the module docstring)."""

    def __init__(
        self,
        config: TrainConfig,
        run_dir: Path,
        sampling: SamplingParams,
        limits: RolloutLimits,
        *,
        tasks: Sequence[TaskRow] | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        print_line: Callable[[str], None] | None = None,
    ):
        """Held-out evaluation of the run `config` describes (`config.heldout.env_kwargs`
        must be set); `sampling` and `limits` are the training episodes'. `tasks` (default:
        `heldout_tasks`) are the episodes every evaluation plays, `env_kwargs` (default:
        `heldout_env_kwargs`) the held-out env's arguments; `print_line` (None: silent) shows
        each evaluation's progress (`progress_lines`) and result."""
        self.print_line = print_line
        settings = config.heldout
        self.settings = settings
        self.env_id = config.env.id
        self.env_kwargs = dict(env_kwargs) if env_kwargs is not None else heldout_env_kwargs(config)
        self.max_turns = config.env.max_turns
        temperature = (
            settings.temperature if settings.temperature is not None else sampling.temperature
        )
        self.sampling = replace(sampling, temperature=temperature)
        self.limits = limits
        self.run_dir = run_dir
        self.tasks: list[TaskRow] = (
            list(tasks) if tasks is not None else heldout_tasks(config, self.env_kwargs)
        )
        """The episodes of one evaluation, in order."""

    def make_env(self) -> PlayableEnv:
        """A fresh env serving the held-out tasks."""
        return skyrl_gym.make(self.env_id, max_turns=self.max_turns, **self.env_kwargs)

    def due(self, step: int, *, last: bool) -> bool:
        """Whether to evaluate after `step` steps (`last`: the run's final step)."""
        every = self.settings.every_steps
        return step == 0 or last or bool(every and step % every == 0)

    async def evaluate(
        self,
        policy: Policy,
        *,
        step: int,
        version: int,
        label: str | None = None,
    ) -> HeldoutResult:
        """Play the held-out episodes with `policy` (serving `version`), append the result
        to `heldout.jsonl` and the episodes to `heldout_trajectories.jsonl`; `label` names the
        evaluation in printed lines (default: `held-out after step N`)."""
        chosen = self.tasks
        label = label or f"held-out after step {step}"
        show = self.print_line
        on_done = None if show is None else progress_lines(show, len(chosen), label)
        # Every episode at once (concurrency: all of them), written in task order after.
        trajectories = await run_episodes(
            self.make_env,
            LoopAgent(policy, self.limits, self.sampling),
            [(f"heldout/{task.get('task_id', i)}#{i}", task) for i, task in enumerate(chosen)],
            concurrency=len(chosen),
            env_id=self.env_id,
            on_done=on_done,
        )
        families = [str(t.get("family") or self.env_id) for t in chosen]
        result = summarize(
            trajectories,
            families,
            step=step,
            version=version,
            temperature=self.sampling.temperature,
        )
        with TrajectoryWriter(self.run_dir / TRAJECTORIES_FILE) as writer:
            for trajectory in trajectories:
                writer.write(trajectory)
        with (self.run_dir / RESULTS_FILE).open("a") as f:
            f.write(json.dumps(asdict(result)) + "\n")
        if show is not None:
            show(
                f"{label}: success {result.success:.1%} [{result.ci_low:.1%}, "
                f"{result.ci_high:.1%}] over {result.episodes} episodes"
            )
        return result


def progress_lines(
    print_line: Callable[[str], None], total: int, label: str, parts: int = 4
) -> Callable[[Trajectory], None]:
    """An `on_done` for `HeldoutEvaluator.evaluate` that prints one line at each `parts`-th of
    `total` episodes (`label: 128/512 episodes, success 12.5% so far, 41 s`): an evaluation of
    hundreds of episodes takes minutes on a CPU and should not look stuck."""
    import time

    started = time.perf_counter()
    marks = {max(1, round(total * k / parts)) for k in range(1, parts + 1)}
    done = solved = 0

    def on_done(trajectory: Trajectory) -> None:
        nonlocal done, solved
        done += 1
        solved += bool(trajectory.success)
        if done in marks:
            print_line(
                f"{label}: {done}/{total} episodes, success {solved / done:.1%} so far, "
                f"{time.perf_counter() - started:.0f} s"
            )

    return on_done


def read_results(run_dir: Path) -> list[HeldoutResult]:
    """The held-out evaluations a run recorded, in order (empty when it had none)."""
    path = run_dir / RESULTS_FILE
    if not path.exists():
        return []
    results = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        row["families"] = {k: FamilyResult(**v) for k, v in row["families"].items()}
        row["per_task"] = {k: tuple(v) for k, v in row.get("per_task", {}).items()}
        results.append(HeldoutResult(**row))
    return results


def truncate_results(run_dir: Path, step: int) -> None:
    """Drop evaluations after `step` (a resumed run redoes them)."""
    path = run_dir / RESULTS_FILE
    if path.exists():
        kept = [r for r in path.read_text().splitlines() if json.loads(r)["step"] <= step]
        path.write_text("".join(line + "\n" for line in kept))


def clear(run_dir: Path) -> None:
    """Remove a previous run's held-out files (a fresh run in a used directory)."""
    for name in (RESULTS_FILE, TRAJECTORIES_FILE):
        (run_dir / name).unlink(missing_ok=True)
