"""`skyrl demo` trains with the same config as before the framework's defaults changed
(`model.source` now defaults to `tiny`, `env.id` has none): `make demo`'s numbers depend on it.

`fixtures/demo_configs.json` is each preset's full config as `run_demo` built it when the
defaults were still the demo's (`lookup-tiny`, `lookup`), at the preset's steps, seed 0 and
`out_dir` runs/demo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyrl_sdk.trainer.demos import lookup as demo

BEFORE = json.loads((Path(__file__).parent / "fixtures" / "demo_configs.json").read_text())
NEW_FIELDS = {
    ("env", "tasks"): None,
    ("heldout", "seed_offset"): 1_000_000,
    ("heldout", "before_training"): True,  # the distill demo reuses a base evaluation (issue 29)
    ("algorithm", "dro_beta"): None,  # the loss catalogue's (issue 26): only `loss: dro` uses it
    ("model", "init_from"): None,  # warm starts (issue 29)
    ("algorithm", "observation_loss_coef"): 0.0,  # ECHO, off
    ("algorithm", "teacher"): None,  # on-policy distillation, off
    ("algorithm", "opd_reward_coef"): 0.0,
    ("algorithm", "opd_logit_kl_coef"): 0.0,  # distillation's logit term, off
    ("algorithm", "opd_top_k"): 32,  # read only with opd_logit_kl_coef
    ("algorithm", "dynamic_sampling"): False,  # DAPO's, off
    ("algorithm", "max_set_aside"): 16,  # read only with dynamic_sampling
    # The weight-sync check (issue 28) only reads: it scores a probe, it changes no update.
    ("trainer", "sync_check"): {
        "enabled": True,
        "probe_sequences": 4,
        "probe_max_tokens": 128,
        "max_gap": None,
        "min_gap": 0.0001,
        "on_fail": "stop",
    },
}
"""Fields added since the fixture was recorded, at the values that leave a run as it was."""
NEW_SECTIONS = {
    "sft": {  # `skyrl sft`'s own settings (issue 29); a train run never reads them
        "data": None,
        "min_reward": None,
        "heldout_fraction": 0.1,
        "batch_size": 8,
        "eval_every": 0,
        "max_length": None,
        "pack": True,
        "max_packed_tokens": None,
        "teacher": None,  # distilling SFT, off
        "teacher_top_k": 32,
        "label_weight": 0.0,
    },
}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_demo_presets_build_the_config_they_always_trained_with(name: str) -> None:
    built = demo.demo_config(demo.PRESETS[name]).model_dump(mode="json")
    for (section, field), value in NEW_FIELDS.items():
        assert built[section].pop(field) == value
    for section, value in NEW_SECTIONS.items():
        assert built.pop(section) == value
    expected = json.loads(json.dumps(BEFORE[name]))
    # The SmolLM2 preset takes half this machine's cores: not part of the recorded config.
    expected["trainer"]["torch_threads"] = built["trainer"]["torch_threads"]
    assert built == expected
    assert built["model"]["source"] == {"tiny": "lookup-tiny", "smollm2": "smollm2"}[name]
