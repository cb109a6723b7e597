"""`KVSlots`: rows right-aligned in shared buffers; joining, leaving, widening and trimming
move no other row, and the views always equal a plain per-row reference."""

from __future__ import annotations

import asyncio
import random

import pytest

torch = pytest.importorskip("torch")

from skyrl_sdk.agents.engine import LocalEngine  # noqa: E402
from skyrl_sdk.agents.engine.kv_slots import MIN_SPARE, KVSlots  # noqa: E402
from skyrl_sdk.agents.policy import SamplingParams  # noqa: E402

LAYERS, HEADS, DIM = 2, 3, 4


def row(n: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(1, HEADS, n, DIM, generator=g), torch.randn(1, HEADS, n, DIM, generator=g))
        for _ in range(LAYERS)
    ]


def check(slots: KVSlots, reference: dict[int, list]) -> None:
    """Each referenced slot's last columns equal its reference row; the views are finite."""
    for layer, (k, v) in enumerate(slots.kv()):
        assert k.shape == (slots.slots, HEADS, slots.width, DIM)
        assert torch.isfinite(k).all() and torch.isfinite(v).all()
        for slot, kv in reference.items():
            n = kv[layer][0].shape[2]
            assert torch.equal(k[slot, :, -n:], kv[layer][0][0])
            assert torch.equal(v[slot, :, -n:], kv[layer][1][0])


def append(slots: KVSlots, reference: dict[int, list], seed: int) -> None:
    """One decoding step through the transformers layers: a column for every slot."""
    new = row(1, seed)  # the same column values for every slot, per layer
    slots.reserve(1)
    for layer, cache_layer in enumerate(slots.layers()):
        k, v = new[layer]
        keys, values = cache_layer.update(
            k.expand(slots.slots, -1, -1, -1), v.expand(slots.slots, -1, -1, -1)
        )
        assert keys.shape[2] == slots.width + 1
    slots.advance(1)
    for slot, kv in reference.items():
        reference[slot] = [
            (torch.cat([k, nk], 2), torch.cat([v, nv], 2))
            for (k, v), (nk, nv) in zip(kv, new, strict=True)
        ]


def test_a_row_takes_a_free_slot_without_copying_the_others() -> None:
    rows = {0: row(5, 0), 1: row(3, 1)}
    slots = KVSlots([rows[0], rows[1]], width=5)
    check(slots, rows)
    for step in range(4):
        append(slots, rows, 100 + step)
    check(slots, rows)
    buffers = [k.data_ptr() for k, _ in slots.kv()]
    rows[1] = row(6, 2)  # slot 1's request left; a new one of 6 tokens takes the slot
    slots.write(1, rows[1])
    check(slots, rows)
    assert slots.copies == 0 and [k.data_ptr() for k, _ in slots.kv()] == buffers


def test_widening_uses_spare_columns_then_copies_once_they_run_out() -> None:
    rows = {0: row(4, 0)}
    slots = KVSlots([rows[0]], width=4)
    assert slots.lo == MIN_SPARE
    slots.widen(4 + MIN_SPARE)  # exactly the spare columns on the left: no copy
    assert slots.copies == 0 and slots.width == 4 + MIN_SPARE
    check(slots, rows)
    slots.widen(4 + MIN_SPARE + 1)
    assert slots.copies == 1
    check(slots, rows)
    slots.trim(4)
    assert slots.width == 4
    check(slots, rows)


def test_decoding_past_the_capacity_copies_into_wider_buffers() -> None:
    rows = {0: row(2, 0), 1: row(1, 1)}
    slots = KVSlots([rows[0], rows[1]], width=2)
    steps = slots.capacity - slots.hi + 3
    for step in range(steps):
        append(slots, rows, step)
    assert slots.copies == 1
    check(slots, rows)


def test_select_and_add_slots_keep_rows_in_order() -> None:
    rows = {i: row(2 + i, i) for i in range(4)}
    slots = KVSlots([rows[i] for i in range(4)], width=5)
    slots.select([3, 1])
    check(slots, {0: rows[3], 1: rows[1]})
    slots.add_slots(2)
    assert slots.slots == 4
    check(slots, {0: rows[3], 1: rows[1]})
    slots.write(3, rows[0])
    check(slots, {0: rows[3], 1: rows[1], 3: rows[0]})


def test_random_joins_and_leaves_match_each_request_alone(tiny_dir) -> None:
    """Requests of varied lengths arrive at random moments into a continuous batch whose
    rows keep leaving (free slots reused, the width widened and trimmed, mostly empty batches
    compacted): every request gets the tokens and logprobs it gets alone."""
    batched = LocalEngine.from_pretrained(tiny_dir, max_batch_size=4, prefix_cache_bytes=0)
    alone = LocalEngine.from_pretrained(tiny_dir, max_batch_size=1, prefix_cache_bytes=0)
    rng = random.Random(0)
    requests = [
        (
            tuple(rng.randrange(3, 200) for _ in range(rng.randint(2, 60))),
            SamplingParams(max_tokens=rng.randint(1, 40), seed=i, temperature=1.0),
            rng.random() * 0.05,
        )
        for i in range(16)
    ]

    async def staggered():
        async def one(p, sp, delay):
            await asyncio.sleep(delay)
            return await batched.generate(p, sp)

        return await asyncio.gather(*[one(*r) for r in requests])

    async def serial():
        return [await alone.generate(p, sp) for p, sp, _ in requests]

    try:
        got, want = asyncio.run(staggered()), asyncio.run(serial())
    finally:
        asyncio.run(batched.aclose())
        asyncio.run(alone.aclose())
    for g, w in zip(got, want, strict=True):
        assert g.token_ids == w.token_ids
        assert max(abs(a - b) for a, b in zip(g.logprobs, w.logprobs, strict=True)) < 1e-5


def test_a_newcomer_takes_a_finished_rows_slot_without_a_copy(tiny_dir) -> None:
    """Two long requests keep decoding; a short one finishes and frees its slot; a fourth
    arrives and takes it: no buffer is copied for it, and it gets what it gets alone."""
    engine = LocalEngine.from_pretrained(tiny_dir, max_batch_size=3, prefix_cache_bytes=0)
    fourth_p, fourth_params = (12, 13, 14, 15), SamplingParams(max_tokens=5, seed=3)

    async def go():
        longs = [
            asyncio.create_task(engine.generate(p, SamplingParams(max_tokens=300, seed=i)))
            for i, p in enumerate([(3, 4, 5, 6, 7, 8), (20, 21, 22)])
        ]
        await engine.generate((9, 10, 11), SamplingParams(max_tokens=2, seed=2))
        before = engine.stats().batch_copies
        fourth = await engine.generate(fourth_p, fourth_params)
        after, running = engine.stats().batch_copies, not any(t.done() for t in longs)
        await asyncio.gather(*longs)
        return fourth, after - before, running

    try:
        alone = asyncio.run(engine.generate(fourth_p, fourth_params))  # a batch of one
        fourth, copies, running = asyncio.run(go())
    finally:
        asyncio.run(engine.aclose())
    assert running  # the fourth really joined a running batch of two
    assert fourth.token_ids == alone.token_ids
    assert copies == 0
