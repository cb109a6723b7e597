"""The fairness policy of the engine's scheduler (`agents/fairness.py`), alone and in
`LocalEngine`'s admission."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from skyrl_sdk.agents.engine.fairness import (
    FairnessLimits,
    FairQueue,
    TenantQueueFull,
    rows_to_step,
)
from skyrl_sdk.agents.policy import GenerationContext, SamplingParams


@dataclass
class Item:
    name: str
    dead: bool = False


def queue(max_rows: int | None = 2, max_queued: int | None = 3) -> FairQueue[Item]:
    return FairQueue(FairnessLimits(max_rows, max_queued), alive=lambda item: not item.dead)


def test_a_tenant_at_its_row_cap_waits_and_the_fewest_rows_go_first() -> None:
    q = queue()
    for name in ("h1", "h2", "h3"):
        q.put("hog", Item(name))
    q.put("victim", Item("v1"))
    # The hog holds its cap: only the victim may go, although the hog's requests are older.
    assert q.take({"hog": 2}).name == "v1"
    assert q.take({"hog": 2, "victim": 1}) is None
    # Under the cap, the tenant with fewer rows goes first; ties to the oldest request.
    q.put("victim", Item("v2"))
    assert q.take({"hog": 1, "victim": 0}).name == "v2"
    assert q.take({"hog": 1}).name == "h1"


def test_the_queue_cap_refuses_one_more_and_dead_items_do_not_count() -> None:
    q = queue(max_queued=2)
    first, second = Item("a"), Item("b")
    q.put("s", first)
    q.put("s", second)
    assert q.room("s") == 0
    with pytest.raises(TenantQueueFull, match="2 requests waiting"):
        q.put("s", Item("c"))
    first.dead = True  # its caller cancelled it
    assert q.room("s") == 1
    q.put("s", Item("c"))
    assert [q.take({}).name for _ in range(2)] == ["b", "c"]


def test_untenanted_callers_have_no_caps() -> None:
    q = queue(max_rows=1, max_queued=1)
    for k in range(5):
        q.put(None, Item(str(k)))
    assert q.room(None) is None
    assert [q.take({None: 4}).name for _ in range(5)] == ["0", "1", "2", "3", "4"]


def test_one_tenant_or_equal_tenants_or_no_step_cap_advance_every_row() -> None:
    assert rows_to_step(["hog"] * 8, [0] * 8, 1) == list(range(8))
    assert rows_to_step(["a", "b", "a", "b"], [0] * 4, 1) == [0, 1, 2, 3]  # equal rows
    assert rows_to_step(["hog"] * 8 + ["v"], [0] * 9, None) == list(range(9))
    assert rows_to_step([None] * 3, [0] * 3, 1) == [0, 1, 2]


def test_a_hog_beside_a_small_tenant_advances_its_share_longest_waiting_first() -> None:
    tenants = ["hog", "hog", "v", "hog", "hog"]
    # The fewest rows any tenant holds (1) is the share: one hog row, the one that sat out most.
    assert rows_to_step(tenants, [0, 0, 0, 0, 0], 1) == [0, 2]
    assert rows_to_step(tenants, [1, 0, 0, 3, 1], 1) == [2, 3]
    # step_rows raises the share; the victim's rows all advance whatever step_rows is.
    assert rows_to_step(tenants, [0, 2, 0, 2, 1], 2) == [1, 2, 3]
    # Two hogs beside a victim each advance one row; untenanted rows always advance.
    tenants = ["a", "a", "b", "b", "b", "v", None, None]
    assert rows_to_step(tenants, [0] * 8, 1) == [0, 2, 5, 6, 7]
    # Rotation: over many steps, a hog's rows advance evenly.
    skipped = [0] * 4
    advanced = [0] * 4
    for _ in range(12):
        chosen = rows_to_step(["h", "h", "h", "v"], skipped, 1)
        for i in range(4):
            advanced[i] += i in chosen
            skipped[i] += i not in chosen
    assert advanced == [4, 4, 4, 12]


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_rows"):
        FairnessLimits(max_rows=0)
    with pytest.raises(ValueError, match="step_rows"):
        FairnessLimits(max_rows=2, step_rows=0)
    assert FairnessLimits(max_rows=2).step_rows == 1
    assert FairnessLimits.for_batch(16).max_rows == 8
    assert FairnessLimits.for_batch(1).max_rows == 1


@pytest.fixture(scope="module")
def engine(tiny_dir):
    from skyrl_sdk.agents.engine import LocalEngine

    engine = LocalEngine.from_pretrained(
        tiny_dir, max_batch_size=8, fairness=FairnessLimits(max_rows=3, max_queued=20)
    )
    yield engine
    asyncio.run(engine.aclose())


def test_n_choices_of_one_session_never_take_more_than_its_share(engine) -> None:
    """Eight choices of one session on a batch of 8 with a cap of 3: never more than 3 rows;
    another session's request is admitted beside them and all finish."""

    async def run() -> tuple[int, list[int]]:
        hog = GenerationContext("hog", "t", 0)
        victim = GenerationContext("victim", "t", 0)
        params = SamplingParams(max_tokens=60, temperature=1.0)
        hogs = [
            asyncio.ensure_future(engine.generate([5, 6, 7], params, context=hog)) for _ in range(8)
        ]
        peak, served_beside = 0, False
        while not all(t.done() for t in hogs):
            rows = engine.running_by_tenant().get("hog", 0)
            peak = max(peak, rows)
            if rows == 3 and not served_beside:
                short = SamplingParams(max_tokens=4, temperature=0.0)
                done = await engine.generate([9, 9], short, context=victim)
                assert len(done.token_ids) == 4
                served_beside = not all(t.done() for t in hogs)  # not after the hog
            await asyncio.sleep(0.001)
        assert served_beside
        return peak, [len((await t).token_ids) for t in hogs]

    peak, lengths = asyncio.run(run())
    assert peak == 3
    assert lengths == [60] * 8


