"""`skyrl demo --task terminal`: the preset trains on `terminal-gen` with a held-out split."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from skyrl_sdk.trainer import demo
from skyrl_sdk.trainer.config import build_config
from skyrl_sdk.trainer.demo_cli import demo_command


def test_terminal_task_preset_trains_and_evaluates_on_disjoint_splits():
    preset = demo.PRESETS[demo.TASK_PRESETS["terminal"]]
    cfg = build_config(dict(preset.config))
    assert cfg.env.id == "terminal-gen" and cfg.model.lora.enabled
    assert cfg.heldout.env_kwargs == {"split": "heldout", "per_family": 25}
    assert cfg.heldout.episodes >= 100 and cfg.heldout.every_steps > 0
    assert cfg.env.kwargs.get("split", "train") == "train"


def test_unknown_task_is_a_one_line_error(tmp_path):
    app = typer.Typer()
    app.command()(demo_command)
    result = CliRunner().invoke(app, ["--task", "chess", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "choose from lookup, terminal" in result.output
    assert not any(tmp_path.iterdir())
