"""The generation side of the loop (`trainer.generation`): batches, and dynamic sampling's
set-aside groups."""

import asyncio
from types import SimpleNamespace

from skyrl_sdk.trainer.batch import Group
from skyrl_sdk.trainer.config import TrainerLoopConfig
from skyrl_sdk.trainer.data import DataCursor
from skyrl_sdk.trainer.generation import GroupGenerator, SetAside, no_reward_variance


def _group(index: int, version: int, rewards: list[float]) -> Group:
    episodes = tuple(SimpleNamespace(reward=r) for r in rewards)
    return Group(index, f"task-{index}", version, episodes)  # type: ignore[arg-type]


def _run(rewards_of, *, limit: int = 16, groups_per_step: int = 2, batches: int = 2):
    """Take `batches` batches from a generator whose group i gets `rewards_of(i)`."""
    cursor = DataCursor(100, seed=0)
    played: list[int] = []

    async def play(index: int, version: int) -> Group:
        played.append(index)
        await asyncio.sleep(0)
        return _group(index, version, rewards_of(index))

    async def scenario():
        cfg = TrainerLoopConfig(groups_per_step=groups_per_step, max_staleness=0)
        gen = GroupGenerator(cfg, cursor, 0, play, SetAside(no_reward_variance, limit))
        gen.start()
        taken, set_aside = [], []
        try:
            for version in range(batches):
                batch = await asyncio.wait_for(gen.next_batch(version), 10)
                taken.append(sorted(g.index for g in batch))
                set_aside.append(gen.last_set_aside)
                cursor.mark_consumed(g.index for g in batch)
                await gen.advance(version + 1)
        finally:
            await gen.stop()
        return taken, set_aside

    taken, set_aside = asyncio.run(scenario())
    return taken, set_aside, cursor, played


def test_flat_groups_are_set_aside_and_replaced_by_the_next_tasks():
    # Groups 0, 1, 4, 5 are all-solved or all-failed; the others have a signal.
    flat = {0, 1, 4, 5}
    taken, set_aside, cursor, _ = _run(lambda i: [1.0, 1.0] if i in flat else [0.0, 1.0])
    assert taken == [[2, 3], [6, 7]]
    assert set_aside == [2, 2]
    assert cursor.set_aside == flat
    assert cursor.consumed == {2, 3, 6, 7}


def test_past_the_limit_flat_groups_are_kept():
    taken, set_aside, cursor, _ = _run(lambda i: [0.0, 0.0], limit=3, batches=1)
    assert set_aside == [3]
    assert taken == [[3, 4]]  # the limit reached: the next two flat groups are trained
    assert cursor.set_aside == {0, 1, 2}


def test_without_the_rule_every_group_is_batched():
    cursor = DataCursor(10, seed=0)

    async def play(index: int, version: int) -> Group:
        return _group(index, version, [1.0, 1.0])

    async def scenario():
        gen = GroupGenerator(TrainerLoopConfig(groups_per_step=2), cursor, 0, play)
        gen.start()
        try:
            return sorted(g.index for g in await asyncio.wait_for(gen.next_batch(0), 10))
        finally:
            await gen.stop()

    assert asyncio.run(scenario()) == [0, 1]
    assert cursor.set_aside == set()


def test_a_resumed_cursor_neither_replays_nor_trains_set_aside_groups():
    _, _, cursor, _ = _run(lambda i: [1.0, 1.0] if i in {0, 1, 4, 5} else [0.0, 1.0])
    restored = DataCursor(100, seed=0)
    restored.load_state_dict(cursor.state_dict())
    assert restored.set_aside == {0, 1, 4, 5} and restored.consumed == {2, 3, 6, 7}
    pending = restored.pending()
    assert [next(pending) for _ in range(2)] == [8, 9]
    # An old checkpoint (no `set_aside` key) loads with none.
    old = DataCursor(100, seed=0)
    old.load_state_dict({"below": 2, "extra": []})
    assert old.set_aside == set() and old.consumed == {0, 1}
