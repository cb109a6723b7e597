"""Held-out results carry the statistics of `skyrl_sdk.stats`: the flip rate of repeated
tasks, per-task outcomes, and a paired before/after comparison (the demo's summary), while
the success rate and its Wilson interval stay what they were."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from skyrl_sdk.agents.trajectory import StopReason, Trajectory
from skyrl_sdk.stats import Verdict
from skyrl_sdk.trainer.heldout import (
    RESULTS_FILE,
    compare_evaluations,
    read_results,
    summarize,
    wilson_interval,
)


def episode(task_id: str, success: bool) -> Trajectory:
    return Trajectory(
        episode_id=f"heldout/{task_id}",
        task_id=task_id,
        env_id="lookup",
        policy="p",
        stop_reason=StopReason.DONE,
        turns=(),
        segments=(),
        prompt_messages=(),
        reward=float(success),
        success=success,
    )


def evaluation(outcomes: list[tuple[str, bool]], step: int):
    trajectories = [episode(t, s) for t, s in outcomes]
    return summarize(trajectories, ["f"] * len(outcomes), step=step, version=step, temperature=1)


def test_summary_keeps_the_wilson_interval_and_adds_the_flip_rate() -> None:
    # Episodes cycle through 4 tasks twice: a and b disagree with themselves, c and d do not.
    plays = [("a", True), ("b", False), ("c", True), ("d", False)]
    plays += [("a", False), ("b", True), ("c", True), ("d", False)]
    result = evaluation(plays, 0)
    assert (result.successes, result.episodes) == (4, 8)
    assert (result.ci_low, result.ci_high) == wilson_interval(4, 8)
    assert result.flip_rate == 0.5
    assert result.per_task == {"a": (1, 0), "b": (0, 1), "c": (1, 1), "d": (0, 0)}
    assert evaluation([("a", True), ("b", False)], 0).flip_rate is None  # no task repeats


def test_before_and_after_pair_task_by_task(tmp_path) -> None:
    tasks = [f"t{i}" for i in range(20)]
    before = evaluation([(t, i < 6) for i, t in enumerate(tasks)], 0)
    after = evaluation([(t, i < 14) for i, t in enumerate(tasks)], 5)
    comparison = compare_evaluations(before, after)
    assert comparison is not None
    assert comparison.difference == pytest.approx(0.4)
    assert (comparison.improved, comparison.regressed) == (8, 0)
    assert comparison.verdict is Verdict.B_BETTER
    # Over the tasks a filter keeps: t0..t9 (6 solved before, all 10 after).
    first = compare_evaluations(before, after, lambda t: int(t[1:]) < 10)
    assert first is not None and (first.tasks, first.improved) == (10, 4)
    assert first.difference == pytest.approx(0.4)
    assert compare_evaluations(before, after, lambda t: False) is None  # no task in common
    # The per-task outcomes survive heldout.jsonl (tuples again once read back).
    with (tmp_path / RESULTS_FILE).open("w") as f:
        for result in (before, after):
            f.write(json.dumps(asdict(result)) + "\n")
    assert read_results(tmp_path) == [before, after]
    # A row written before per_task existed reads back, and is not compared.
    old = asdict(before)
    del old["per_task"], old["flip_rate"]
    (tmp_path / RESULTS_FILE).write_text(json.dumps(old) + "\n")
    (legacy,) = read_results(tmp_path)
    assert legacy.per_task == {} and compare_evaluations(legacy, after) is None


def test_the_demo_summary_reports_the_paired_difference() -> None:
    from skyrl_sdk.trainer.demos.lookup import PRESETS, _summary

    tasks = [f"t{i}" for i in range(20)]
    before = evaluation([(t, i < 6) for i, t in enumerate(tasks)], 0)
    after = evaluation([(t, i < 14) for i, t in enumerate(tasks)], 5)
    row = {"reward/mean": 0.5, "success/rate": 0.5, "time/step_s": 1.0}
    summary = _summary(PRESETS["tiny"], 0, 5, [row] * 5, [before, after], 0.0)
    assert summary["heldout_success_start"] == before.success  # unchanged numbers
    assert summary["heldout_ci_end"] == [after.ci_low, after.ci_high]
    assert summary["heldout_difference"] == pytest.approx(0.4)
    low, high = summary["heldout_difference_ci"]
    assert 0 < low <= 0.4 <= high
    assert summary["heldout_verdict"] == (
        "the trained policy is better than the untrained policy at 95%"
    )
