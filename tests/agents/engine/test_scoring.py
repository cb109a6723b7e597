"""`LocalEngine.score` and the versioned prefix cache: scores are a full recompute's logprobs
whether or not the prompt's prefix is cached, they go through the prefix cache (so a stale
cache shows in them, which is what the trainer's sync check relies on), and cache entries of
one weights version never serve another."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

from skyrl_sdk.agents.engine import LocalEngine  # noqa: E402
from skyrl_sdk.agents.engine.prefix_cache import PrefixCache  # noqa: E402
from skyrl_sdk.agents.policy import PolicyError, SamplingParams  # noqa: E402
from skyrl_sdk.agents.scoring import Scorer  # noqa: E402


def reference_logprobs(model, prompt, ids) -> list[float]:
    """Logprobs of `ids` after `prompt` from one forward pass over the whole sequence."""
    with torch.no_grad():
        logits = model(torch.tensor([[*prompt, *ids]])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    return [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(ids)]


def max_diff(a, b) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def _prompt(engine: LocalEngine, text: str = "What is 2 + 2?") -> list[int]:
    return list(engine.renderer.prompt([{"role": "user", "content": text}]).token_ids)


def _kv(tokens: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.randn(1, 2, tokens, 4), torch.randn(1, 2, tokens, 4))]


def test_scores_are_a_full_recompute_and_reuse_the_cached_prompt(tiny_dir) -> None:
    engine = LocalEngine.from_pretrained(tiny_dir)
    assert isinstance(engine, Scorer)
    prompt = _prompt(engine)
    try:
        sampled = asyncio.run(engine.generate(prompt, SamplingParams(max_tokens=12, seed=3)))
        completion = list(sampled.token_ids)
        before = engine.stats()
        scored = asyncio.run(engine.score(prompt, completion))
        after = engine.stats()
        # The prompt came from the prefix cache (its last token is recomputed: its logits
        # score the completion's first token).
        assert after.prompt_tokens_reused - before.prompt_tokens_reused == len(prompt) - 1
        reference = reference_logprobs(engine.model, prompt, completion)
        assert len(scored) == len(completion)
        assert max_diff(scored, reference) < 1e-5
        # The sampler's logprobs at temperature 1 are the same distribution's.
        assert max_diff(scored, sampled.logprobs) < 1e-5
        # Uncached (a fresh engine without a cache) gives the same numbers.
        cold = LocalEngine.from_pretrained(tiny_dir, prefix_cache_bytes=0)
        try:
            assert max_diff(asyncio.run(cold.score(prompt, completion)), reference) < 1e-5
        finally:
            asyncio.run(cold.aclose())
        with pytest.raises(ValueError, match="non-empty"):
            asyncio.run(engine.score(prompt, []))
    finally:
        asyncio.run(engine.aclose())
    with pytest.raises(PolicyError, match="closed"):
        asyncio.run(engine.score(prompt, completion))


def test_a_score_waits_for_queued_weights_and_runs_between_decoding_steps(tiny_dir) -> None:
    engine = LocalEngine.from_pretrained(tiny_dir, max_batch_size=4)
    prompt = _prompt(engine)
    completion = list(range(5, 15))
    changed = {k: v * 1.5 for k, v in engine.model.state_dict().items()}

    async def scenario():
        running = asyncio.create_task(engine.generate(prompt, SamplingParams(max_tokens=80)))
        start = engine.steps
        while engine.steps < start + 3:
            await asyncio.sleep(0.001)
        engine.update_weights(changed, version=1)
        scored = await engine.score(prompt, completion)  # queued after the weights
        assert engine.policy_version == 1
        return scored, await running

    try:
        scored, c = asyncio.run(scenario())
        assert max_diff(scored, reference_logprobs(engine.model, prompt, completion)) < 1e-5
        assert set(c.versions()) == {0, 1}  # the episode went on across the update
    finally:
        asyncio.run(engine.aclose())


def test_a_skipped_cache_invalidation_shows_in_the_scores(tiny_dir, monkeypatch) -> None:
    """SkyRL #2246's bug, injected: the prefix cache is not moved to the new weights'
    version. Scores of a prompt cached before the sync then differ from a recompute with the
    new weights; with the invalidation in place they do not."""
    gaps = {}
    for broken in (False, True):
        if broken:
            monkeypatch.setattr(PrefixCache, "new_version", lambda self, version: None)
        engine = LocalEngine.from_pretrained(tiny_dir)
        prompt = _prompt(engine, "Cached before the sync")
        completion = list(range(20, 32))
        try:
            asyncio.run(engine.score(prompt, completion))  # caches the prompt at version 0
            changed = {k: v * 1.3 for k, v in engine.model.state_dict().items()}
            engine.update_weights(changed, version=1)
            assert engine.wait_for_version(1)
            scored = asyncio.run(engine.score(prompt, completion))
            gaps[broken] = max_diff(scored, reference_logprobs(engine.model, prompt, completion))
        finally:
            asyncio.run(engine.aclose())
    assert gaps[False] < 1e-5
    assert gaps[True] > 1e-2


def test_prefix_cache_entries_carry_their_version_and_other_versions_miss() -> None:
    cache = PrefixCache(budget_bytes=1 << 20, version=3)
    assert cache.insert([1, 2, 3, 4], _kv(4))
    entry = cache.lookup(torch.tensor([1, 2, 3, 4, 5]))
    assert entry is not None and entry.length == 4 and entry.entry.version == 3
    assert cache.lookup(torch.tensor([1, 2, 3]), version=4) is None  # another version: a miss
    assert cache.stats().misses == 1
    # An entry of a version other than the cache's is refused (no lookup would match it).
    assert not cache.insert([7, 8], _kv(2), version=2)
    # A shorter entry of the same version is covered by a longer one; the version moves on.
    assert cache.insert([1, 2, 3, 4, 5, 6], _kv(6))
    assert len(cache) == 1
    cache.new_version(4)
    assert len(cache) == 0 and cache.nbytes == 0 and cache.version == 4
    assert cache.lookup(torch.tensor([1, 2, 3])) is None
    assert cache.insert([1, 2, 3], _kv(3))
    assert cache.lookup(torch.tensor([1, 2, 3, 9])).entry.version == 4
    cache.new_version(4)  # the same version again keeps its entries
    assert len(cache) == 1


def test_the_engine_tags_cache_entries_with_the_weights_version(tiny_dir) -> None:
    engine = LocalEngine.from_pretrained(tiny_dir, policy_version=5)
    prompt = _prompt(engine)
    try:
        assert engine.prefix_cache.version == 5
        asyncio.run(engine.generate(prompt, SamplingParams(max_tokens=4, seed=0)))
        assert len(engine.prefix_cache) > 0
        versions = {e.version for e in engine.prefix_cache._entries.values()}
        assert versions == {5}
        engine.update_weights(dict(engine.model.state_dict()), version=6)
        assert engine.wait_for_version(6)
        assert engine.prefix_cache.version == 6 and len(engine.prefix_cache) == 0
    finally:
        asyncio.run(engine.aclose())
