"""Fair admission to a shared engine's batch: a policy of the scheduler, not of any server.

An engine that many clients share (`skyrl serve` in front of a `LocalEngine`, command agents
each with their own session) decodes one running batch. Admitted first-come-first-served, one
client sending n=16 max_tokens=2000 requests in a loop holds every row, and another client's
16-token request waits for the hog's batch to end (0.47 s became 71 s in issue 23). The
engine's admission asks a `FairQueue` for its next request instead of popping a FIFO:

- requests are queued per **tenant** (the engine uses the generation context's `episode_id`,
  which `skyrl serve` sets to the session id); a request without a context is untenanted:
  the engine's own in-process callers (benchmarks, training rollouts that pass no context) are
  trusted and capped by nothing but the batch;
- a tenant holds at most `FairnessLimits.max_rows` rows of the running batch (by default half
  of it): the rest of its requests, `n`'s choices included (each choice is one request), wait
  while the batch keeps room for others;
- at most `FairnessLimits.max_queued` of a tenant's requests wait; one more raises
  `TenantQueueFull` (`skyrl serve` answers 429), so a tenant cannot grow the queue without
  bound; `room` lets a caller check all of a request's `n` choices before submitting any;
- among the tenants that are under their cap, the one holding the fewest rows goes first,
  ties to the oldest waiting request: a newcomer is admitted at the next step with a free
  row, ahead of a hog's queued choices.

Admission alone does not keep a newcomer fast: on a CPU a decoding step costs more the more
rows it advances, so a 16-token request beside a hog's 8 rows decoded 2.5x slower than alone.
Fairness also applies **per decoding step** (`rows_to_step`): while rows of several tenants
run, each tenant advances at most `max(FairnessLimits.step_rows, the fewest rows any running
tenant holds)` rows per step; its other rows sit that step out (they keep their keys and
values and simply do not advance; the ones that sat out most go next). Tenants with equal rows
(a training run's episodes, one row each) never sit out, one tenant alone never does, and
untenanted rows always advance. A row's tokens do not depend on the steps it sat out.

There is no preemption: a row runs until it ends, so when several tenants each hold their cap
and the batch is full, a newcomer waits for the next row to end (bounded by the running rows'
`max_tokens`). The queue knows nothing of torch or HTTP, so the policy stays with whichever
component schedules the batch.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter, deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from skyrl_sdk.agents.policy import PolicyError

T = TypeVar("T")

DEFAULT_MAX_QUEUED = 64
"""Most requests one tenant may have waiting (four n=16 requests)."""
DEFAULT_STEP_ROWS = 1
"""Rows per step each tenant may always advance while several tenants run (see `rows_to_step`):
1 gives every running tenant the same rows per step as the smallest one, the cheapest steps
for a newcomer beside a hog on a CPU, where a step's cost grows with its rows."""


