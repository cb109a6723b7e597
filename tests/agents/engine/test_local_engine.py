"""`LocalEngine` on a tiny model built from a config: batching, logprobs, stops, in-flight updates."""

from __future__ import annotations

import asyncio
import math

import pytest

torch = pytest.importorskip("torch")

import skyrl_gym  # noqa: E402
from skyrl_gym.envs.math.env import bundled_tasks  # noqa: E402
from skyrl_sdk.agents.engine import LocalEngine  # noqa: E402
from skyrl_sdk.agents.policy import FinishReason, SamplingParams  # noqa: E402
from skyrl_sdk.agents.rollout import rollout  # noqa: E402
from skyrl_sdk.agents.trajectory import StopReason  # noqa: E402


@pytest.fixture(scope="module")
def engine(tiny_dir):
    eng = LocalEngine.from_pretrained(tiny_dir)
    yield eng
    asyncio.run(eng.aclose())


def reference_logprobs(engine: LocalEngine, prompt, ids) -> list[float]:
    """Logprobs of `ids` after `prompt` from one full forward pass (no cache, no batch)."""
    with torch.no_grad():
        logits = engine.model(torch.tensor([list(prompt) + list(ids)])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    return [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(ids)]


def prompts(engine: LocalEngine) -> list[tuple[int, ...]]:
    r = engine.renderer
    return [
        r.prompt([{"role": "user", "content": "What is 2 + 2?"}]).token_ids,
        r.prompt(
            [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "A longer question about apples and trees?"},
            ]
        ).token_ids,
    ]


def test_batched_greedy_matches_single_and_full_forward(engine: LocalEngine) -> None:
    short, long = prompts(engine)
    greedy = SamplingParams(max_tokens=12, temperature=0)

    async def go():
        single = await engine.generate(short, greedy)
        batched = await asyncio.gather(
            engine.generate(short, greedy), engine.generate(long, greedy)
        )
        return single, batched

    single, (b_short, b_long) = asyncio.run(go())
    assert single.token_ids == b_short.token_ids  # left padding does not change the result
    for prompt, c in ((short, b_short), (long, b_long)):
        ref = reference_logprobs(engine, prompt, c.token_ids)
        assert max(abs(a - b) for a, b in zip(ref, c.logprobs, strict=True)) < 1e-4
        assert len(c.token_ids) == 12 and c.finish_reason is FinishReason.LENGTH


def test_sampled_logprobs_match_temperature_scaled_model(engine: LocalEngine) -> None:
    short, _ = prompts(engine)
    params = SamplingParams(max_tokens=10, temperature=0.7, seed=3)
    c = asyncio.run(engine.generate(short, params))
    with torch.no_grad():
        logits = engine.model(torch.tensor([list(short) + list(c.token_ids)])).logits[0].float()
    lp = torch.log_softmax(logits / 0.7, -1)
    ref = [float(lp[len(short) - 1 + i, t]) for i, t in enumerate(c.token_ids)]
    assert max(abs(a - b) for a, b in zip(ref, c.logprobs, strict=True)) < 1e-4
    again = asyncio.run(engine.generate(short, params))
    assert again.token_ids == c.token_ids  # a seed makes sampling reproducible


def test_stop_tokens_and_stop_strings(engine: LocalEngine) -> None:
    short, _ = prompts(engine)
    probe = asyncio.run(engine.generate(short, SamplingParams(max_tokens=8, temperature=0)))
    # Stop on the third greedy token, by id and by its text.
    by_id = asyncio.run(
        engine.generate(
            short, SamplingParams(max_tokens=8, temperature=0, stop_token_ids=(probe.token_ids[2],))
        )
    )
    assert by_id.finish_reason is FinishReason.STOP
    assert by_id.token_ids[-1] == probe.token_ids[2] and len(by_id.token_ids) <= 3
    text = engine.tokenizer.decode(list(probe.token_ids[:4]))
    stop = text[-2:] if text.strip() else None
    if stop:
        by_text = asyncio.run(
            engine.generate(short, SamplingParams(max_tokens=8, temperature=0, stop=(stop,)))
        )
        assert by_text.finish_reason is FinishReason.STOP
        assert stop in engine.tokenizer.decode(list(by_text.token_ids))
        assert len(by_text.token_ids) <= 4


