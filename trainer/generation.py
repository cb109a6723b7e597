"""The generation side of the loop: workers that play groups, and the batches they hand over.

`GroupGenerator.start` launches `groups_per_step * (max_staleness + 1)` workers (coroutines on
the loop's event loop). Each waits until the `StalenessGate` admits one more group, claims the
next group index of the run's data order, plays it (the loop's `play_group`) and files it as
finished. `next_batch` waits until `pick_batch` can take `groups_per_step` finished groups
without leaving a group (finished or running) unable to be trained within `max_staleness`.

With a `SetAside` rule (`algorithm.dynamic_sampling`), a finished group the rule rejects (no
reward variance) is recorded in the cursor as set aside, its admission is refunded and the
worker plays the next task instead, up to `SetAside.limit` groups per batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from skyrl_sdk.trainer.batch import Group, pick_batch
from skyrl_sdk.trainer.config import AdvantageEstimator, AlgorithmConfig, TrainerLoopConfig
from skyrl_sdk.trainer.data import DataCursor, StalenessGate

PlayGroup = Callable[[int, int], Awaitable[Group]]
"""Plays group `index`, admitted at learner version `version`: `play_group(index, version)`."""


@dataclass(frozen=True)
class SetAside:
    """Which finished groups to set aside instead of training (dynamic sampling)."""

    rejects: Callable[[Group], bool]
    """True for a group no step should train (e.g. every reward equal)."""
    limit: int
    """Most groups set aside per batch; past it, rejected groups are kept."""


def no_reward_variance(group: Group) -> bool:
    """Every episode of `group` got the same reward (GRPO's advantage is 0 everywhere)."""
    return len({t.reward for t in group.trajectories}) <= 1


def set_aside_rule(algorithm: AlgorithmConfig) -> SetAside | None:
    """`algorithm.dynamic_sampling`'s rule (None when off, and under distillation, where a
    group without reward variance still has a signal in every token)."""
    if not algorithm.dynamic_sampling or algorithm.advantage is AdvantageEstimator.OPD:
        return None
    return SetAside(no_reward_variance, algorithm.max_set_aside)


class GroupGenerator:
    """Generation state, shared by the workers and the learner loop (one event loop)."""

    def __init__(
        self,
        cfg: TrainerLoopConfig,
        cursor: DataCursor,
        version: int,
        play_group: PlayGroup,
        set_aside: SetAside | None = None,
    ):
        """Workers for `cfg`'s batch shape, continuing `cursor`'s data order from learner
        version `version`; `play_group` plays one group; `set_aside`: dynamic sampling."""
        self._cfg = cfg
        self._cursor = cursor
        self._play_group = play_group
        self._set_aside = set_aside
        self._set_aside_count = 0
        """Groups set aside since the last batch was taken."""
        self.last_set_aside = 0
        """Groups set aside while the last batch taken was being gathered."""
        self._gate = StalenessGate(
            cfg.groups_per_step,
            cfg.max_staleness,
            admitted=len(cursor.consumed),
            version=version,
        )
        self._pending = cursor.pending()
        self._running: dict[int, int] = {}
        """Group index -> admitted version, of groups still generating."""
        self._finished: dict[int, Group] = {}
        """Finished groups not yet taken into a batch."""
        self._changed = asyncio.Condition()
        self._error: BaseException | None = None
        """The first failure of a worker (`next_batch` raises it)."""
        self._workers: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Launch the workers (on the running event loop)."""
        cfg = self._cfg
        self._workers = [
            asyncio.create_task(self._worker(), name=f"gen-{i}")
            for i in range(cfg.groups_per_step * (cfg.max_staleness + 1))
        ]
        for w in self._workers:
            w.add_done_callback(self._worker_done)

    async def stop(self) -> None:
        """Cancel the workers and wait until they are gone."""
        for w in self._workers:
            w.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)

    async def advance(self, version: int) -> None:
        """Open the gate one version further (the learner published `version`)."""
        await self._gate.advance(version)

    async def next_batch(self, version: int) -> list[Group]:
        """`groups_per_step` finished groups for learner `version`, earliest admitted first
        (`pick_batch`). Waits while taking a batch now would leave a group (finished or
        running) unable to be trained within `max_staleness`."""
        cfg = self._cfg
        chosen: list[int] | None = None

        def ready() -> bool:
            nonlocal chosen
            if self._error is not None:
                return True
            chosen = pick_batch(
                {i: g.admitted_version for i, g in self._finished.items()},
                self._running.values(),
                version,
                cfg.groups_per_step,
                cfg.max_staleness,
            )
            return chosen is not None

        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(ready), cfg.step_timeout_s)
            except TimeoutError:
                raise RuntimeError(
                    f"no batch after {cfg.step_timeout_s} s: {len(self._finished)} groups finished, "
                    f"{len(self._running)} running"
                ) from None
        if self._error is not None:
            raise RuntimeError("a generation worker failed") from self._error
        assert chosen is not None
        self.last_set_aside, self._set_aside_count = self._set_aside_count, 0
        return [self._finished.pop(i) for i in chosen]

    async def _worker(self) -> None:
        """Forever: wait for admission, play one group, hand it over."""
        while True:
            version = await self._gate.admit()
            index = next(self._pending)  # no await since admit(): claims are in order
            self._running[index] = version
            group = await self._play_group(index, version)
            if self._sets_aside(group):
                self._cursor.mark_set_aside(index)
                await self._gate.refund()  # another task takes its place
                async with self._changed:
                    del self._running[index]
                    self._changed.notify_all()
                continue
            async with self._changed:
                del self._running[index]
                self._finished[index] = group
                self._changed.notify_all()

    def metrics(self) -> dict[str, int]:
        """The last batch's generation metrics: `groups/set_aside`."""
        return {"groups/set_aside": self.last_set_aside}

    def _sets_aside(self, group: Group) -> bool:
        rule = self._set_aside
        if rule is None or self._set_aside_count >= rule.limit or not rule.rejects(group):
            return False
        self._set_aside_count += 1
        return True

    def _worker_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        self._error = task.exception()

        async def wake() -> None:
            async with self._changed:
                self._changed.notify_all()

        asyncio.get_running_loop().create_task(wake())