def test_a_full_session_queue_raises_at_submit(engine) -> None:
    async def run() -> None:
        ctx = GenerationContext("flood", "t", 0)
        params = SamplingParams(max_tokens=200)
        # Submitted in one go (the worker admits at most 3 meanwhile): 3 run, 20 wait.
        tasks = [
            asyncio.ensure_future(engine.generate([5], params, context=ctx)) for _ in range(40)
        ]
        await asyncio.sleep(0.05)
        refused = [t for t in tasks if t.done() and isinstance(t.exception(), TenantQueueFull)]
        assert 40 - 3 - 20 <= len(refused) <= 40 - 20
        assert engine.running_by_tenant().get("flood") == 3
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(run())


def test_a_hogs_rows_sit_steps_out_beside_a_victim_and_their_tokens_do_not_change(
    tiny_dir,
) -> None:
    """Three hog rows and a victim's row: in each of the victim's 12 steps one hog row
    advances and two sit out (24 row-steps); alone, the hog's rows all advance. Every row
    still ends at its max_tokens or stop id, with the tokens it gets without sitting out
    (greedy and seeded rows: the same requests again with step_rows=None). A row that sat
    out is kept for prefix reuse without the columns it skipped: the next turn continues as
    it does from a row that never sat out."""
    from skyrl_sdk.agents.engine import LocalEngine

    async def run(step_rows: int | None) -> tuple[list[tuple[int, ...]], tuple[int, ...], int, Any]:
        limits = FairnessLimits(max_rows=3, max_queued=20, step_rows=step_rows)
        engine = LocalEngine.from_pretrained(tiny_dir, max_batch_size=8, fairness=limits)
        try:
            hog = GenerationContext("hog", "t", 0)
            victim = GenerationContext("victim", "t", 0)
            stops = (3, 4)
            params = [
                SamplingParams(max_tokens=80, temperature=0.0),
                SamplingParams(max_tokens=70, temperature=1.0, seed=7),
                SamplingParams(max_tokens=90, temperature=1.0, seed=11, stop_token_ids=stops),
            ]
            hogs = [
                asyncio.ensure_future(engine.generate([5, 6, 7 + i], p, context=hog))
                for i, p in enumerate(params)
            ]
            while engine.running_by_tenant().get("hog", 0) < 3:
                await asyncio.sleep(0.001)
            await asyncio.sleep(0.02)  # a few steps of the hog alone: nothing sits out
            assert engine.stats().rows_sat_out == 0
            short = SamplingParams(max_tokens=12, temperature=1.0, seed=3)
            done = await engine.generate([9, 9, 9, 9], short, context=victim)
            sat_out = engine.stats().rows_sat_out
            hog_done = [await t for t in hogs]
            assert engine.stats().rows_sat_out == sat_out  # the hog alone again
            assert len(done.token_ids) == 12
            assert [len(c.token_ids) for c in hog_done[:2]] == [80, 70]
            third = hog_done[2].token_ids
            assert len(third) == 90 or (third[-1] in stops and not set(third[:-1]) & set(stops))
            reused = engine.stats().prompt_tokens_reused
            turn = [5, 6, 7, *hog_done[0].token_ids, 8]
            cont = await engine.generate(turn, SamplingParams(max_tokens=6, temperature=0.0))
            assert engine.stats().prompt_tokens_reused - reused == len(turn) - 2
            return [c.token_ids for c in hog_done], done.token_ids, sat_out, cont
        finally:
            await engine.aclose()

    fair_hogs, fair_victim, fair_sat_out, fair_cont = asyncio.run(run(1))
    plain_hogs, plain_victim, plain_sat_out, plain_cont = asyncio.run(run(None))
    assert (fair_sat_out, plain_sat_out) == (2 * 12, 0)
    assert fair_hogs == plain_hogs
    assert fair_victim == plain_victim
    assert fair_cont.token_ids == plain_cont.token_ids
    assert fair_cont.logprobs == pytest.approx(plain_cont.logprobs, abs=1e-5)


