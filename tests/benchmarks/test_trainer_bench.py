"""`skyrl bench trainer` in a quick mode: our learner's side always; TRL's only if installed.

The suite never builds `.venvs/trl` (a multi-minute pip install): without it the TRL side is
skipped and reported as unavailable, which is what the first tests check.
"""

import json
import math

import pytest

from skyrl_sdk.benchmarks.perf import BENCHMARKS
from skyrl_sdk.benchmarks.perf import trainer as trainer_bench
from skyrl_sdk.benchmarks.perf.trainer import (
    TrainerBenchSettings,
    make_batch,
    measure,
    run,
    trl_ready,
)

QUICK = TrainerBenchSettings(
    sequences=4,
    group_size=2,
    prompt_tokens=8,
    completion_tokens=8,
    micro_batch_size=2,
    rounds=2,
    warmup_steps=0,
    steps_per_round=1,
)


def _check_ours(result: dict) -> None:
    assert math.isfinite(result["ours_tokens_per_s"]) and result["ours_tokens_per_s"] > 0
    assert result["ours_cpu_tokens_per_s"] > 0
    assert result["ours_all_tokens_per_s"] == pytest.approx(
        2 * result["ours_tokens_per_s"], rel=1e-3
    )
    assert 0 < result["ours_best_step_s"] < 60
    assert (result["sequences"], result["completion_tokens"]) == (4, 8)


def test_bench_trainer_is_registered():
    assert BENCHMARKS["trainer"] == "skyrl_sdk.benchmarks.perf.trainer:run"


def test_batch_is_seeded_grouped_and_free_of_special_tokens():
    settings = TrainerBenchSettings(sequences=8, group_size=4, prompt_tokens=5, completion_tokens=3)
    batch = make_batch(settings, 50, special_ids=[0, 1, 2])
    assert batch == make_batch(settings, 50, special_ids=[0, 1, 2])
    assert batch.prompt_ids[0] == batch.prompt_ids[3] != batch.prompt_ids[4]
    assert all(len(c) == 3 for c in batch.completion_ids) and len(batch.advantages) == 8
    ids = {i for row in batch.prompt_ids + batch.completion_ids for i in row}
    assert not ids & {0, 1, 2}
    assert sum(batch.advantages[:4]) == pytest.approx(0.0, abs=1e-9)


def test_settings_reject_a_ragged_batch():
    with pytest.raises(ValueError):
        TrainerBenchSettings(sequences=6, group_size=4)


def test_quick_mode_without_the_trl_venv_prints_our_side_and_one_json_line(
    tmp_path, monkeypatch, capsys
):
    # Point the TRL venv at an empty folder: the benchmark must not build it (install=False).
    monkeypatch.setattr(trainer_bench, "TRL_HOME", tmp_path / "trl")
    report = run(QUICK, install=False)
    assert not (tmp_path / "trl").exists()
    report.print()
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert {"ours_tokens_per_s", "trl_tokens_per_s", "ratio"} <= set(result)
    _check_ours(result)
    assert result["trl_tokens_per_s"] is None and result["ratio"] is None
    assert "not installed" in result["trl_error"]
    assert any("completion tokens / wall s" in line for line in lines[:-1])


@pytest.mark.slow
@pytest.mark.skipif(
    not trl_ready(), reason=".venvs/trl not installed (skyrl bench trainer builds it)"
)
def test_quick_mode_against_trl_when_its_venv_exists():
    result, rounds = measure(QUICK, install=False)
    _check_ours(result)
    assert result["trl_error"] is None, result["trl_error"]
    assert result["trl_tokens_per_s"] > 0 and result["trl_cpu_tokens_per_s"] > 0
    assert result["ratio"] == pytest.approx(
        result["ours_tokens_per_s"] / result["trl_tokens_per_s"], rel=1e-2
    )
    assert result["trl"] and result["trl_torch"].startswith("2.13.0")
    assert len(rounds["trl"]) == QUICK.rounds and all(len(r.step_s) == 1 for r in rounds["trl"])
