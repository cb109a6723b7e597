"""`LocalEngine` continuous batching: requests join a running batch and leave it when done or
cancelled; per-request seeds do not depend on batching; streaming and top logprobs."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

from skyrl_sdk.agents.engine import LocalEngine, Scheduling  # noqa: E402
from skyrl_sdk.agents.policy import (  # noqa: E402
    Completion,
    FinishReason,
    PolicyError,
    SamplingParams,
    StreamingPolicy,
    TokenChunk,
)


@pytest.fixture(scope="module")
def engine(tiny_dir):
    eng = LocalEngine.from_pretrained(tiny_dir, max_batch_size=4)
    yield eng
    asyncio.run(eng.aclose())


def prompt(engine: LocalEngine, text: str) -> tuple[int, ...]:
    return engine.renderer.prompt([{"role": "user", "content": text}]).token_ids


async def wait_steps(engine: LocalEngine, n: int) -> None:
    start = engine.steps
    while engine.steps < start + n:
        await asyncio.sleep(0.001)


@pytest.mark.parametrize("scheduling", ["continuous", "static"])
def test_a_request_arriving_mid_decode_joins_the_batch(tiny_dir, scheduling) -> None:
    """Continuous: the short request starts at the next step and finishes long before the long
    one. Static (the baseline): it waits for the running batch to end."""
    engine = LocalEngine.from_pretrained(tiny_dir, max_batch_size=4, scheduling=scheduling)
    long_p, short_p = prompt(engine, "a long story"), prompt(engine, "short")
    short_params = SamplingParams(max_tokens=5, seed=11)

    async def go():
        alone = await engine.generate(short_p, short_params)
        long = asyncio.create_task(engine.generate(long_p, SamplingParams(max_tokens=150, seed=1)))
        await wait_steps(engine, 5)
        joined_at = engine.steps
        short = await engine.generate(short_p, short_params)
        finished_at, long_done = engine.steps, long.done()
        await long
        return alone, short, joined_at, finished_at, long_done

    try:
        alone, short, joined_at, finished_at, long_done = asyncio.run(go())
    finally:
        asyncio.run(engine.aclose())
    assert short.token_ids == alone.token_ids  # joining a batch does not change its tokens
    if scheduling == "continuous":
        assert not long_done
        assert finished_at - joined_at <= 10  # 4 decoding steps after its prefill, plus slack
    else:
        assert long_done and finished_at - joined_at >= 120


def test_cancelled_requests_free_their_slot(tiny_dir) -> None:
    """One slot: a cancelled generate and a closed stream each leave at the next step, so the
    next request runs (with a never-ending request still holding the slot, it would hang)."""
    engine = LocalEngine.from_pretrained(tiny_dir, max_batch_size=1)
    p = prompt(engine, "go on forever")
    endless = SamplingParams(max_tokens=1_000_000)

    async def go():
        task = asyncio.create_task(engine.generate(p, endless))
        await wait_steps(engine, 3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after_cancel = await asyncio.wait_for(engine.generate(p, SamplingParams(max_tokens=3)), 60)

        stream = engine.generate_stream(p, endless)
        got = 0
        async for item in stream:
            assert isinstance(item, TokenChunk)
            got += len(item.token_ids)
            if got >= 3:
                break
        await stream.aclose()
        after_close = await asyncio.wait_for(engine.generate(p, SamplingParams(max_tokens=3)), 60)
        return after_cancel, after_close

    try:
        after_cancel, after_close = asyncio.run(go())
        assert len(after_cancel.token_ids) == 3 and len(after_close.token_ids) == 3
        assert engine.stats().cancelled == 2
        for _ in range(500):  # the worker drops the row just after resolving it
            if engine.running == 0:
                break
            asyncio.run(asyncio.sleep(0.01))
        assert engine.running == 0
    finally:
        asyncio.run(engine.aclose())


def test_a_seed_gives_the_same_tokens_alone_and_batched(engine: LocalEngine) -> None:
    target = prompt(engine, "What is 2 + 2?")
    params = SamplingParams(max_tokens=24, temperature=1.0, seed=1234)

    async def go():
        alone = await engine.generate(target, params)
        others = [
            asyncio.create_task(
                engine.generate(prompt(engine, f"other {i} " * (i + 1)), SamplingParams(seed=i))
            )
            for i in range(3)
        ]
        await wait_steps(engine, 2)  # joins a batch already decoding
        batched = await engine.generate(target, params)
        together = await asyncio.gather(
            engine.generate(target, params), *[engine.generate(target, SamplingParams(seed=9))]
        )
        for t in others:
            await t
        return alone, batched, together[0]

    alone, batched, together = asyncio.run(go())
    for c in (batched, together):
        assert c.token_ids == alone.token_ids
        assert max(abs(a - b) for a, b in zip(c.logprobs, alone.logprobs, strict=True)) < 1e-5


def test_static_scheduling_gives_the_same_tokens(tiny_dir, engine: LocalEngine) -> None:
    static = LocalEngine.from_pretrained(tiny_dir, max_batch_size=4, scheduling=Scheduling.STATIC)
    prompts = [prompt(engine, f"question {i}" + " more" * i) for i in range(4)]
    params = [SamplingParams(max_tokens=8 + 6 * i, seed=i) for i in range(4)]

    async def run(e):
        return await asyncio.gather(
            *[e.generate(p, s) for p, s in zip(prompts, params, strict=True)]
        )

    try:
        a, b = asyncio.run(run(engine)), asyncio.run(run(static))
    finally:
        asyncio.run(static.aclose())
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [len(c.token_ids) for c in b] == [8, 14, 20, 26]


def test_stream_yields_the_tokens_of_generate(engine: LocalEngine) -> None:
    assert isinstance(engine, StreamingPolicy)
    p = prompt(engine, "Tell me about trees.")
    params = SamplingParams(max_tokens=15, seed=5)

    async def go():
        items = [item async for item in engine.generate_stream(p, params)]
        return items, await engine.generate(p, params)

    items, plain = asyncio.run(go())
    *chunks, last = items
    assert chunks and all(isinstance(c, TokenChunk) for c in chunks)
    assert isinstance(last, Completion)
    streamed = tuple(t for c in chunks for t in c.token_ids)
    assert streamed == last.token_ids == plain.token_ids
    assert tuple(lp for c in chunks for lp in c.logprobs) == last.logprobs
    assert max(abs(a - b) for a, b in zip(last.logprobs, plain.logprobs, strict=True)) < 1e-6
    assert last.finish_reason is plain.finish_reason is FinishReason.LENGTH


def test_closing_the_engine_fails_an_open_stream(tiny_dir) -> None:
    engine = LocalEngine.from_pretrained(tiny_dir)

    async def go():
        stream = engine.generate_stream(prompt(engine, "x"), SamplingParams(max_tokens=100_000))
        first = await anext(stream)
        await engine.aclose()
        with pytest.raises(PolicyError, match="is closed"):
            async for _ in stream:
                pass
        return first

    assert isinstance(asyncio.run(go()), TokenChunk)


def test_top_logprobs_are_the_most_likely_alternatives(engine: LocalEngine) -> None:
    p = prompt(engine, "What is 2 + 2?")
    greedy = asyncio.run(
        engine.generate(p, SamplingParams(max_tokens=6, temperature=0, top_logprobs=3))
    )
    assert greedy.top_logprobs is not None and len(greedy.top_logprobs) == 6
    for token, logprob, top in zip(
        greedy.token_ids, greedy.logprobs, greedy.top_logprobs, strict=True
    ):
        assert len(top) == 3
        assert [lp for _, lp in top] == sorted((lp for _, lp in top), reverse=True)
        assert top[0] == (token, logprob)  # greedy takes the most likely one
    sampled = asyncio.run(
        engine.generate(p, SamplingParams(max_tokens=6, temperature=0.7, seed=2, top_logprobs=2))
    )
    for token, logprob, top in zip(
        sampled.token_ids, sampled.logprobs, sampled.top_logprobs, strict=True
    ):
        assert logprob <= top[0][1] and (token != top[0][0] or logprob == top[0][1])
    plain = asyncio.run(engine.generate(p, SamplingParams(max_tokens=3, temperature=0)))
    assert plain.top_logprobs is None
    with pytest.raises(PolicyError, match="top_logprobs"):
        asyncio.run(engine.generate(p, SamplingParams(top_logprobs=-1)))
