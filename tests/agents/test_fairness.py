"""The fairness policy of the engine's scheduler (`agents/fairness.py`), alone and in
`LocalEngine`'s admission."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from skyrl_sdk.agents.fairness import FairnessLimits, FairQueue, TenantQueueFull
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


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_rows"):
        FairnessLimits(max_rows=0)
    assert FairnessLimits.for_batch(16).max_rows == 8
    assert FairnessLimits.for_batch(1).max_rows == 1


@pytest.fixture(scope="module")
def engine(tiny_dir):
    from skyrl_sdk.agents.local_engine import LocalEngine

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
