"""The scheduler: who joins the running batch, and what the next step computes.

Between two steps the worker asks the scheduler for requests to admit (`next_request`, then
`admit`, one at a time: a request that finishes on its first token takes no row, so the next
one may), and then for the step's plan (`plan_step`), a frozen `StepPlan` the runner executes.
Two schedulers, one per `Scheduling`:

- `ContinuousScheduler` (the default): requests join at the next step up to `max_batch_size`
  rows and leave the moment they finish. While a batch runs, a newcomer whose uncached prompt
  is short enough rides the next decoding step (a mixed step, `packed_step`) instead of a
  prefill pass of its own. While several tenants run, each advances only its fair share of
  rows per step (`fairness.rows_to_step`).
- `StaticScheduler`, the baseline of `skyrl bench engine`: a batch takes the requests waiting
  when it starts and runs until its last request finishes (finished rows stay in it), and
  newcomers wait for the next batch.

Admission order is the fairness policy's (`fairness.FairQueue`): a tenant at its share of the
batch waits, and the tenant holding the fewest rows goes first.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from skyrl_sdk.agents.engine.batch import RunningBatch
from skyrl_sdk.agents.engine.fairness import FairnessLimits, FairQueue, rows_to_step
from skyrl_sdk.agents.engine.packed_step import MAX_MIXED_CHUNK
from skyrl_sdk.agents.engine.prefix_cache import NOTHING_CACHED, CachedPrefix, PrefixCache
from skyrl_sdk.agents.engine.request import Request

IDLE_WAIT_S = 0.05
"""How long the worker waits for a request when nothing runs, before going round (weight
updates, close)."""


class Scheduling(enum.Enum):
    """How `LocalEngine` forms batches."""

    CONTINUOUS = "continuous"
    """Requests join the running batch at the next step and leave it when they finish."""
    STATIC = "static"
    """A batch takes the requests waiting when it starts and runs until all of them finish
    (the baseline of `skyrl bench engine`)."""


class Prefill(enum.Enum):
    """Where an admitted request's prompt is computed."""

    ALONE = "alone"
    """In a forward pass of its own (or none: a wholly cached prompt), before the step."""
    MIXED = "mixed"
    """Inside the next decoding step, packed after the running rows (`packed_step`)."""


@dataclass(frozen=True, eq=False)
class Admission:
    """One request the scheduler admits, with what the prefix cache holds for it."""

    request: Request
    """The request."""
    cached: CachedPrefix
    """Its reusable prefix (`PrefixCache.reusable`)."""
    prefill: Prefill
    """Where its uncached prompt tokens are computed."""


class StepKind(enum.Enum):
    """The shape of a step's forward pass."""

    DECODE = "decode"
    """One token for every row of the batch."""
    SUBSET = "subset"
    """One token for the fair share's rows only; the others sit the step out."""
    MIXED = "mixed"
    """A decoding step that also prefills a newcomer (`packed_step`)."""


@dataclass(frozen=True, eq=False)
class StepPlan:
    """What one step computes (the runner executes it)."""

    kind: StepKind
    """The forward pass's shape."""
    decode: tuple[int, ...] | None
    """Slots that advance (None: every occupied slot)."""
    sitting_out: tuple[int, ...] = ()
    """Live slots that sit this step out (their `skipped` grows)."""
    newcomer: Admission | None = None
    """The request prefilled inside this step (`StepKind.MIXED`)."""


class Scheduler(abc.ABC):
    """Admission and step planning over a `FairQueue` (see the module docstring)."""

    frees_finished_rows: ClassVar[bool]
    """Whether a finished row leaves at once (else when the whole batch is done)."""

    def __init__(
        self,
        queue: FairQueue[Request],
        limits: FairnessLimits,
        max_batch_size: int,
        prefix_cache: PrefixCache,
    ):
        self.queue = queue
        """The waiting requests, per tenant (the fairness policy's admission order)."""
        self.limits = limits
        """The fairness caps (rows, queue, rows per step)."""
        self.max_batch_size = max_batch_size
        """Most rows of the running batch."""
        self.prefix_cache = prefix_cache
        """Where admission looks up a prompt's reusable prefix."""
        self.idle_wait_s = IDLE_WAIT_S
        """How long `next_request` waits for a request when nothing runs (0: a synchronous
        driver, `sync.SyncEngine`, which knows what it queued)."""

    def next_request(self, batch: RunningBatch, joining: Sequence[Request]) -> Request | None:
        """The next request to admit, or None (no room, or none may go now). With nothing
        running or joining it waits a little for one (the worker then goes round: weight
        updates, close)."""
        if batch.running + len(joining) >= self.max_batch_size:
            return None
        rows = batch.tenants()
        rows.update(j.tenant for j in joining)
        return self.queue.take(rows, timeout=0 if batch.rows or joining else self.idle_wait_s)

    def admit(self, r: Request, batch: RunningBatch, joining: Sequence[Request]) -> Admission:
        """`r`'s admission: its cached prefix and where the rest of its prompt is computed."""
        if r.options.prompt_logprobs:  # every position's logits: the whole prompt, alone
            return Admission(r, NOTHING_CACHED, Prefill.ALONE)
        cached = self.prefix_cache.reusable(r.prompt)
        mixed = self._mixes(cached, len(r.prompt), batch, joining)
        return Admission(r, cached, Prefill.MIXED if mixed else Prefill.ALONE)

    @abc.abstractmethod
    def _mixes(
        self, cached: CachedPrefix, n: int, batch: RunningBatch, joining: Sequence[Request]
    ) -> bool:
        """Whether a newcomer of `n` prompt tokens rides the next decoding step."""

    @abc.abstractmethod
    def plan_step(self, batch: RunningBatch, newcomer: Admission | None) -> StepPlan:
        """The next step over `batch` (with `newcomer` prefilled in it, if any)."""


