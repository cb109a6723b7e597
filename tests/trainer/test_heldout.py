"""Held-out evaluation: the interval, the lookup-chat split, and evaluations inside a run."""

import json
import random

import pytest

from skyrl_gym.envs.lookup_chat import HELDOUT_ITEMS, ITEMS, make_tasks
from skyrl_sdk.agents.trajectory import read_trajectories
from skyrl_sdk.trainer.async_trainer import AsyncTrainer
from skyrl_sdk.trainer.config import build_config
from skyrl_sdk.trainer.heldout import read_results, wilson_interval


def test_wilson_interval_brackets_the_rate_and_narrows_with_n():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and 0.25 < high < 0.31  # not the normal approximation's empty (0, 0)
    low, high = wilson_interval(10, 10)
    assert high == 1.0 and 0.69 < low < 0.75
    small, large = wilson_interval(5, 10), wilson_interval(50, 100)
    assert small[0] < 0.5 < small[1] and large[0] < 0.5 < large[1]
    assert large[1] - large[0] < small[1] - small[0]


def test_lookup_chat_heldout_split_shares_no_item_and_leaves_train_unchanged():
    train, heldout = make_tasks(), make_tasks(split="heldout")
    assert {t["item"] for t in heldout} == set(HELDOUT_ITEMS)
    assert not {t["item"] for t in heldout} & ({t["item"] for t in train} | {"salt"})
    assert not {t["task_id"] for t in heldout} & {t["task_id"] for t in train}
    # The train split is what it always was (the demo's training must not change).
    rng = random.Random(0)
    expected = [(ITEMS[i], rng.randint(10, 99), rng.randint(2, 30)) for i in range(len(ITEMS))]
    assert [(t["item"], t["price"], t["stock"]) for t in train] == expected
    with pytest.raises(ValueError, match="split"):
        make_tasks(split="test")


def _config(out, *extra):
    return build_config(
        {},
        [
            f"out_dir={out}",
            "env.id=lookup",
            "model.source=lookup-tiny",
            "trainer.steps=3",
            "trainer.max_staleness=1",
            "trainer.checkpoint_every=1",
            "logging.console=false",
            "logging.trajectories=false",
            "seed=0",
            "heldout.env_kwargs={seed: 7}",
            "heldout.episodes=6",
            "heldout.every_steps=2",
            "heldout.temperature=0.5",
            *extra,
        ],
    )


def test_evaluations_run_before_every_k_and_after_at_one_fixed_version(tmp_path):
    result = AsyncTrainer(_config(tmp_path)).run()
    evaluations = read_results(tmp_path)
    # Before training, after step 2 (every 2), after the last step (3).
    assert [(e.step, e.version) for e in evaluations] == [(0, 0), (2, 2), (3, 3)]
    assert all(e.episodes == 6 and e.temperature == 0.5 for e in evaluations)
    assert all(e.ci_low <= e.success <= e.ci_high for e in evaluations)
    episodes = read_trajectories(tmp_path / "heldout_trajectories.jsonl")
    assert len(episodes) == 18
    for evaluation, chunk in zip(
        evaluations, (episodes[:6], episodes[6:12], episodes[12:]), strict=True
    ):
        versions = {v for t in chunk for turn in t.turns for v in turn.policy_versions}
        assert versions == {evaluation.version}  # no weights published mid-evaluation
    # Held-out tasks are the seed-7 rows, and every evaluation plays the same ones.
    ids = [t.task_id for t in episodes]
    assert ids[:6] == ids[6:12] == ids[12:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["heldout_success_start"] == evaluations[0].success
    assert summary["heldout_success_end"] == evaluations[-1].success
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert ["heldout/success" in r for r in rows] == [False, True, True]
    assert result.steps == 3


def test_a_resumed_run_keeps_the_evaluations_up_to_its_checkpoint(tmp_path):
    AsyncTrainer(_config(tmp_path, "trainer.steps=2", "heldout.every_steps=1")).run()
    assert [e.step for e in read_results(tmp_path)] == [0, 1, 2]
    # Pretend the run died after step 1's checkpoint: step 2's evaluation is redone once.
    (tmp_path / "checkpoints" / "latest").write_text("step_000001")
    AsyncTrainer(_config(tmp_path, "trainer.steps=2", "heldout.every_steps=1"), resume=True).run()
    assert [e.step for e in read_results(tmp_path)] == [0, 1, 2]


def test_no_heldout_split_means_no_evaluation(tmp_path):
    AsyncTrainer(
        build_config(
            {},
            [
                f"out_dir={tmp_path}",
                "env.id=lookup",
                "model.source=lookup-tiny",
                "trainer.steps=1",
                "logging.console=false",
            ],
        )
    ).run()
    assert read_results(tmp_path) == []
    assert "heldout_success_start" not in json.loads((tmp_path / "summary.json").read_text())


def test_progress_lines_print_at_each_quarter_with_the_success_so_far():
    from types import SimpleNamespace

    from skyrl_sdk.trainer.heldout import progress_lines

    lines = []
    on_done = progress_lines(lines.append, 10, "held-out after step 3")
    for success in (True, False, True, True, False, False, False, True, False, False):
        on_done(SimpleNamespace(success=success))
    # Marks at round(10 * k / 4): 2 (rounds half to even), 5, 8, 10 episodes.
    assert [line.split(",")[0] for line in lines] == [
        "held-out after step 3: 2/10 episodes",
        "held-out after step 3: 5/10 episodes",
        "held-out after step 3: 8/10 episodes",
        "held-out after step 3: 10/10 episodes",
    ]
    assert [line.split(", ")[1] for line in lines] == [
        "success 50.0% so far",
        "success 60.0% so far",
        "success 50.0% so far",
        "success 40.0% so far",
    ]
