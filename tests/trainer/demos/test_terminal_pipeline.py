"""The terminal pipeline (demonstrations -> base eval -> SFT -> RL from SFT) at tiny scale:
the same code path as the SmolLM2 run, real bwrap sandboxes and verifiers, a tiny model."""

from __future__ import annotations

import json
import shutil

import pytest

from skyrl_sdk.agents.trajectory import read_trajectories
from skyrl_sdk.trainer.demos.terminal_pipeline import (
    PipelineSettings,
    pipeline_settings,
    run_terminal_pipeline,
)
from skyrl_sdk.trainer.heldout import read_results

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
FAMILIES = ("echo-word", "make-dirs", "grep-count", "word-count", "sort-unique", "sed-replace")


def test_pipeline_writes_per_family_rates_for_base_sft_and_rl(tmp_path):
    out = tmp_path / "demo"
    settings = PipelineSettings(
        families=FAMILIES,
        demos_per_family=2,
        sft_steps=2,
        sft_batch_size=4,
        rl_steps=1,
        heldout_per_family=2,
        max_tokens=96,
    )
    overrides = {
        "model": {
            "source": "tiny",
            "lora": {"enabled": True, "target_modules": ["q_proj", "v_proj"]},
        },
        "rollout": {"group_size": 2},
        "trainer": {"groups_per_step": 1, "max_staleness": 0},
    }
    results = run_terminal_pipeline(out, seed=0, settings=settings, overrides=overrides)
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(results))

    # Demonstrations: every oracle reply scored 1 and became a training sequence.
    demos = read_trajectories(out / "demos.jsonl")
    assert len(demos) == results["demonstrations"]["kept"] == 12
    assert all(t.reward == 1.0 for t in demos)
    sft = json.loads((out / "sft" / "summary.json").read_text())
    assert sft["train_sequences"] + sft["heldout_sequences"] == 12
    # RL started from the SFT checkpoint.
    assert (out / "rl" / "config.yaml").read_text().count(str(out / "sft")) == 1

    evaluations = results["evaluations"]
    for phase in ("base", "sft", "rl"):
        assert set(evaluations[phase]["families"]) == set(FAMILIES)
        assert evaluations[phase]["episodes"] == 12
        for rate in evaluations[phase]["families"].values():
            lo, hi = rate["ci95"]
            assert rate["episodes"] == 2 and 0 <= lo <= rate["success"] <= hi <= 1
    rl_evals = read_results(out / "rl")
    assert results["heldout_success_sft"] == rl_evals[0].success
    assert results["heldout_success_end"] == rl_evals[-1].success
    assert results["heldout_success_start"] == evaluations["base"]["success"]
    assert set(results["heldout_families_base"]) == set(FAMILIES)
    comparison = results["rl_vs_sft"]
    assert comparison["tasks"] == 12 and 0 <= comparison["flip_rate"] <= 1
    assert set(results["phases_s"]) == {"demonstrations_s", "base_eval_s", "sft_s", "rl_s"}
    report = (out / "report.md").read_text()
    assert "| family | base | SFT | SFT + RL |" in report and "| sed-replace |" in report


def test_settings_from_the_demo_command_options():
    s = pipeline_settings(families="echo-word, make-dirs", rl_steps=3, sft_steps=None)
    assert s.families == ("echo-word", "make-dirs") and s.rl_steps == 3
    assert s.sft_steps == PipelineSettings().sft_steps
    with pytest.raises(ValueError, match="unknown families"):
        pipeline_settings(families="no-such-family")
