"""A cookbook-style RL loop through the official SDK: sample a group, IS loss, reward rises."""

from __future__ import annotations

import pytest

from tests.trainer.tinker.conftest import API_KEY, TinkerServer

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

GROUP = 16
MAX_TOKENS = 4


def _reward(tokens: list[int], vocab_half: int) -> float:
    """Share of sampled tokens in the lower half of the vocabulary (0.5 for a random policy)."""
    return sum(t < vocab_half for t in tokens) / max(len(tokens), 1)


def test_rl_loop_reward_rises(tinker_server: TinkerServer) -> None:
    service = tinker.ServiceClient(base_url=tinker_server.base_url, api_key=API_KEY)
    trainer = service.create_lora_training_client(tinker_server.base_model, rank=8, seed=0).result()
    tokenizer = trainer.get_tokenizer()
    half = len(tokenizer) // 2
    prompt_ids = tokenizer.encode("count:")
    prompt = types.ModelInput.from_ints(prompt_ids)
    rewards: list[float] = []
    for step in range(12):
        params = types.SamplingParams(max_tokens=MAX_TOKENS, stop=[], seed=step)
        sampler = trainer.save_weights_and_get_sampling_client()
        if hasattr(sampler, "result"):
            sampler = sampler.result()
        group = sampler.sample(prompt, GROUP, params).result().sequences
        assert all(s.logprobs is not None and len(s.logprobs) == len(s.tokens) for s in group)
        assert len({s.sequence_id for s in group}) == GROUP
        scores = [_reward(list(s.tokens), half) for s in group]
        rewards.append(sum(scores) / GROUP)
        mean = rewards[-1]
        data = []
        for seq, score in zip(group, scores, strict=True):
            full = prompt_ids + list(seq.tokens)
            pad = [0.0] * (len(prompt_ids) - 1)
            data.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(full[:-1]),
                    loss_fn_inputs={
                        "target_tokens": full[1:],
                        "logprobs": pad + list(seq.logprobs),
                        "advantages": pad + [score - mean] * len(seq.tokens),
                    },
                )
            )
        fb = trainer.forward_backward(data, "importance_sampling")
        opt = trainer.optim_step(types.AdamParams(learning_rate=5e-2))
        fb.result()
        opt.result()
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.15, rewards
