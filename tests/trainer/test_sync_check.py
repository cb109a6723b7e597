"""The weight-sync check (`trainer.sync_check`): SkyRL #2246's bug (the engine's cache not
invalidated on a weight sync), injected into the local engine and nothing else changed, stops
the run at its first sync; a correct sync passes over 20 steps at the noise floor."""

from __future__ import annotations

import json

import pytest

from skyrl_sdk.agents.engine.prefix_cache import PrefixCache
from skyrl_sdk.agents.trajectory import TrainingSample
from skyrl_sdk.trainer.async_trainer import AsyncTrainer
from skyrl_sdk.trainer.config import build_config
from skyrl_sdk.trainer.sync_check import SyncCheckFailed, probe_from


def _config(tmp_path, steps: int, *extra: str, groups: int = 2):
    return build_config(
        {},
        [
            f"out_dir={tmp_path}",
            "env.id=lookup",
            "model.source=lookup-tiny",
            f"trainer.steps={steps}",
            "trainer.max_staleness=1",  # async: episodes in flight across every sync
            f"trainer.groups_per_step={groups}",
            "rollout.group_size=8",
            "logging.console=false",
            "seed=0",
            *extra,
        ],
    )


def _skip_cache_invalidation(monkeypatch) -> None:
    """SkyRL #2246: the prefix cache keeps serving its entries after new weights load (the
    one call that moves it to the new version and drops the old entries does nothing)."""
    monkeypatch.setattr(PrefixCache, "new_version", lambda self, version: None)


def _rows(tmp_path) -> list[dict]:
    path = tmp_path / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_skipped_cache_invalidation_stops_the_run_at_its_first_sync(tmp_path, monkeypatch):
    _skip_cache_invalidation(monkeypatch)
    # Four groups of eight from the warmed-up model (success about 10%): the first step has a
    # learning signal, so its sync changes the weights.
    trainer = AsyncTrainer(_config(tmp_path, 5, groups=4))
    with pytest.raises(SyncCheckFailed, match="after the sync of version 1") as failed:
        trainer.run()
    message = str(failed.value)
    assert "differ by up to" in message and "SkyRL #2246" in message
    check = trainer.sync_check
    assert [g.version for g in check.gaps] == [1]  # the first sync, and no other
    gap = check.gaps[0]
    assert check.max_gap is not None and gap.max > check.max_gap
    assert f"{gap.max:.4g}" in message
    assert check.floor is not None and check.floor.max < 1e-4  # the floor at version 0 held
    assert trainer.step == 0 and _rows(tmp_path) == []  # no step of version 1 was logged


