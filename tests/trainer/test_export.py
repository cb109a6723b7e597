"""`skyrl export`: a trained run's checkpoint as a model directory that `skyrl eval --policy`
loads, with the run's final policy (the same logprobs as its learner)."""

import torch
from click.testing import CliRunner
from transformers import AutoModelForCausalLM

from skyrl_gym.cli import CommandEntry, load_command
from skyrl_sdk.agents.policy_spec import load_policy
from skyrl_sdk.trainer.async_trainer import AsyncTrainer
from skyrl_sdk.trainer.config import build_config

EXPORT = load_command(CommandEntry("export", "skyrl_sdk.trainer.export:export_command"))


def _logprobs(model, ids):
    with torch.no_grad():
        logits = model.eval()(input_ids=torch.tensor([ids])).logits[0, :-1]
    return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(ids[1:])[:, None])


def test_export_writes_the_runs_policy_for_eval(tmp_path):
    cfg = build_config(
        {},
        [
            f"out_dir={tmp_path / 'run'}",
            "env.id=lookup",
            "model.hidden_size=32",
            "model.lora.enabled=true",
            "trainer.steps=2",
            "trainer.max_staleness=0",
            "trainer.groups_per_step=1",
            "rollout.group_size=2",
            "rollout.max_tokens=8",
            "optim.lr=0.05",
            "algorithm.entropy_coef=0.5",  # a gradient even when every reward is the same
            "logging.console=false",
            "logging.trajectories=false",
        ],
    )
    trainer = AsyncTrainer(cfg)
    trainer.run()
    out = tmp_path / "policy"
    result = CliRunner().invoke(EXPORT, [str(tmp_path / "run"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"--policy {out}" in result.output
    exported = AutoModelForCausalLM.from_pretrained(out)
    ids = [1, 40, 41, 42, 43, 2, 44]
    torch.testing.assert_close(
        _logprobs(exported, ids), _logprobs(trainer.learner.model, ids), atol=1e-5, rtol=0
    )
    # what skyrl eval --policy DIR loads: a local engine on the exported directory
    loaded = load_policy(str(out))
    assert loaded.model_name == "policy"
    # a directory without a checkpoint is one line and exit 2
    bad = CliRunner().invoke(EXPORT, [str(tmp_path), "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "no checkpoint" in bad.output