class StaticScheduler(Scheduler):
    """A batch runs until its last request finishes; newcomers wait for the next batch."""

    frees_finished_rows = False

    def next_request(self, batch: RunningBatch, joining: Sequence[Request]) -> Request | None:
        if batch.rows:
            return None
        return super().next_request(batch, joining)

    def _mixes(
        self, cached: CachedPrefix, n: int, batch: RunningBatch, joining: Sequence[Request]
    ) -> bool:
        return False

    def plan_step(self, batch: RunningBatch, newcomer: Admission | None) -> StepPlan:
        assert newcomer is None
        return StepPlan(StepKind.DECODE, None)


class ContinuousScheduler(Scheduler):
    """Requests join at the next step and leave when they finish; mixed steps and the fair
    share of a step (see the module docstring)."""

    frees_finished_rows = True

    def __init__(
        self,
        queue: FairQueue[Request],
        limits: FairnessLimits,
        max_batch_size: int,
        prefix_cache: PrefixCache,
        *,
        mixed_steps: bool,
    ):
        super().__init__(queue, limits, max_batch_size, prefix_cache)
        self.mixed_steps = mixed_steps
        """Whether a newcomer joining a running batch is prefilled inside its next step."""

    def _mixes(
        self, cached: CachedPrefix, n: int, batch: RunningBatch, joining: Sequence[Request]
    ) -> bool:
        mixable = cached.next_logits is None and n - cached.length <= MAX_MIXED_CHUNK
        return self.mixed_steps and bool(batch.rows) and not joining and mixable

    def plan_step(self, batch: RunningBatch, newcomer: Admission | None) -> StepPlan:
        stepping = self._stepping(batch, newcomer.request if newcomer is not None else None)
        kind = StepKind.MIXED if newcomer is not None else StepKind.DECODE
        if stepping is None:
            return StepPlan(kind, None, newcomer=newcomer)
        decode, sitting = stepping
        if newcomer is None:
            kind = StepKind.SUBSET
        return StepPlan(kind, decode, sitting, newcomer)

    def _stepping(
        self, batch: RunningBatch, newcomer: Request | None
    ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """(the slots that advance, the live ones that sit out) under the fair share of a
        step (`fairness.rows_to_step`; `newcomer`, prefilled in this step, always advances and
        counts for its tenant); None: every slot advances (the plain step)."""
        if self.limits.step_rows is None:
            return None
        live = batch.live()
        rows: list[Request] = [batch.rows[i] for i in live]  # type: ignore[misc]
        if newcomer is not None:
            rows.append(newcomer)
        tenants = [r.tenant for r in rows]
        if len(set(tenants)) < 2:
            return None
        # The newcomer must advance (its prefill is this step): it ranks first.
        skipped = [r.skipped for r in rows[: len(live)]] + [1 << 62] * (newcomer is not None)
        chosen = rows_to_step(tenants, skipped, self.limits.step_rows)
        if len(chosen) == len(rows):
            return None
        stepping = set(chosen)
        sitting = tuple(live[k] for k in range(len(live)) if k not in stepping)
        return tuple(live[k] for k in chosen if k < len(live)), sitting


def make_scheduler(
    scheduling: Scheduling,
    queue: FairQueue[Request],
    limits: FairnessLimits,
    max_batch_size: int,
    prefix_cache: PrefixCache,
    *,
    mixed_steps: bool,
) -> Scheduler:
    """The scheduler of `scheduling`."""
    if scheduling is Scheduling.STATIC:
        return StaticScheduler(queue, limits, max_batch_size, prefix_cache)
    return ContinuousScheduler(queue, limits, max_batch_size, prefix_cache, mixed_steps=mixed_steps)
