"""`SandboxPool`: warm sandboxes for one spec, a cap on how many live at once, acquire latency.

A sandbox is never handed out twice: `release()` closes it (files and processes of one episode
must not leak into the next) and a replacement starts in the background, so the next
`acquire()` finds a warm one.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from skyrl_sdk.sandboxes.base import Sandbox
from skyrl_sdk.sandboxes.factory import Backend, create_sandbox
from skyrl_sdk.sandboxes.spec import SandboxError, SandboxSpec


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True)
class PoolStats:
    """A snapshot of a pool."""

    acquired: int
    """Sandboxes handed out so far."""
    live: int
    """Sandboxes alive now (warm + in use + starting)."""
    warm: int
    """Started sandboxes waiting to be acquired."""
    in_use: int
    """Sandboxes acquired and not yet released."""
    acquire_p50_ms: float
    """Median time `acquire()` took."""
    acquire_p99_ms: float
    """99th percentile of `acquire()` time."""
    acquire_max_ms: float
    """Slowest `acquire()`."""


class SandboxPool:
    """Pre-starts sandboxes for one spec and bounds how many are alive at once.

    Args:
        spec: The spec every sandbox of the pool gets.
        backend: Backend of the sandboxes.
        warm: How many started sandboxes to keep ready.
        max_live: Upper bound on sandboxes alive at once (warm, in use or starting);
            `acquire()` waits when it is reached.
    """

    def __init__(
        self,
        spec: SandboxSpec | None = None,
        backend: str | Backend = Backend.BWRAP,
        *,
        warm: int = 2,
        max_live: int = 8,
    ):
        if warm < 0 or max_live < 1 or warm > max_live:
            raise ValueError(
                f"need 0 <= warm <= max_live and max_live >= 1; got {warm=}, {max_live=}"
            )
        self.spec = spec or SandboxSpec()
        self.backend = backend
        self.warm_target = warm
        self.max_live = max_live
        self._free = max_live  # slots not held by any sandbox
        self._warm: deque[Sandbox] = deque()
        self._in_use: set[Sandbox] = set()
        self._filling: set[asyncio.Task[None]] = set()
        self._waiting = 0
        self._cond = asyncio.Condition()
        self._latencies_ms: list[float] = []
        self._closed = False
        self.last_error: BaseException | None = None
        """The last error of a background start, if any (acquire starts afresh then)."""

    async def start(self) -> SandboxPool:
        """Start the warm sandboxes and wait until they are ready."""
        self._refill()
        if self._filling:
            await asyncio.gather(*self._filling, return_exceptions=True)
        return self

    async def __aenter__(self) -> SandboxPool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def acquire(self, timeout: float | None = None) -> Sandbox:
        """A started sandbox: a warm one if any, else a new one once a slot is free."""
        if self._closed:
            raise SandboxError("the pool is closed")
        started = time.perf_counter()
        async with self._cond:
            self._waiting += 1
            try:
                await asyncio.wait_for(
                    self._cond.wait_for(lambda: bool(self._warm) or self._free > 0), timeout
                )
            finally:
                self._waiting -= 1
            if self._warm:
                sandbox = self._warm.popleft()
            else:
                self._free -= 1
                sandbox = None
        if sandbox is None:
            try:
                sandbox = await create_sandbox(self.spec, self.backend)
            except BaseException:
                await self._give_back_slot()
                raise
        self._in_use.add(sandbox)
        self._latencies_ms.append((time.perf_counter() - started) * 1000)
        self._refill()
        return sandbox

    async def release(self, sandbox: Sandbox) -> None:
        """Close a sandbox from `acquire()`; its slot goes to a waiter or a warm replacement."""
        self._in_use.discard(sandbox)
        try:
            await sandbox.close()
        finally:
            await self._give_back_slot()
            self._refill()

    @contextlib.asynccontextmanager
    async def sandbox(self, timeout: float | None = None) -> AsyncIterator[Sandbox]:
        """`async with pool.sandbox() as sb:` acquires, then releases even on errors."""
        sandbox = await self.acquire(timeout)
        try:
            yield sandbox
        finally:
            await self.release(sandbox)

    def stats(self) -> PoolStats:
        """Counts and acquire latencies so far."""
        lat = self._latencies_ms
        return PoolStats(
            acquired=len(lat),
            live=self.max_live - self._free,
            warm=len(self._warm),
            in_use=len(self._in_use),
            acquire_p50_ms=percentile(lat, 50),
            acquire_p99_ms=percentile(lat, 99),
            acquire_max_ms=max(lat) if lat else math.nan,
        )

    async def close(self) -> None:
        """Stop refilling and close every sandbox of the pool (also ones still in use)."""
        self._closed = True
        for task in list(self._filling):
            task.cancel()
        await asyncio.gather(*self._filling, return_exceptions=True)
        doomed = [*self._warm, *self._in_use]
        self._warm.clear()
        self._in_use.clear()
        await asyncio.gather(*(s.close() for s in doomed), return_exceptions=True)

    async def _give_back_slot(self) -> None:
        async with self._cond:
            self._free += 1
            self._cond.notify_all()

    def _refill(self) -> None:
        # Waiting acquirers get free slots first; refills only use slots nobody waits for.
        while (
            not self._closed
            and self._waiting == 0
            and self._free > 0
            and len(self._warm) + len(self._filling) < self.warm_target
        ):
            self._free -= 1
            task = asyncio.get_running_loop().create_task(self._fill_one())
            self._filling.add(task)
            task.add_done_callback(self._filling.discard)

    async def _fill_one(self) -> None:
        try:
            sandbox = await create_sandbox(self.spec, self.backend)
        except BaseException as e:
            self.last_error = e
            await self._give_back_slot()
            if isinstance(e, asyncio.CancelledError):
                raise
            return
        async with self._cond:
            if self._closed:
                await sandbox.close()
                return
            self._warm.append(sandbox)
            self._cond.notify_all()