def test_update_weights_takes_effect_between_decoding_steps(engine: LocalEngine) -> None:
    """Zeroing the weights mid-generation makes every later token uniform: logprob -log V."""
    short, _ = prompts(engine)
    original = {k: v.clone() for k, v in engine.model.state_dict().items()}
    zeroed = {k: torch.zeros_like(v) for k, v in original.items()}
    vocab = engine.model.config.vocab_size

    async def go():
        task = asyncio.create_task(engine.generate(short, SamplingParams(max_tokens=200, seed=0)))
        start = engine.steps
        while engine.steps < start + 5:
            await asyncio.sleep(0.001)
        engine.update_weights(zeroed, version=7)
        return await task

    try:
        c = asyncio.run(go())
    finally:
        engine.update_weights(original, version=8)
        assert engine.wait_for_version(8)
    versions = c.versions()
    assert versions[0] == 0 and versions[-1] == 7 and c.policy_version == 7
    switch = versions.index(7)
    assert 5 <= switch < 200 and list(versions) == sorted(versions)
    assert all(abs(lp + math.log(vocab)) < 1e-4 for lp in c.logprobs[switch:])
    assert all(abs(lp + math.log(vocab)) > 1e-3 for lp in c.logprobs[:switch])


def test_rollout_with_local_engine_is_token_exact(engine: LocalEngine) -> None:
    """A real sampler on the math env: whatever it samples, the trajectory holds it exactly."""

    class Recording:
        name = "recording-local"

        def __init__(self):
            self.calls = []

        @property
        def renderer(self):
            return engine.renderer

        async def generate(self, prompt_token_ids, sampling, *, context=None):
            c = await engine.generate(prompt_token_ids, sampling, context=context)
            self.calls.append((tuple(prompt_token_ids), c))
            return c

        async def aclose(self):
            return None

    policy = Recording()
    env = skyrl_gym.make("math")
    task = bundled_tasks()[0]
    from skyrl_sdk.agents.policy import SamplingParams as SP

    t = asyncio.run(rollout(env, policy, task, max_turns=3, max_tokens=16, sampling=SP(seed=1)))
    assert t.stop_reason in (StopReason.MAX_TURNS, StopReason.DONE)
    [sample] = t.training_samples()
    for prompt, c in policy.calls:
        n = len(prompt)
        assert sample.input_ids[:n] == prompt
        assert sample.input_ids[n : n + len(c.token_ids)] == c.token_ids
        assert sample.logprobs[n : n + len(c.token_ids)] == c.logprobs
    assert sum(sample.loss_mask) == sum(len(c.token_ids) for _, c in policy.calls)
    assert t.trainable


def test_aclose_fails_queued_and_decoding_requests_and_joins_the_worker(tiny_dir) -> None:
    """Closing mid-decode stops at the next step: requests left fail, and the worker thread is
    gone when `aclose` returns (a thread still running torch at interpreter exit aborts it)."""
    from skyrl_sdk.agents.policy import PolicyError

    eng = LocalEngine.from_pretrained(tiny_dir, max_batch_size=2)
    prompt = prompts(eng)[0]
    never_stop = SamplingParams(max_tokens=100_000, temperature=1.0)

    async def go():
        requests = [asyncio.ensure_future(eng.generate(prompt, never_stop)) for _ in range(5)]
        while eng.steps < 3:  # the first batch is decoding, three requests wait in the queue
            await asyncio.sleep(0.01)
        await asyncio.wait_for(eng.aclose(), 30)
        return await asyncio.gather(*requests, return_exceptions=True)

    results = asyncio.run(go())
    assert not eng._worker.is_alive()
    assert all(isinstance(r, PolicyError) and "is closed" in str(r) for r in results), results
