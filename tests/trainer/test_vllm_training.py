"""`AsyncTrainer` with `rollout.engine: vllm`, for real on CPU (`make test-vllm`).

Skipped where vLLM is not installed (the main suite). One short run with `max_staleness=1`,
so weight updates reach vLLM while episodes are in flight, then checks: the steps all ran;
tokens carry the versions the learner pushed; the staleness bound held; vLLM's logprobs are
the learner's (temperature applied) for the same weights; and the `lookup-tiny` word-level
tokenizer survived the trip through the engine's model directory (text and stop tokens).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import pytest

pytest.importorskip("vllm", reason="needs vllm (run `make test-vllm`)")

STEPS = 5
STALENESS = 1
TEMPERATURE = 0.8
"""Not 1, so logprobs without temperature (vLLM's default `raw_logprobs`) would not match."""
TOL = 1e-3
"""Largest |vLLM logprob - transformers logprob| accepted (float32 on both sides)."""


def _config(tmp_path) -> Any:
    from skyrl_sdk.trainer.config import build_config

    return build_config(
        {},
        [
            f"out_dir={tmp_path / 'run'}",
            "seed=0",
            "env.id=lookup",
            "model.source=lookup-tiny",
            "rollout.engine=vllm",
            # head size 128 / 4 = 32: vLLM's CPU attention has no kernel for 16 (the default 64).
            "model.hidden_size=128",
            f"rollout.temperature={TEMPERATURE}",
            "rollout.group_size=4",
            f"trainer.steps={STEPS}",
            "trainer.groups_per_step=2",
            f"trainer.max_staleness={STALENESS}",
            "trainer.torch_threads=1",
            "trainer.step_timeout_s=300",
            "logging.console=false",
            "logging.trajectories=true",
        ],
    )


def _check_tokenizer(trainer: Any) -> None:
    """The engine's tokenizer (reloaded from the run directory) is the trainer's."""
    from skyrl_sdk.agents.chat import ChatRenderer

    ours = ChatRenderer(trainer.tokenizer)
    theirs = trainer.engine.renderer
    chat = [{"role": "user", "content": "find b"}, {"role": "assistant", "content": "lookup"}]
    chat.append({"role": "tool", "content": "value 3"})
    assert theirs.prompt(chat).token_ids == ours.prompt(chat).token_ids
    assert theirs.stop_token_ids == ours.stop_token_ids
    im_end = trainer.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert im_end in theirs.stop_token_ids
    every = list(range(len(trainer.tokenizer)))
    assert trainer.engine.tokenizer.decode(every) == trainer.tokenizer.decode(every)


@pytest.mark.timeout(900)
def test_async_training_with_vllm_engine(tmp_path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from skyrl_sdk.agents.chat import ChatRenderer
    from skyrl_sdk.agents.policy import FinishReason
    from skyrl_sdk.agents.trajectory import read_trajectories
    from skyrl_sdk.agents.vllm_engine import VLLMEngine
    from skyrl_sdk.trainer.async_trainer import AsyncTrainer
    from skyrl_sdk.trainer.backends.local import ENGINE_MODEL_DIR

    trainer = AsyncTrainer(_config(tmp_path))
    assert isinstance(trainer.engine, VLLMEngine)
    _check_tokenizer(trainer)
    result = trainer.run()

    # 1. The run finished every step.
    assert result.steps == result.version == STEPS
    assert [m["step"] for m in result.history] == list(range(1, STEPS + 1))
    # Every sync was checked: vLLM's scores of the probe are the learner's at each version.
    check = trainer.sync_check
    assert check.active and [g.version for g in check.gaps] == list(range(1, STEPS + 1))
    assert all(m["sync/logprob_gap_max"] <= check.max_gap for m in result.history)

    # 2. The staleness bound held, and generation ran ahead of the learner.
    lags = [m["staleness/max"] for m in result.history]
    assert max(lags) <= STALENESS
    # Step 1 trains version-0 tokens with version-0 weights: sampler and learner agree.
    assert result.history[0]["staleness/max"] == 0
    assert result.history[0]["policy/kl_sampler"] < 1e-5

    # 3. Weights reached vLLM: tokens carry the learner's versions, never older than the
    #    version their group was admitted at (weights queued before a request load first).
    trajectories = read_trajectories(result.run_dir / "trajectories.jsonl")
    by_group: dict[int, list[Any]] = defaultdict(list)
    for t in trajectories:
        match = re.match(r"g(\d+)/", t.episode_id)
        assert match, t.episode_id
        by_group[int(match.group(1))].append(t)
    versions = [v for t in trajectories for turn in t.turns for v in turn.policy_versions]
    assert versions and max(versions) >= STEPS - 1 - STALENESS
    assert all(len(m["groups"]) == 2 for m in result.history)
    for step, m in enumerate(result.history):  # step s trains at learner version s
        for g in m["groups"]:
            tokens = [v for t in by_group[g] for turn in t.turns for v in turn.policy_versions]
            assert tokens and step - STALENESS <= min(tokens) and max(tokens) <= step

    # 4. Text and stops: each action is the trainer's tokenizer's text of its ids, and turns
    #    that stopped end on <|im_end|>.
    ours = ChatRenderer(trainer.tokenizer)
    im_end = trainer.tokenizer.convert_tokens_to_ids("<|im_end|>")
    turns = [turn for t in trajectories for turn in t.turns]
    for turn in turns:
        assert turn.action == ours.content_text(turn.token_ids)
        if turn.finish_reason is FinishReason.STOP:
            assert turn.token_ids[-1] == im_end
            assert im_end not in turn.token_ids[:-1]
    assert any(turn.finish_reason is FinishReason.STOP for turn in turns)

    # 5. vLLM's logprobs of version-0 tokens are the initial model's at the temperature.
    initial = AutoModelForCausalLM.from_pretrained(
        result.run_dir / ENGINE_MODEL_DIR, dtype=torch.float32
    ).eval()
    errors, raw_gap = [], []
    for t in trajectories:
        for sample in t.training_samples():
            mask = sample.loss_mask
            if {v for v, m in zip(sample.policy_versions, mask, strict=True) if m} != {0}:
                continue
            with torch.no_grad():
                logits = initial(torch.tensor([sample.input_ids])).logits[0].float()
            scaled = torch.log_softmax(logits / TEMPERATURE, -1)
            raw = torch.log_softmax(logits, -1)
            for pos, (m, token, logprob) in enumerate(
                zip(sample.loss_mask, sample.input_ids, sample.logprobs, strict=True)
            ):
                if m:
                    errors.append(abs(float(scaled[pos - 1, token]) - logprob))
                    raw_gap.append(abs(float(raw[pos - 1, token]) - logprob))
    assert errors, "no episode sampled only by version 0"
    print(
        f"version-0 tokens: {len(errors)}, max error {max(errors):.2e}, "
        f"mean distance from logprobs without temperature {sum(raw_gap) / len(raw_gap):.3f}"
    )
    assert max(errors) < TOL
    assert sum(raw_gap) / len(raw_gap) > 5 * TOL  # the check tells the two modes apart
