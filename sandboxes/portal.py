"""A process-wide background event loop that owns sandboxes used from synchronous code.

Sandboxes hold asyncio pipes, which belong to the loop that created them. Code that must offer
both sync and async entry points (Gymnasium's `reset`/`step` next to `areset`/`astep`) keeps its
sandboxes on this loop: sync callers block on `run`, async callers `await arun` and never
block their own loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="sandboxes-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the background loop and wait for it (from a thread not in that loop)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("BackgroundLoop.run() called from its own loop; await arun()")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` on the background loop from any event loop (cancellation propagates)."""
        if asyncio.get_running_loop() is self.loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))


_lock = threading.Lock()
_instance: BackgroundLoop | None = None


def background_loop() -> BackgroundLoop:
    """The shared background loop (started on first use)."""
    global _instance
    with _lock:
        if _instance is None:
            _instance = BackgroundLoop()
        return _instance
