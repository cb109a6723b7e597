"""`skyrl_sdk.stats`: every estimator against numbers computed by hand."""

from __future__ import annotations

import json
import math

import pytest

from skyrl_sdk.stats import (
    TASK_SAMPLING_ONLY,
    IntervalMethod,
    TaskOutcome,
    TrialStats,
    Verdict,
    bootstrap_mean,
    compare_runs,
    flip_rate,
    pass_at_k,
    pass_hat_k,
    per_task,
    tasks_needed,
    trial_stats,
    wilson_interval,
)


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    # n=4 trials, c=2 successes, k=2: 1 - C(2,2)/C(4,2) = 1 - 1/6 (not 1 - (1/2)^2 = 3/4).
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)
    assert pass_at_k(4, 2, 1) == pytest.approx(0.5)
    assert pass_at_k(5, 1, 3) == pytest.approx(1 - 4 / 10)  # C(4,3)=4, C(5,3)=10
    assert pass_at_k(4, 3, 2) == 1.0  # C(1,2) = 0: any two draws include a success
    assert pass_at_k(4, 0, 4) == 0.0
    with pytest.raises(ValueError):
        pass_at_k(4, 2, 5)


def test_pass_hat_k_is_the_unbiased_estimator() -> None:
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)  # C(2,2)/C(4,2)
    assert pass_hat_k(4, 3, 2) == pytest.approx(3 / 6)  # C(3,2)/C(4,2)
    assert pass_hat_k(4, 4, 4) == 1.0
    assert pass_hat_k(4, 3, 4) == 0.0
    assert pass_hat_k(5, 3, 1) == pytest.approx(3 / 5)


def test_wilson_interval_matches_the_textbook_values() -> None:
    # 7 of 10: p = .7, z = 1.96; center (p + z^2/2n)/(1 + z^2/n) = .6445, half-width .2477.
    interval = wilson_interval(7, 10)
    assert interval.method is IntervalMethod.WILSON
    assert (interval.low, interval.high) == pytest.approx((0.3968, 0.8922), abs=1e-4)
    zero = wilson_interval(0, 10)
    assert zero.low == 0.0 and wilson_interval(10, 10).high == 1.0  # exact ends
    assert zero.high == pytest.approx(0.2775, abs=1e-4)
    with pytest.raises(ValueError):
        wilson_interval(0, 0)


def test_bootstrap_is_exact_on_a_two_point_sample_and_seeded() -> None:
    # Resampling [0, 1] twice gives means 0, .5, 1 with chances 1/4, 1/2, 1/4: the 2.5% and
    # 97.5% percentiles are 0 and 1.
    interval = bootstrap_mean([0.0, 1.0])
    assert (interval.low, interval.high) == (0.0, 1.0)
    assert bootstrap_mean([0.5] * 7).to_json() == [0.5, 0.5]
    values = [0.0, 0.25, 1.0, 0.5, 0.75, 1.0, 0.0, 0.25]
    assert bootstrap_mean(values) == bootstrap_mean(values)  # seeded
    assert bootstrap_mean(values, seed=1) != bootstrap_mean(values, seed=2)


def test_bootstrap_agrees_with_the_normal_interval_on_a_large_sample() -> None:
    values = [float(i % 10 < 3) for i in range(400)]  # mean .3, sd .458
    interval = bootstrap_mean(values)
    half = 1.96 * math.sqrt(0.3 * 0.7 / 400)
    assert interval.low == pytest.approx(0.3 - half, abs=0.01)
    assert interval.high == pytest.approx(0.3 + half, abs=0.01)


def test_flip_rate_counts_tasks_whose_trials_disagree() -> None:
    tasks = {
        "a": TaskOutcome(2, 4),
        "b": TaskOutcome(4, 4),
        "c": TaskOutcome(0, 4),
        "d": TaskOutcome(1, 4),
    }
    assert flip_rate(tasks) == 0.5  # a and d
    assert flip_rate({"a": TaskOutcome(1, 1)}) is None


