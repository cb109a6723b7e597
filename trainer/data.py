"""Data order and admission control for the async trainer.

`DataCursor`: group `i` of a run always plays the same task (a seeded permutation per epoch),
and the cursor remembers which groups were trained on, so a resumed run regenerates exactly
the groups that were in flight when it was killed: none trained twice, none skipped.

`StalenessGate`: a group may start only while the number of groups admitted so far is below
`(version + max_staleness + 1) * groups_per_step`. With `max_staleness=0` exactly one batch
is admitted per policy version, which is synchronous on-policy training.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable, Iterator
from typing import Any


class DataCursor:
    """Deterministic group -> task mapping, plus the set of groups already trained on."""

    def __init__(self, num_tasks: int, seed: int):
        if num_tasks < 1:
            raise ValueError("the env has no tasks to train on")
        self.num_tasks = num_tasks
        self.seed = seed
        self.consumed: set[int] = set()
        self.set_aside: set[int] = set()
        """Groups played but never to be trained (dynamic sampling's flat groups); they do not
        count as consumed (the staleness gate counts trained groups) but are not replayed."""
        self._perms: dict[int, list[int]] = {}

    def task_index(self, group: int) -> int:
        """The dataset row group `group` plays: epoch-wise shuffles, seeded."""
        epoch, offset = divmod(group, self.num_tasks)
        perm = self._perms.get(epoch)
        if perm is None:
            perm = list(range(self.num_tasks))
            random.Random(f"{self.seed}:{epoch}").shuffle(perm)
            self._perms[epoch] = perm
        return perm[offset]

    def pending(self) -> Iterator[int]:
        """Group indices not yet trained on, in order (endless)."""
        group = 0
        while True:
            if group not in self.consumed and group not in self.set_aside:
                yield group
            group += 1

    def mark_consumed(self, groups: Iterable[int]) -> None:
        """Record groups as trained on (part of a completed optimizer step)."""
        self.consumed.update(groups)

    def mark_set_aside(self, group: int) -> None:
        """Record a played group that no step will train (`algorithm.dynamic_sampling`)."""
        self.set_aside.add(group)

    def state_dict(self) -> dict[str, Any]:
        """Compact state: every group below `below` is consumed, plus `extra` above it, and
        the groups set aside."""
        below = 0
        while below in self.consumed:
            below += 1
        return {
            "below": below,
            "extra": sorted(g for g in self.consumed if g > below),
            "set_aside": sorted(self.set_aside),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of `state_dict` (a checkpoint from before `set_aside` has none)."""
        self.consumed = set(range(state["below"])) | set(state["extra"])
        self.set_aside = set(state.get("set_aside", ()))


class StalenessGate:
    """Admission control in policy versions (AReaL-style, applied before generation)."""

    def __init__(
        self, groups_per_step: int, max_staleness: int, admitted: int = 0, version: int = 0
    ):
        self.groups_per_step = groups_per_step
        self.max_staleness = max_staleness
        self.admitted = admitted
        """Groups admitted so far (consumed ones included)."""
        self.version = version
        """The learner's current policy version."""
        self._changed = asyncio.Condition()

    def capacity(self) -> int:
        """How many groups may have been admitted at the current version."""
        return (self.version + self.max_staleness + 1) * self.groups_per_step

    async def admit(self) -> int:
        """Wait for room, take it; returns the version at admission."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.admitted < self.capacity())
            self.admitted += 1
            return self.version

    async def refund(self) -> None:
        """A group admitted will never be trained (set aside): its room goes to another."""
        async with self._changed:
            self.admitted -= 1
            self._changed.notify_all()

    async def advance(self, version: int) -> None:
        """The learner published `version`: more groups may start."""
        async with self._changed:
            self.version = version
            self._changed.notify_all()
