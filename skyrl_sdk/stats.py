"""Evaluation statistics: how sure a success rate is, and whether two runs differ.

One home for the numbers every evaluation reports (`skyrl eval`, `skyrl harbor run`,
`skyrl swebench run`, `skyrl text2sql eval --policy`, the demos' held-out result) and for
`skyrl compare`. A leaf module (pure Python, standard library only), so every layer may use it.

The unit of sampling is the task: an evaluation draws tasks from a population, and each task
is played `K` times (trials). So:

- `trial_stats` summarizes one run: its mean success over tasks and a 95% interval, which is
  Wilson's over tasks when every task has one trial (it then covers task sampling only: the
  policy's own sampling noise is invisible with one trial) and a bootstrap that resamples
  whole tasks (their trials together) when there are more; the unbiased `pass@k` and
  `pass^k` estimators for k in 1..K; and the flip rate (tasks whose trials disagree).
- `compare_runs` pairs two runs on the (task, trial) pairs both played, bootstraps the mean
  paired difference by task, and gives a verdict; when it finds none, how many tasks would
  be needed to detect the observed difference at 80% power (`tasks_needed`).

Every bootstrap is seeded, so the same outcomes always give the same interval.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist, fmean
from typing import Any

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "Comparison",
    "Interval",
    "IntervalMethod",
    "TaskOutcome",
    "TrialStats",
    "Verdict",
    "bootstrap_mean",
    "compare_runs",
    "flip_rate",
    "pass_at_k",
    "pass_hat_k",
    "per_task",
    "tasks_needed",
    "trial_stats",
    "wilson_interval",
]

BOOTSTRAP_RESAMPLES = 2000
"""Resamples of every bootstrap here (the percentile interval's tails are 50 resamples each)."""
BOOTSTRAP_SEED = 0
"""Seed of every bootstrap here: the same outcomes give the same interval."""
CONFIDENCE = 0.95
"""The level of every interval and verdict."""
Z_95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval (the held-out evaluation's
constant since it was written, so its numbers stay the same)."""
POWER = 0.8
"""The power `tasks_needed` plans for."""
POWER_FORMULA = "paired-proportion (McNemar) sample size, Connor 1987"
"""How `tasks_needed` counts (named in `skyrl compare`'s verdict)."""
TASK_SAMPLING_ONLY = (
    "one trial per task: the interval covers task sampling only, not the policy's own "
    "sampling noise (run --trials K to measure it)"
)
"""The note a single-trial summary carries."""


class IntervalMethod(enum.StrEnum):
    """How an interval was computed."""

    WILSON = "wilson"
    """Wilson's score interval for a binomial proportion (one trial per task)."""
    BOOTSTRAP = "bootstrap"
    """Percentile bootstrap that resamples tasks, each with all its trials (clustered)."""


@dataclass(frozen=True)
class Interval:
    """A two-sided confidence interval."""

    low: float
    """Lower end."""
    high: float
    """Upper end."""
    method: IntervalMethod
    """How it was computed."""

    def to_json(self) -> list[float]:
        """`[low, high]` (JSON's `ci95`)."""
        return [self.low, self.high]

    def excludes_zero(self) -> bool:
        """Both ends on one side of 0 (a difference detected at the interval's level)."""
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class TaskOutcome:
    """One task's trials: how many ran and how many succeeded."""

    successes: int
    """Trials the env judged successful."""
    trials: int
    """Trials played."""

    def to_json(self) -> dict[str, int]:
        """`{"successes": c, "trials": n}` (`per_task` in results.json)."""
        return {"successes": self.successes, "trials": self.trials}


def per_task(outcomes: Iterable[tuple[str, bool]]) -> dict[str, TaskOutcome]:
    """`(task_id, success)` pairs, one per trial, counted per task (first-seen order)."""
    counts: dict[str, list[int]] = {}
    for task_id, success in outcomes:
        c = counts.setdefault(task_id, [0, 0])
        c[0] += bool(success)
        c[1] += 1
    return {task: TaskOutcome(c, n) for task, (c, n) in counts.items()}


# -- one run ------------------------------------------------------------------------------


def _z(confidence: float = CONFIDENCE) -> float:
    return Z_95 if confidence == CONFIDENCE else NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(successes: int, n: int, *, z: float = Z_95) -> Interval:
    """Wilson's score interval for `successes` out of `n` independent draws (`z`: the normal
    quantile of the level, 95% by default); its ends are exact at 0 and n successes."""
    if n <= 0:
        raise ValueError("wilson_interval needs n >= 1")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(low, high, IntervalMethod.WILSON)


def bootstrap_mean(
    values: Sequence[float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> Interval:
    """Percentile bootstrap interval of the mean of `values`, one value per task (a task's
    success rate over its trials, or a paired difference): resampling tasks with their
    trials together is the clustered bootstrap."""
    if not values:
        raise ValueError("bootstrap_mean needs at least one value")
    rng = random.Random(seed)
    n = len(values)
    means = sorted(math.fsum(rng.choices(values, k=n)) / n for _ in range(resamples))
    tail = (1 - confidence) / 2
    low = means[math.floor(tail * (resamples - 1))]
    high = means[math.ceil((1 - tail) * (resamples - 1))]
    return Interval(low, high, IntervalMethod.BOOTSTRAP)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one task: the chance that at least one of `k` trials drawn
    without replacement from its `n` (of which `c` succeeded) succeeds, 1 - C(n-c,k)/C(n,k)."""
    _check_nck(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """The unbiased pass^k of one task: the chance that all of `k` trials drawn without
    replacement from its `n` (of which `c` succeeded) succeed, C(c,k)/C(n,k)."""
    _check_nck(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_nck(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")


def flip_rate(tasks: Mapping[str, TaskOutcome]) -> float | None:
    """Fraction of tasks (with 2+ trials) whose trials did not all agree; None without any."""
    repeated = [t for t in tasks.values() if t.trials >= 2]
    if not repeated:
        return None
    return sum(0 < t.successes < t.trials for t in repeated) / len(repeated)


@dataclass(frozen=True)
class TrialStats:
    """One run's success statistics (results.json's `trials`, `per_task`, `mean`, ...)."""

    trials: int
    """K: the most trials any task has (every task has K after a complete run)."""
    per_task: dict[str, TaskOutcome]
    """Successes and trials per task id."""
    mean: float
    """Mean over tasks of each task's success rate."""
    ci95: Interval
    """95% interval of `mean` (Wilson when K = 1, clustered bootstrap when K > 1)."""
    pass_at_k: dict[int, float]
    """Unbiased pass@k for k in 1..K, averaged over the tasks with at least k trials."""
    pass_hat_k: dict[int, float]
    """Unbiased pass^k for k in 1..K, averaged the same way."""
    flip_rate: float | None
    """Tasks whose trials disagree, over tasks with 2+ trials (None when K = 1)."""
    note: str = ""
    """What the interval does not cover (set for a single-trial run)."""

    def to_json(self) -> dict[str, object]:
        """The JSON keys results.json (and job.json) carry."""
        return {
            "trials": self.trials,
            "per_task": {task: t.to_json() for task, t in self.per_task.items()},
            "mean": self.mean,
            "ci95": self.ci95.to_json(),
            "ci95_method": self.ci95.method.value,
            "pass_at_k": {str(k): v for k, v in self.pass_at_k.items()},
            "pass_hat_k": {str(k): v for k, v in self.pass_hat_k.items()},
            "flip_rate": self.flip_rate,
            **({"note": self.note} if self.note else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialStats:
        """Inverse of `to_json` (read back from a results file)."""
        low, high = data["ci95"]
        return cls(
            trials=int(data["trials"]),
            per_task={t: TaskOutcome(**c) for t, c in data["per_task"].items()},
            mean=float(data["mean"]),
            ci95=Interval(low, high, IntervalMethod(data["ci95_method"])),
            pass_at_k={int(k): v for k, v in data["pass_at_k"].items()},
            pass_hat_k={int(k): v for k, v in data["pass_hat_k"].items()},
            flip_rate=data["flip_rate"],
            note=str(data.get("note", "")),
        )

    def lines(self) -> list[tuple[str, str]]:
        """(label, value) rows for a summary table (`note` is printed under it)."""
        low, high = self.ci95.low, self.ci95.high
        rows = [
            ("tasks x trials", f"{len(self.per_task)} x {self.trials}"),
            ("mean success", f"{self.mean:.1%}"),
            (f"95% interval ({self.ci95.method.value})", f"{low:.1%} .. {high:.1%}"),
        ]
        rows += [(f"pass@{k}", f"{v:.3f}") for k, v in self.pass_at_k.items()]
        rows += [(f"pass^{k}", f"{v:.3f}") for k, v in self.pass_hat_k.items()]
        if self.flip_rate is not None:
            rows.append(("flip rate", f"{self.flip_rate:.1%}"))
        return rows


def trial_stats(tasks: Mapping[str, TaskOutcome], *, seed: int = BOOTSTRAP_SEED) -> TrialStats:
    """The statistics of one run from its per-task counts (see the module docstring)."""
    played = {task: t for task, t in tasks.items() if t.trials > 0}
    if not played:
        raise ValueError("trial_stats needs at least one task with a trial")
    k_max = max(t.trials for t in played.values())
    rates = [t.successes / t.trials for t in played.values()]
    if k_max == 1:
        interval = wilson_interval(sum(t.successes for t in played.values()), len(played))
    else:
        interval = bootstrap_mean(rates, seed=seed)
    pass_k: dict[int, float] = {}
    pass_hat: dict[int, float] = {}
    for k in range(1, k_max + 1):
        eligible = [t for t in played.values() if t.trials >= k]
        pass_k[k] = fmean(pass_at_k(t.trials, t.successes, k) for t in eligible)
        pass_hat[k] = fmean(pass_hat_k(t.trials, t.successes, k) for t in eligible)
    return TrialStats(
        trials=k_max,
        per_task=dict(played),
        mean=fmean(rates),
        ci95=interval,
        pass_at_k=pass_k,
        pass_hat_k=pass_hat,
        flip_rate=flip_rate(played),
        note=TASK_SAMPLING_ONLY if k_max == 1 else "",
    )


# -- two runs -----------------------------------------------------------------------------


class Verdict(enum.StrEnum):
    """What a paired comparison concludes at 95%."""

    B_BETTER = "b_better"
    """The interval of B - A lies above 0."""
    A_BETTER = "a_better"
    """The interval of B - A lies below 0."""
    NO_DIFFERENCE = "no_difference"
    """The interval contains 0: no detectable difference with these tasks."""


def tasks_needed(
    differences: Sequence[float], *, confidence: float = CONFIDENCE, power: float = POWER
) -> int | None:
    """Tasks a paired comparison needs to detect the mean of `differences` (per-task B - A)
    at `confidence` (two-sided) with `power`: Connor's (1987) sample size for McNemar's test,
    n = (z_a sqrt(psi) + z_b sqrt(psi - delta^2))^2 / delta^2, with delta the mean difference
    and psi the mean squared difference (for one trial per task: the fraction of discordant
    tasks). None when the mean difference is 0 (no number of tasks detects it)."""
    if not differences:
        raise ValueError("tasks_needed needs at least one difference")
    delta = fmean(differences)
    if abs(delta) < 1e-12:
        return None
    psi = fmean(d * d for d in differences)
    z_a, z_b = _z(confidence), NormalDist().inv_cdf(power)
    n = (z_a * math.sqrt(psi) + z_b * math.sqrt(max(psi - delta * delta, 0.0))) ** 2 / delta**2
    return math.ceil(n)


@dataclass(frozen=True)
class Comparison:
    """Run B against run A on the (task, trial) pairs both played (`skyrl compare`)."""

    tasks: int
    """Tasks with at least one trial in both runs."""
    pairs: int
    """(task, trial) pairs compared."""
    mean_a: float
    """A's mean success over the common tasks (their common trials)."""
    mean_b: float
    """B's, the same way."""
    difference: float
    """Mean over tasks of B's success rate minus A's (in [-1, 1])."""
    ci95: Interval
    """95% paired bootstrap interval of `difference` (tasks resampled)."""
    improved: int
    """Tasks whose success rate is higher in B."""
    regressed: int
    """Tasks whose success rate is lower in B."""
    flipped: int
    """Tasks with at least one common trial whose outcome differs between A and B."""
    verdict: Verdict
    """What the interval says."""
    tasks_needed: int | None
    """With no verdict: tasks needed to detect `difference` at 80% power (None when it is 0)."""

    def sentence(self, a: str = "A", b: str = "B") -> str:
        """The plain verdict, the runs called `a` and `b`."""
        if self.verdict is Verdict.B_BETTER:
            return f"{b} is better than {a} at {CONFIDENCE:.0%}"
        if self.verdict is Verdict.A_BETTER:
            return f"{a} is better than {b} at {CONFIDENCE:.0%}"
        head = f"no detectable difference with {self.tasks} tasks"
        points = abs(self.difference) * 100
        if self.tasks_needed is None:
            return f"{head}; the observed difference is 0 points, which no number of tasks detects"
        return (
            f"{head}; about {self.tasks_needed} tasks would be needed to detect {points:.1f} "
            f"points at {POWER:.0%} power ({POWER_FORMULA})"
        )

    def to_json(self) -> dict[str, object]:
        """Every number, plus the verdict and its sentence."""
        return {
            "tasks": self.tasks,
            "pairs": self.pairs,
            "mean_a": self.mean_a,
            "mean_b": self.mean_b,
            "difference": self.difference,
            "ci95": self.ci95.to_json(),
            "ci95_method": "paired bootstrap over tasks",
            "improved": self.improved,
            "regressed": self.regressed,
            "flipped": self.flipped,
            "verdict": self.verdict.value,
            "tasks_needed": self.tasks_needed,
            "power_formula": POWER_FORMULA,
            "sentence": self.sentence(),
        }


def compare_runs(
    a: Mapping[tuple[str, int], bool],
    b: Mapping[tuple[str, int], bool],
    *,
    seed: int = BOOTSTRAP_SEED,
) -> Comparison:
    """Pair runs A and B (success per (task id, trial)) on the pairs both have; `ValueError`
    when they share none."""
    common = [key for key in a if key in b]
    if not common:
        raise ValueError("the two runs have no (task, trial) in common")
    by_task: dict[str, list[tuple[bool, bool]]] = {}
    for key in common:
        by_task.setdefault(key[0], []).append((bool(a[key]), bool(b[key])))
    rate_a = [fmean(float(x) for x, _ in pairs) for pairs in by_task.values()]
    rate_b = [fmean(float(y) for _, y in pairs) for pairs in by_task.values()]
    diffs = [rb - ra for ra, rb in zip(rate_a, rate_b, strict=True)]
    interval = bootstrap_mean(diffs, seed=seed)
    if interval.low > 0:
        verdict = Verdict.B_BETTER
    elif interval.high < 0:
        verdict = Verdict.A_BETTER
    else:
        verdict = Verdict.NO_DIFFERENCE
    return Comparison(
        tasks=len(by_task),
        pairs=len(common),
        mean_a=fmean(rate_a),
        mean_b=fmean(rate_b),
        difference=fmean(diffs),
        ci95=interval,
        improved=sum(d > 0 for d in diffs),
        regressed=sum(d < 0 for d in diffs),
        flipped=sum(any(x != y for x, y in pairs) for pairs in by_task.values()),
        verdict=verdict,
        tasks_needed=tasks_needed(diffs) if verdict is Verdict.NO_DIFFERENCE else None,
    )
