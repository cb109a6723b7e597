"""`model.init_from`: a trained run's checkpoint loaded on top of `model.source` is the policy
the run ended with (full weights and LoRA; weights and logprobs), and a checkpoint of another
model is refused."""

import pytest
import torch

from skyrl_sdk.trainer.async_trainer import AsyncTrainer
from skyrl_sdk.trainer.config import build_config
from skyrl_sdk.trainer.init_from import InitFromError, resolve_checkpoint
from skyrl_sdk.trainer.models import load_model

RUN = (
    "env.id=lookup",
    "model.source=lookup-tiny",
    "model.pretrain_steps=10",
    "trainer.steps=2",
    "trainer.max_staleness=0",
    "trainer.groups_per_step=2",
    "rollout.group_size=4",
    "optim.lr=0.05",
    "algorithm.entropy_coef=0.5",  # a gradient even when every reward is the same
    "logging.console=false",
    "logging.trajectories=false",
)


def _train(out, *extra):
    cfg = build_config({}, [f"out_dir={out}", *RUN, *extra])
    trainer = AsyncTrainer(cfg)
    result = trainer.run()
    assert result.steps == 2
    return cfg, trainer.learner


def _logprobs(model, ids):
    with torch.no_grad():
        logits = model.eval()(input_ids=torch.tensor([ids])).logits[0, :-1]
    return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(ids[1:])[:, None])


@pytest.mark.parametrize("lora", [False, True])
def test_init_from_is_the_checkpoints_policy(tmp_path, lora):
    extra = ("model.lora.enabled=true", "model.lora.r=4") if lora else ()
    cfg, learner = _train(tmp_path / "run", *extra)
    trained = learner.engine_weights()
    base, _ = load_model(cfg.model, seed=cfg.seed)
    # a new run (full weights here) starting from the first one's latest checkpoint
    start = cfg.model.model_copy(
        update={
            "init_from": str(tmp_path / "run"),
            "lora": cfg.model.lora.model_copy(update={"enabled": False}),
        }
    )
    model, _ = load_model(start, seed=cfg.seed)
    loaded = model.state_dict()
    assert set(loaded) == set(trained)
    moved = [k for k in trained if not torch.equal(base.state_dict()[k], trained[k])]
    assert moved, "training changed no weight: the test would prove nothing"
    for key, value in trained.items():
        torch.testing.assert_close(loaded[key], value, rtol=0, atol=1e-6)
    ids = [1, 5, 7, 9, 3, 2, 8]
    torch.testing.assert_close(
        _logprobs(model, ids), _logprobs(learner.model, ids), atol=1e-5, rtol=0
    )
    # the step directory and its state.pt name the same checkpoint
    found = resolve_checkpoint(tmp_path / "run")
    assert resolve_checkpoint(found.state_file.parent).state_file == found.state_file
    assert resolve_checkpoint(found.state_file).run_config == cfg


def test_a_run_trains_on_from_its_init_checkpoint(tmp_path):
    cfg, learner = _train(tmp_path / "sft")
    trained = learner.engine_weights()
    cfg2 = build_config(
        {}, [f"out_dir={tmp_path / 'rl'}", *RUN, f"model.init_from={tmp_path / 'sft'}"]
    )
    trainer = AsyncTrainer(cfg2)
    start = trainer.learner.engine_weights()
    for key, value in trained.items():
        torch.testing.assert_close(start[key], value, rtol=0, atol=1e-6)


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    cfg, _ = _train(tmp_path / "run")
    other = cfg.model.model_copy(update={"init_from": str(tmp_path / "run"), "hidden_size": 32})
    with pytest.raises(InitFromError, match=r"another model.*hidden_size"):
        load_model(other, seed=cfg.seed)
    with pytest.raises(InitFromError, match="seed"):
        load_model(cfg.model.model_copy(update={"init_from": str(tmp_path / "run")}), seed=1)
    with pytest.raises(InitFromError, match="no checkpoint"):
        load_model(cfg.model.model_copy(update={"init_from": str(tmp_path / "none")}), seed=0)