def test_trial_stats_with_four_trials() -> None:
    tasks = per_task(
        [("a", s) for s in (True, False, True, False)]  # c=2
        + [("b", s) for s in (True,) * 4]  # c=4
        + [("c", s) for s in (False,) * 4]  # c=0
        + [("d", s) for s in (True, False, False, False)]  # c=1
    )
    assert tasks["a"] == TaskOutcome(2, 4)
    stats = trial_stats(tasks)
    assert stats.trials == 4
    assert stats.mean == pytest.approx((0.5 + 1 + 0 + 0.25) / 4)
    assert stats.ci95.method is IntervalMethod.BOOTSTRAP
    assert stats.ci95.low <= stats.mean <= stats.ci95.high
    # pass@2 per task: a 1 - 1/6, b 1, c 0, d 1 - C(3,2)/C(4,2) = 1 - 3/6.
    assert stats.pass_at_k[2] == pytest.approx((5 / 6 + 1 + 0 + 0.5) / 4)
    # pass^2: a 1/6, b 1, c 0, d 0.
    assert stats.pass_hat_k[2] == pytest.approx((1 / 6 + 1) / 4)
    assert stats.pass_at_k[1] == stats.pass_hat_k[1] == pytest.approx(stats.mean)
    assert stats.pass_at_k[4] == pytest.approx(3 / 4)  # any success at all
    assert stats.pass_hat_k[4] == pytest.approx(1 / 4)  # every trial a success
    assert stats.flip_rate == 0.5
    assert stats.note == ""
    data = stats.to_json()
    assert data["per_task"]["d"] == {"successes": 1, "trials": 4}
    assert TrialStats.from_json(json.loads(json.dumps(data))) == stats
    assert set(data["pass_at_k"]) == {"1", "2", "3", "4"}


def test_single_trial_stats_use_wilson_and_say_what_they_cover() -> None:
    tasks = per_task([(f"t{i}", i < 7) for i in range(10)])
    stats = trial_stats(tasks)
    assert stats.ci95 == wilson_interval(7, 10)
    assert stats.flip_rate is None
    assert stats.pass_at_k == {1: pytest.approx(0.7)}
    assert stats.note == TASK_SAMPLING_ONLY
    assert "task sampling only" in stats.to_json()["note"]


def test_tasks_needed_is_connors_formula() -> None:
    # 20 tasks: 3 improved, 1 regressed. delta = .1, psi = .2:
    # (1.96 sqrt(.2) + .8416 sqrt(.2 - .01))^2 / .01 = (.8765 + .3669)^2 / .01 = 154.6.
    assert tasks_needed([1.0] * 3 + [-1.0] + [0.0] * 16) == 155
    assert tasks_needed([1.0, -1.0, 0.0]) is None


def test_compare_pairs_tasks_and_trials() -> None:
    a = {(f"t{i}", 0): i < 8 for i in range(20)}
    b = dict(a)
    for i in range(8, 14):  # 30% of the tasks flip to success
        b[(f"t{i}", 0)] = True
    result = compare_runs(a, b)
    assert (result.tasks, result.pairs) == (20, 20)
    assert result.difference == pytest.approx(0.3)
    assert (result.improved, result.regressed, result.flipped) == (6, 0, 6)
    assert result.verdict is Verdict.B_BETTER
    assert result.ci95.low > 0
    assert result.sentence() == "B is better than A at 95%"
    assert compare_runs(b, a).verdict is Verdict.A_BETTER
    # Only the pairs both have count: A's trial 1 of t0 has no partner.
    a[("t0", 1)] = False
    assert compare_runs(a, b).pairs == 20
    with pytest.raises(ValueError, match="no \\(task, trial\\) in common"):
        compare_runs({("x", 0): True}, {("y", 0): True})


def test_compare_without_a_difference_says_how_many_tasks_would_do() -> None:
    a = {(f"t{i}", 0): i % 2 == 0 for i in range(20)}
    b = dict(a)
    for i in (1, 3, 5):  # improved
        b[(f"t{i}", 0)] = True
    b[("t0", 0)] = False  # regressed
    result = compare_runs(a, b)
    assert result.verdict is Verdict.NO_DIFFERENCE
    assert (result.improved, result.regressed, result.flipped) == (3, 1, 4)
    assert result.tasks_needed == 155
    assert result.sentence().startswith(
        "no detectable difference with 20 tasks; about 155 tasks would be needed to detect "
        "10.0 points at 80% power"
    )
