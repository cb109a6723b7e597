"""`LocalEngine` prefix reuse and the `PrefixCache`: reused keys and values give the logprobs of
a full recompute, a group's prompt is prefilled once, memory stays under the budget, and new
weights are never served from old keys and values."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

from skyrl_sdk.agents.engine import LocalEngine  # noqa: E402
from skyrl_sdk.agents.engine.prefix_cache import PrefixCache, kv_bytes  # noqa: E402
from skyrl_sdk.agents.policy import SamplingParams  # noqa: E402


@pytest.fixture(scope="module")
def engines(tiny_dir):
    """The same tiny model with prefix reuse (default) and without it."""
    reuse = LocalEngine.from_pretrained(tiny_dir, max_batch_size=8)
    full = LocalEngine.from_pretrained(tiny_dir, max_batch_size=8, prefix_cache_bytes=0)
    yield reuse, full
    for e in (reuse, full):
        asyncio.run(e.aclose())


def reference_logprobs(model, prompt, ids) -> list[float]:
    """Logprobs of `ids` after `prompt` from one forward pass over the whole sequence."""
    with torch.no_grad():
        logits = model(torch.tensor([[*prompt, *ids]])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    return [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(ids)]


def observation(engine: LocalEngine) -> list[int]:
    return list(
        engine.tokenizer.encode(
            "<|im_end|>\n<|im_start|>user\nThe tool says 12 books on 3 shelves.<|im_end|>\n"
            "<|im_start|>assistant\n"
        )
    )


async def episodes(engine: LocalEngine, count: int, turns: int, max_tokens: int = 10):
    """`count` concurrent episodes of `turns` turns; each prompt extends the previous turn's
    prompt and completion. Returns [(prompt, completion)] per episode."""
    obs = observation(engine)

    async def one(i: int):
        prompt = list(
            engine.renderer.prompt(
                [{"role": "user", "content": f"Question {i} on apples?"}]
            ).token_ids
        )
        out = []
        for turn in range(turns):
            c = await engine.generate(
                prompt, SamplingParams(max_tokens=max_tokens, seed=i * 10 + turn)
            )
            out.append((prompt, c))
            prompt = [*prompt, *c.token_ids, *obs]
        return out

    return await asyncio.gather(*[one(i) for i in range(count)])


def max_diff(a, b) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def test_reused_prefixes_give_the_logprobs_of_a_full_recompute(engines) -> None:
    reuse, full = engines
    before_r, before_f = reuse.stats(), full.stats()
    with_reuse = asyncio.run(episodes(reuse, 3, 4))
    without = asyncio.run(episodes(full, 3, 4))
    after_r, after_f = reuse.stats(), full.stats()

    reused = after_r.prompt_tokens_reused - before_r.prompt_tokens_reused
    computed = after_r.prompt_tokens_computed - before_r.prompt_tokens_computed
    computed_full = after_f.prompt_tokens_computed - before_f.prompt_tokens_computed
    assert after_f.prompt_tokens_reused == before_f.prompt_tokens_reused  # the baseline
    # Every later turn reuses the whole previous turn: only the new tokens are computed.
    obs = len(observation(reuse))
    firsts = sum(len(ep[0][0]) for ep in with_reuse)
    assert computed <= firsts + 3 * 3 * (obs + 1)
    assert computed + reused == computed_full
    for ep_r, ep_f in zip(with_reuse, without, strict=True):
        for (prompt, c), (prompt_f, c_f) in zip(ep_r, ep_f, strict=True):
            assert prompt == prompt_f and c.token_ids == c_f.token_ids
            assert max_diff(c.logprobs, c_f.logprobs) < 1e-5
            assert max_diff(c.logprobs, reference_logprobs(reuse.model, prompt, c.token_ids)) < 1e-5


def test_a_group_prompt_is_prefilled_once(engines) -> None:
    reuse, _ = engines
    prompt = reuse.renderer.prompt([{"role": "user", "content": "A group prompt, new."}]).token_ids
    before = reuse.stats()

    async def group():
        return await asyncio.gather(
            *[reuse.generate(prompt, SamplingParams(max_tokens=6, seed=s)) for s in range(4)]
        )

    done = asyncio.run(group())
    after = reuse.stats()
    assert after.prefills - before.prefills == 1
    # Cached prefixes of other prompts (the template's opening) may cover part of it.
    assert after.prompt_tokens_computed - before.prompt_tokens_computed <= len(prompt)
    assert after.prompt_tokens_reused - before.prompt_tokens_reused >= 3 * len(prompt)
    for c in done:
        assert max_diff(c.logprobs, reference_logprobs(reuse.model, prompt, c.token_ids)) < 1e-5


def test_new_weights_never_reuse_old_keys_and_values(tiny_dir) -> None:
    engine = LocalEngine.from_pretrained(tiny_dir)
    prompt = engine.renderer.prompt([{"role": "user", "content": "What is 2 + 2?"}]).token_ids
    greedy = SamplingParams(max_tokens=8, temperature=0)
    try:
        first = asyncio.run(engine.generate(prompt, greedy))
        assert len(engine.prefix_cache) > 0
        changed = {k: v * 1.5 for k, v in engine.model.state_dict().items()}
        engine.update_weights(changed, version=1)
        assert engine.wait_for_version(1)
        assert len(engine.prefix_cache) == 0
        before = engine.stats()
        again = asyncio.run(engine.generate(prompt, greedy))
        after = engine.stats()
        assert after.prompt_tokens_reused == before.prompt_tokens_reused
        assert again.policy_version == 1
        ref = reference_logprobs(engine.model, prompt, again.token_ids)
        assert max_diff(again.logprobs, ref) < 1e-5
        assert max_diff(first.logprobs, again.logprobs[: len(first.logprobs)]) > 1e-3

        # A sequence whose keys and values span an update is not stored either.
        async def across_update():
            task = asyncio.create_task(engine.generate(prompt, SamplingParams(max_tokens=60)))
            start = engine.steps
            while engine.steps < start + 5:
                await asyncio.sleep(0.001)
            engine.update_weights({k: v / 1.5 for k, v in changed.items()}, version=2)
            return await task

        c = asyncio.run(across_update())
        assert set(c.versions()) == {1, 2}
        assert len(engine.prefix_cache) == 0
    finally:
        asyncio.run(engine.aclose())


def test_the_engine_stays_under_a_small_budget_and_stays_exact(tiny_dir) -> None:
    engine = LocalEngine.from_pretrained(tiny_dir, prefix_cache_bytes=1)  # reset below
    cfg = engine.model.config
    head = cfg.hidden_size // cfg.num_attention_heads
    per_token = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * head * 4  # float32
    budget = per_token * 150  # less than three episodes' worth
    engine.prefix_cache.budget_bytes = budget  # before any request: the worker is idle
    try:
        done = asyncio.run(episodes(engine, 4, 3, max_tokens=12))
        stats = engine.stats().prefix_cache
        assert stats.evictions > 0 and 0 < stats.bytes <= budget
        for ep in done:
            for prompt, c in ep:
                ref = reference_logprobs(engine.model, prompt, c.token_ids)
                assert max_diff(c.logprobs, ref) < 1e-5
    finally:
        asyncio.run(engine.aclose())


def _kv(tokens: int, width: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.randn(1, 2, tokens, width), torch.randn(1, 2, tokens, width))]


def test_prefix_cache_evicts_least_recently_used_under_its_budget() -> None:
    entry = kv_bytes(_kv(10))
    cache = PrefixCache(budget_bytes=3 * entry)
    seqs = [[100 + i, *range(9)] for i in range(5)]  # distinct first tokens: no prefixes
    for s in seqs[:3]:
        assert cache.insert(s, _kv(10))
    assert cache.lookup(torch.tensor(seqs[0] + [7])).length == 10  # touch the oldest
    cache.insert(seqs[3], _kv(10))  # evicts seqs[1], the least recently used
    cache.insert(seqs[4], _kv(10))  # evicts seqs[2]
    assert len(cache) == 3 and cache.nbytes <= cache.budget_bytes
    assert cache.stats().evictions == 2
    assert cache.lookup(torch.tensor(seqs[1])) is None
    assert cache.lookup(torch.tensor(seqs[2])) is None
    for s in (seqs[0], seqs[3], seqs[4]):
        assert cache.lookup(torch.tensor(s)).length == 10
    assert not cache.insert(list(range(1000, 1040)), _kv(40))  # alone over the budget
    assert len(cache) == 3


def test_prefix_cache_finds_the_longest_common_prefix_and_drops_covered_entries() -> None:
    cache = PrefixCache(budget_bytes=1 << 20)
    cache.insert([1, 2, 3], _kv(3))
    cache.insert([1, 2, 9, 9, 9], _kv(5))
    match = cache.lookup(torch.tensor([1, 2, 9, 9, 4]))
    assert match.length == 4 and match.entry.tokens.tolist() == [1, 2, 9, 9, 9]
    assert cache.lookup(torch.tensor([1, 2, 3, 4])).length == 3
    cache.insert([1, 2, 3, 4, 5, 6], _kv(6))  # covers [1, 2, 3]: that entry goes
    assert len(cache) == 2
    assert cache.lookup(torch.tensor([7])) is None
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0
    with pytest.raises(ValueError, match="budget"):
        PrefixCache(budget_bytes=-1)