def test_rows_that_sit_out_many_steps_keep_the_batch_narrow(tiny_dir) -> None:
    """Four hog rows beside a stream of victim requests advance a quarter as often, so their
    columns would span four times their length; the gaps are closed once the batch is twice
    as wide as its longest row, and the hog's greedy tokens are those of a plain run."""
    from skyrl_sdk.agents.engine import LocalEngine

    async def run(step_rows: int | None) -> tuple[list[tuple[int, ...]], int, int]:
        limits = FairnessLimits(max_rows=4, max_queued=20, step_rows=step_rows)
        engine = LocalEngine.from_pretrained(tiny_dir, max_batch_size=8, fairness=limits)
        try:
            hog = GenerationContext("hog", "t", 0)
            victim = GenerationContext("victim", "t", 0)
            params = SamplingParams(max_tokens=120, temperature=0.0)
            hogs = [
                asyncio.ensure_future(engine.generate([5, 6, 7 + i], params, context=hog))
                for i in range(4)
            ]
            while engine.running_by_tenant().get("hog", 0) < 4:
                await asyncio.sleep(0.001)
            short = SamplingParams(max_tokens=30, temperature=0.0)
            widest = 0
            while not all(t.done() for t in hogs):
                task = asyncio.ensure_future(engine.generate([9, 9], short, context=victim))
                while not task.done():
                    slots, pos = engine._slots, engine._pos
                    if slots is not None and pos is not None and engine.running:
                        widest = max(widest, slots.width - 2 * int(pos.max()))
                    await asyncio.sleep(0.0005)
            return [(await t).token_ids for t in hogs], widest, engine.stats().rows_sat_out
        finally:
            await engine.aclose()

    fair_hogs, fair_widest, sat_out = asyncio.run(run(1))
    plain_hogs, _, _ = asyncio.run(run(None))
    assert sat_out > 3 * 120  # the hog's rows sat out most of the victims' steps
    assert fair_widest <= 64 + 1  # width <= 2 x longest row + MIN_SPARE (+ this step's column)
    assert fair_hogs == plain_hogs
