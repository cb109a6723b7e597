"""The server's one torch thread: jobs run in submission order, and batchable jobs that are
queued together run as one call.

A job with a batch key (e.g. sampling requests on the same weights) is taken off the queue
together with every later queued job of the same key, up to a limit, and the group runs in one
call of its batch function: several clients' samples on one base model become one forward pass.
While it runs, the batch function may `take` the jobs of its key queued since.
Batchable jobs may thus run before unrelated jobs submitted between them; callers give keys only
to jobs that commute with everything else (sampling from frozen weights).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class _Job:
    run: Callable[[], None] | None
    """A plain job."""
    key: Hashable | None = None
    """Batch key (None: runs alone)."""
    item: Any = None
    """The batchable job's payload, handed to `run_batch` with its group's."""
    run_batch: Callable[[list[Any]], None] | None = None
    """Runs a group of payloads of one key."""
    size: int = 1
    """Weight of the payload against the batch limit (e.g. its sequences)."""


class Worker:
    """A daemon thread running jobs; `shutdown` drops the queued ones and waits for the running."""

    def __init__(self, name: str = "tinker-torch", max_batch: int = 64):
        self.max_batch = max_batch
        """Most total `size` in one batch (a single larger job still runs, alone)."""
        self._jobs: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], None]) -> None:
        """Queue `fn` (its exceptions are the caller's business: catch them inside)."""
        self._put(_Job(run=fn))

    def submit_batchable(
        self, key: Hashable, item: Any, run_batch: Callable[[list[Any]], None], size: int = 1
    ) -> None:
        """Queue `item`; it runs through `run_batch` together with the other queued items of
        `key` (in submission order)."""
        self._put(_Job(run=None, key=key, item=item, run_batch=run_batch, size=size))

    def take(self, key: Hashable, room: int) -> list[Any]:
        """Remove and return the queued items of `key` (oldest first) whose sizes fit in
        `room`: a running batch takes in requests that arrived while it ran."""
        with self._cond:
            taken, rest, total = [], deque(), 0
            for job in self._jobs:
                if job.key == key and total + job.size <= room:
                    taken.append(job.item)
                    total += job.size
                else:
                    rest.append(job)
            self._jobs = rest
        return taken

    def call(self, fn: Callable[[], Any]) -> Future[Any]:
        """Run `fn` on the worker; a future of its result (await with `asyncio.wrap_future`)."""
        future: Future[Any] = Future()

        def job() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn())
            except BaseException as e:  # handed to the awaiting caller
                future.set_exception(e)

        self.submit(job)
        return future

    def shutdown(self) -> None:
        """Drop the queued jobs, let the running one finish, stop the thread."""
        with self._cond:
            self._closed = True
            self._jobs.clear()
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _put(self, job: _Job) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("the server is shutting down")
            self._jobs.append(job)
            self._cond.notify()

    def _take(self) -> list[_Job] | None:
        """The next job and, if batchable, the queued jobs that join it; None once closed."""
        with self._cond:
            while not self._jobs and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            first = self._jobs.popleft()
            if first.key is None:
                return [first]
            group, total, rest = [first], first.size, deque()
            while self._jobs:
                job = self._jobs.popleft()
                if job.key == first.key and total + job.size <= self.max_batch:
                    group.append(job)
                    total += job.size
                else:
                    rest.append(job)
            self._jobs = rest
            return group

    def _loop(self) -> None:
        while (group := self._take()) is not None:
            first = group[0]
            try:
                if first.run is not None:
                    first.run()
                else:
                    assert first.run_batch is not None
                    first.run_batch([job.item for job in group])
            except Exception:  # jobs report their own failures; this one escaped: keep going
                log.exception("a tinker worker job failed")
