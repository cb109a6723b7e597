"""`skyrl terminal demos`: oracle solve.sh played through the real env (bwrap sandboxes, the
real verifier), token-exact for the model's tokenizer, and trained on by `skyrl sft`."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from skyrl_gym.cli import CommandEntry, load_command
from skyrl_gym.envs.terminal_gen.families import make_spec
from skyrl_gym.envs.terminal_gen.generate import plan, write_tasks
from skyrl_sdk.agents.trajectory import read_trajectories
from skyrl_sdk.trainer.config import build_config
from skyrl_sdk.trainer.demos.demonstrations import (
    DemoSettings,
    DemoStyle,
    model_renderer,
    play_demonstrations,
    solution_command,
)
from skyrl_sdk.trainer.sft import train_sft

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
FAMILIES = ("echo-word", "make-dirs", "permissions")
TERMINAL = load_command(CommandEntry("terminal", "skyrl_sdk.trainer.demos.demonstrations:app"))
"""`skyrl terminal` as the entry point `terminal = "skyrl_sdk.trainer.demos.demonstrations:app"`
builds it: skyrl_gym's group (gen, families) with `demos` added."""


def _sampled_text(renderer, trajectory) -> list[str]:
    """The decoded text of each run of trained (sampled) tokens."""
    (sample,) = trajectory.training_samples()
    runs: list[list[int]] = []
    previous = 0
    for token, mask in zip(sample.input_ids, sample.loss_mask, strict=True):
        if mask and not previous:
            runs.append([])
        if mask:
            runs[-1].append(token)
        previous = mask
    return [renderer.tokenizer.decode(r, skip_special_tokens=False) for r in runs]


def test_the_terminal_group_keeps_gen_and_families_and_adds_demos():
    result = CliRunner().invoke(TERMINAL, ["--help"])
    assert result.exit_code == 0, result.output
    assert all(name in result.output for name in ("gen", "families", "demos"))


def test_solution_command_drops_only_the_header():
    assert solution_command("#!/bin/bash\nset -e\ncd /app\necho a > b\nls\n") == "echo a > b\nls"


def test_demos_are_token_exact_graded_and_a_wrong_solution_is_dropped(tmp_path):
    tasks = tmp_path / "tasks"
    write_tasks(plan(6, 0, FAMILIES), tasks)
    broken = tasks / "make-dirs-s1" / "solution" / "solve.sh"
    broken.write_text("#!/bin/bash\nset -e\ncd /app\nmkdir -p nothing-asked-for\n")
    out = tmp_path / "demos.jsonl"
    args = ["demos", "--out", str(out), "--n", "6", "--families", ",".join(FAMILIES)]
    result = CliRunner().invoke(TERMINAL, [*args, "--model", "tiny", "--tasks", str(tasks)])
    assert result.exit_code == 0, result.output
    assert "wrote 5 demonstration(s)" in result.output and "make-dirs-s1" in result.output
    renderer = model_renderer("tiny")
    kept = read_trajectories(out)
    assert sorted(t.task_id for t in kept) == sorted(
        f"{f}-s{s}" for f in FAMILIES for s in (0, 1) if (f, s) != ("make-dirs", 1)
    )
    for t in kept:
        assert t.reward == 1.0
        family, seed = t.task_id.rsplit("-s", 1)
        command = make_spec(family, int(seed)).solution.strip()
        end = renderer.tokenizer.decode([renderer.end_of_turn_id])
        assert _sampled_text(renderer, t) == [f"<bash>{command}</bash><answer>done</answer>{end}"]
        # The reply's ids are the canonical tokenization: what the policy samples to write it.
        (sample,) = t.training_samples()
        reply = [i for i, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m]
        assert reply == [
            *renderer.encode(f"<bash>{command}</bash><answer>done</answer>"),
            reply[-1],
        ]

    run = tmp_path / "sft"
    cfg = build_config(
        {},
        [
            f"sft.data={out}",
            f"out_dir={run}",
            "trainer.steps=2",
            "sft.batch_size=2",
            "sft.heldout_fraction=0.2",
            "model.hidden_size=32",
            "model.num_layers=1",
            "logging.console=false",
        ],
    )
    trained = train_sft(cfg)
    summary = json.loads((run / "summary.json").read_text())
    assert trained.steps == 2 and summary["train_sequences"] + summary["heldout_sequences"] == 5


def test_observe_style_trains_on_two_turns_around_the_real_observation():
    renderer = model_renderer("tiny")
    settings = DemoSettings(n=1, families=("word-count",), style=DemoStyle.OBSERVE)
    (episode,) = play_demonstrations(settings, renderer)
    assert episode.reward == 1.0
    texts = _sampled_text(renderer, episode)
    assert len(texts) == 2  # two assistant turns
    assert texts[0].startswith("<bash>wc -w") and texts[1].startswith("<answer>done</answer>")
    # Between them the env's real observation (the command's empty output), not trained on.
    decoded = renderer.tokenizer.decode(
        list(episode.training_samples()[0].input_ids), skip_special_tokens=False
    )
    assert "<observation>" in decoded
