"""Trials' episode ids: `t` for trial 0 and `t#k` after, and the plan refusing task ids that
would make two episodes one (so `--resume` can neither skip a trial nor merge two)."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyrl_sdk.agents.evaluate import EvalError, plan
from skyrl_sdk.agents.trials import trial_episode_id, trial_episodes


def test_a_task_id_that_looks_like_another_tasks_trial_is_refused(tmp_path: Path) -> None:
    tasks = [{"task_id": "a"}, {"task_id": "a#1"}]
    # One trial: the ids stay distinct, and both tasks are played.
    single = plan(tasks, tmp_path / "one")
    assert [e for e, _ in single.episodes] == ["a", "a#1"]
    # Two trials: trial 1 of `a` is `a#1`, the other task's trial 0; refused before any run.
    episodes, trial_of = trial_episodes(tasks, 2)
    assert [e for e, _ in episodes].count(trial_episode_id("a", 1)) == 2
    assert len(trial_of) < len(episodes)
    with pytest.raises(EvalError, match="unique per trial"):
        plan(tasks, tmp_path / "two", trials=2)
    assert not (tmp_path / "two").exists() or not any((tmp_path / "two").iterdir())