def test_on_fail_warn_keeps_going_and_records_the_gap(tmp_path, monkeypatch, capsys):
    _skip_cache_invalidation(monkeypatch)
    trainer = AsyncTrainer(_config(tmp_path, 2, "trainer.sync_check.on_fail=warn", groups=4))
    result = trainer.run()
    assert result.steps == 2
    rows = _rows(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["sync/logprob_gap_max"] > rows[0]["sync/max_gap"]
    assert (
        "warning: weight-sync check failed after the sync of version 1" in capsys.readouterr().out
    )


def test_a_correct_sync_passes_over_20_steps_at_the_noise_floor(tmp_path):
    trainer = AsyncTrainer(_config(tmp_path, 20))
    result = trainer.run()
    assert result.steps == 20
    rows = _rows(tmp_path)
    assert len(rows) == 20
    check = trainer.sync_check
    assert check.floor is not None and check.max_gap == max(10 * check.floor.max, 1e-4)
    assert rows[0]["sync/floor"] == check.floor.max and rows[0]["sync/max_gap"] == check.max_gap
    assert [g.version for g in check.gaps] == list(range(1, 21))
    assert len(check.probe) == 4 and all(p.completion_ids for p in check.probe)
    for row in rows:
        assert 0 <= row["sync/logprob_gap_mean"] <= row["sync/logprob_gap_max"] <= check.max_gap
    # The weights moved: most steps had a learning signal, so most syncs changed them.
    assert sum(r["groups/no_variance"] < 2 for r in rows) >= 10


def test_lora_merged_weights_pass_the_check(tmp_path):
    """With LoRA the learner scores with its adapters on and the engine with the merged
    weights it was sent: the check compares the adapters of each version."""
    pytest.importorskip("peft")
    trainer = AsyncTrainer(
        _config(tmp_path, 3, "model.lora.enabled=true", "model.lora.target_modules=[q_proj,v_proj]")
    )
    trainer.run()
    check = trainer.sync_check
    assert [g.version for g in check.gaps] == [1, 2, 3]
    assert all(g.max <= check.max_gap for g in check.gaps)


def test_the_probe_takes_one_sequence_per_group_from_the_first_tokens_generated():
    def sample(prompt: int, generated: int, tag: int) -> TrainingSample:
        ids = tuple(range(tag, tag + prompt + generated))
        mask = (0,) * prompt + (1,) * generated
        return TrainingSample(ids, mask, (0.0,) * len(ids), (0,) * len(ids))

    samples = [sample(3, 5, 10 * i) for i in range(8)]
    samples.insert(2, TrainingSample((1, 2), (1, 1), (0.0, 0.0), (0, 0)))  # no prompt
    probe = probe_from(samples, 4, max_tokens=2)
    assert [p.prompt_ids for p in probe] == [(0, 1, 2), (20, 21, 22), (40, 41, 42), (60, 61, 62)]
    assert all(len(p.completion_ids) == 2 for p in probe)
    assert probe[0].completion_ids == (3, 4)
    assert probe_from(samples[:1], 4, max_tokens=10)[0].completion_ids == (3, 4, 5, 6, 7)


class _Fixed:
    """A part that scores every token at `logprob` (an `agents.scoring.Scorer`), counting
    its calls; as the engine it serves `policy_version`."""

    def __init__(self, logprob: float) -> None:
        self.logprob = logprob
        self.policy_version = 0
        self.calls = 0

    async def score(self, prompt_ids, completion_ids) -> list[float]:
        self.calls += 1
        return [self.logprob] * len(completion_ids)


def _batch() -> list[TrainingSample]:
    """Eight samples of a 3-token prompt and 5 generated tokens: a probe of 4 x 5 tokens."""
    ids = tuple(range(8))
    return [TrainingSample(ids, (0,) * 3 + (1,) * 5, (0.0,) * 8, (0,) * 8) for _ in range(8)]


def test_parts_that_cannot_score_are_named_once_and_the_check_is_off():
    import asyncio

    from rich.console import Console

    from skyrl_sdk.trainer.config import SyncCheckConfig, SyncFailure
    from skyrl_sdk.trainer.sync_check import SyncCheck, SyncGap

    class Silent:  # an engine without `score` (e.g. a Ray engine actor's handle)
        policy_version = 0

    def calibrate_then_sync(check: SyncCheck) -> None:
        # The loop's calls: the probe and floor from the first batch at version 0, then the
        # sync of version 1 (an engine that scores serves it, 0.25 off the learner).
        asyncio.run(check.calibrate(_batch(), 0))
        if isinstance(check.engine, _Fixed):
            check.engine.policy_version, check.engine.logprob = 1, -0.75
        asyncio.run(check.after_publish(1))

    # Both parts score: the same calls record the floor and one gap, its real values.
    warn = SyncCheckConfig(on_fail=SyncFailure.WARN)
    engine, learner = _Fixed(-1.0), _Fixed(-1.0)
    on = SyncCheck(warn, learner=learner, engine=engine, console=Console(record=True))
    assert on.active
    calibrate_then_sync(on)
    assert on.floor == SyncGap(version=0, engine_version=0, mean=0.0, max=0.0, tokens=20)
    assert on.gaps == [SyncGap(version=1, engine_version=1, mean=0.25, max=0.25, tokens=20)]
    assert on.pop_metrics()["sync/logprob_gap_max"] == 0.25
    assert (engine.calls, learner.calls) == (8, 8)  # 4 probe sequences, twice each

    # An engine that cannot score: named once, and the same calls take no probe and record
    # nothing (a check that ran would fail on its missing `score`).
    console = Console(record=True, width=200)
    learner = _Fixed(-1.0)
    check = SyncCheck(SyncCheckConfig(), learner=learner, engine=Silent(), console=console)
    assert not check.active
    text = console.export_text()
    assert "no weight-sync check" in text and "the engine (Silent)" in text
    assert "learner" not in text.split("no weight-sync check")[1]
    calibrate_then_sync(check)  # nothing to check, nothing raised
    assert check.probe == [] and check.floor is None and check.gaps == []
    assert check.pop_metrics() == {} and learner.calls == 0
    console = Console(record=True, width=200)
    both = SyncCheck(SyncCheckConfig(), learner=Silent(), engine=Silent(), console=console)
    assert not both.active
    assert "the engine (Silent) and the learner (Silent)" in console.export_text()

    # Disabled with parts that can score (and drift): nothing is scored or recorded.
    engine, learner = _Fixed(-1.0), _Fixed(-1.0)
    off = SyncCheck(SyncCheckConfig(enabled=False), learner, engine, Console(record=True))
    assert not off.active
    calibrate_then_sync(off)
    assert off.gaps == [] and off.floor is None and off.pop_metrics() == {}
    assert (engine.calls, learner.calls) == (0, 0)