@dataclass(frozen=True)
class FairnessLimits:
    """Per-tenant caps of a shared batch (None: no cap)."""

    max_rows: int | None
    """Most rows of the running batch one tenant holds at once."""
    max_queued: int | None = DEFAULT_MAX_QUEUED
    """Most of one tenant's requests waiting for a row; one more raises `TenantQueueFull`."""
    step_rows: int | None = DEFAULT_STEP_ROWS
    """While rows of several tenants run, each advances at most `max(step_rows, the fewest
    rows any running tenant holds)` of them per decoding step (`rows_to_step`); None: every
    row advances every step."""

    def __post_init__(self) -> None:
        for name in ("max_rows", "max_queued", "step_rows"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 (or None for no cap), got {value}")

    @classmethod
    def for_batch(cls, max_batch_size: int) -> FairnessLimits:
        """The default for a batch of `max_batch_size` rows: a tenant holds at most half."""
        return cls(max_rows=max(1, max_batch_size // 2))


def rows_to_step(
    tenants: Sequence[Hashable | None], skipped: Sequence[int], step_rows: int | None
) -> list[int]:
    """Which running rows advance in the next decoding step (indices into `tenants`, in order).

    `tenants[i]` is row i's tenant (None: untenanted, which always advances) and `skipped[i]`
    how many steps it has sat out so far. With rows of fewer than two tenants (None counts as
    one) or `step_rows` None, every row advances. Otherwise each tenant advances at most
    `max(step_rows, the fewest rows any tenant holds)` rows, those that sat out most first
    (ties to the lower index), so a tenant's rows progress evenly and a small tenant's steps
    stay as cheap as a small batch's.
    """
    counts = Counter(tenants)
    if step_rows is None or len(counts) < 2:
        return list(range(len(tenants)))
    share = max(step_rows, min(counts.values()))
    over = {t for t, n in counts.items() if t is not None and n > share}
    if not over:
        return list(range(len(tenants)))
    chosen = [i for i, t in enumerate(tenants) if t not in over]
    for tenant in over:
        rows = [i for i, t in enumerate(tenants) if t == tenant]
        rows.sort(key=lambda i: (-skipped[i], i))
        chosen += rows[:share]
    return sorted(chosen)


class TenantQueueFull(PolicyError):
    """A tenant already has its cap of requests waiting (`skyrl serve` answers 429)."""

    def __init__(self, tenant: Hashable, limit: int):
        super().__init__(
            f"session {tenant!r} already has {limit} requests waiting for the model "
            "(the per-session queue cap); wait for some to finish"
        )
        self.tenant = tenant
        """Whose queue is full."""
        self.limit = limit
        """The cap."""


class FairQueue(Generic[T]):
    """Per-tenant queues with capped shares (thread-safe; see the module docstring).

    `alive(item)` tells whether a queued item is still wanted: dead ones (cancelled by their
    caller) are dropped instead of counting against their tenant's queue cap.
    """

    def __init__(self, limits: FairnessLimits, alive: Callable[[T], bool] = lambda _: True):
        self.limits = limits
        """The caps."""
        self._alive = alive
        self._cond = threading.Condition()
        self._queues: dict[Hashable | None, deque[tuple[int, T]]] = {}
        self._seq = itertools.count()

    def room(self, tenant: Hashable | None) -> int | None:
        """How many more of `tenant`'s requests may wait now (None: no cap)."""
        cap = self.limits.max_queued
        if tenant is None or cap is None:
            return None
        with self._cond:
            return max(0, cap - self._purge(tenant))

    def put(self, tenant: Hashable | None, item: T) -> None:
        """Queue `item` for `tenant`; `TenantQueueFull` if its queue is at the cap."""
        cap = self.limits.max_queued
        with self._cond:
            if tenant is not None and cap is not None and self._purge(tenant) >= cap:
                raise TenantQueueFull(tenant, cap)
            self._queues.setdefault(tenant, deque()).append((next(self._seq), item))
            self._cond.notify()

    def take(self, running: Mapping[Hashable, int], timeout: float = 0.0) -> T | None:
        """The next request to admit given each tenant's `running` rows (None: none may go
        now); waits up to `timeout` seconds for one to arrive."""
        with self._cond:
            item = self._pick(running)
            if item is None and timeout > 0:
                self._cond.wait(timeout)
                item = self._pick(running)
            return item

    def wake(self) -> None:
        """Wake a `take` that is waiting (the engine is closing)."""
        with self._cond:
            self._cond.notify_all()

    def drain(self) -> list[T]:
        """Remove and return everything queued."""
        with self._cond:
            items = [item for q in self._queues.values() for _, item in q]
            self._queues.clear()
            return items

    def __len__(self) -> int:
        with self._cond:
            return sum(len(q) for q in self._queues.values())

    def _purge(self, tenant: Hashable | None) -> int:
        """Drop `tenant`'s dead items; how many remain (lock held)."""
        queue = self._queues.get(tenant)
        if not queue:
            return 0
        if not all(self._alive(item) for _, item in queue):
            queue = deque(entry for entry in queue if self._alive(entry[1]))
            self._queues[tenant] = queue
        return len(queue)

    def _pick(self, running: Mapping[Hashable, int]) -> T | None:
        """Pop the head of the eligible tenant holding the fewest rows (oldest first)."""
        cap = self.limits.max_rows
        best: tuple[int, int, Hashable | None] | None = None
        for tenant, queue in list(self._queues.items()):
            if not queue:
                del self._queues[tenant]
                continue
            rows = running.get(tenant, 0)
            if tenant is not None and cap is not None and rows >= cap:
                if not self._alive(queue[0][1]):  # a dead head still leaves: it costs no row
                    return queue.popleft()[1]
                continue
            key = (rows, queue[0][0], tenant)
            if best is None or key[:2] < best[:2]:
                best = key
        if best is None:
            return None
        queue = self._queues[best[2]]
        item = queue.popleft()[1]
        if not queue:
            del self._queues[best[2]]
        return item
