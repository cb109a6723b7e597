"""Data order and staleness admission control."""

import asyncio

from skyrl_sdk.trainer.data import DataCursor, StalenessGate


def test_cursor_is_deterministic_and_covers_each_epoch():
    a, b = DataCursor(5, seed=3), DataCursor(5, seed=3)
    order = [a.task_index(i) for i in range(10)]
    assert order == [b.task_index(i) for i in range(10)]
    assert sorted(order[:5]) == sorted(order[5:]) == list(range(5))


def test_cursor_state_resumes_pending_groups():
    cursor = DataCursor(4, seed=0)
    cursor.mark_consumed([0, 1, 2, 4])
    restored = DataCursor(4, seed=0)
    restored.load_state_dict(cursor.state_dict())
    pending = restored.pending()
    assert [next(pending) for _ in range(3)] == [3, 5, 6]


def test_gate_admits_one_batch_per_version_at_staleness_zero():
    async def scenario():
        gate = StalenessGate(groups_per_step=2, max_staleness=0)
        assert [await gate.admit() for _ in range(2)] == [0, 0]
        third = asyncio.create_task(gate.admit())
        await asyncio.sleep(0.01)
        assert not third.done()  # a third group must wait for version 1
        await gate.advance(1)
        assert await third == 1

    asyncio.run(scenario())


def test_gate_allows_staleness_window():
    async def scenario():
        gate = StalenessGate(groups_per_step=2, max_staleness=2)
        versions = [await gate.admit() for _ in range(6)]
        assert versions == [0] * 6
        assert gate.admitted == gate.capacity() == 6

    asyncio.run(scenario())
