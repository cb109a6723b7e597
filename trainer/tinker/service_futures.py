"""Futures of the Tinker service: queue work on the worker, settle it, cancel it.

Every training or sampling request gets a future (a `store.FutureStore` row) at once; its work
runs on the one torch worker thread. A job's outcome is stored as the JSON the SDK reads: a
reply model's `body()`, a backend result dict, or `wire.RequestFailed` for an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.backend import Cancelled
from skyrl_sdk.trainer.tinker.errors import ServiceError, Status
from skyrl_sdk.trainer.tinker.store import FutureState, FutureStore
from skyrl_sdk.trainer.tinker.worker import Worker

Outcome = wire.Reply | dict[str, Any]
"""What a job returns: a reply model, or a backend result (forward_backward, optim_step)."""


@dataclass(frozen=True)
class Queued:
    """A request with a future, ready to go on the worker."""

    request_id: str
    """Its future's id."""
    start: Callable[[], None]
    """Puts its job on the worker (called in seq order for training requests)."""


def failure(outcome: Exception) -> wire.RequestFailed:
    """How a job's exception reaches the client: the request's fault or the server's."""
    if isinstance(outcome, ValueError | KeyError):
        msg = outcome.args[0] if isinstance(outcome, KeyError) and outcome.args else outcome
        return wire.RequestFailed(error=str(msg), category=wire.FailureCategory.USER)
    if isinstance(outcome, ServiceError):  # a model or sampler lost in a restart
        return wire.RequestFailed(error=outcome.message, category=wire.FailureCategory.USER)
    return wire.RequestFailed(  # every failure must reach the client
        error=f"{type(outcome).__name__}: {outcome}", category=wire.FailureCategory.SERVER
    )


class Futures:
    """Request futures and the worker that settles them."""

    def __init__(self, store: FutureStore, worker: Worker):
        self.store = store
        self.worker = worker
        self.cancelled: set[str] = set()
        """Request ids the client cancelled (skipped, or stopped at the next token)."""
        self.running: set[str] = set()
        """The requests the worker is executing."""
        self.closing = False
        """Set when the server shuts down."""

    def settle(
        self, request_id: str, outcome: Any, after: Callable[[], None] | None = None
    ) -> None:
        """Record a job's result, or its exception as the failure the SDK raises; `after`
        runs once a result is recorded (or failed to be)."""
        if isinstance(outcome, Cancelled):
            if not self.closing:
                self.store.cancel(request_id)
        elif isinstance(outcome, Exception):
            self.store.finish(request_id, failure(outcome).body(), failed=True)
        else:
            body = outcome.body() if isinstance(outcome, wire.Reply) else outcome
            try:
                self.store.finish(request_id, body)  # the poller is answered first
            finally:  # the model changed whether or not its result could be recorded
                if after is not None:
                    after()

    def run(
        self,
        kind: str,
        model_id: str | None,
        fn: Callable[[], Outcome],
        *,
        after: Callable[[], None] | None = None,
    ) -> Queued:
        """A new future for `fn`, not queued yet (`Queued.start` queues it).

        `after`: runs when `fn` succeeded (a training request that changed its model)."""
        request_id = self.store.create(kind, model_id)

        def job() -> None:
            if request_id in self.cancelled:
                self.cancelled.discard(request_id)
                return
            self.running.add(request_id)
            try:
                outcome: Any = fn()
            except Exception as e:  # recorded as the request's failure
                outcome = e
            try:
                self.settle(request_id, outcome, after)
            finally:
                self.running.discard(request_id)
                self.cancelled.discard(request_id)

        def start() -> None:
            self.worker.submit(job)

        return Queued(request_id, start)

    def start(self, kind: str, model_id: str, fn: Callable[[], Outcome]) -> wire.FutureReply:
        """Queue `fn` now (not in seq order); the SDK's future reply."""
        queued = self.run(kind, model_id, fn)
        queued.start()
        return wire.FutureReply(request_id=queued.request_id, model_id=model_id)

    def cancel(self, request_id: str) -> wire.CancelReply:
        """Cancel a sampling request: skipped if queued, stopped at its next token if running."""
        record = self.store.get(request_id)
        if record is None:
            raise ServiceError(Status.NOT_FOUND, f"unknown request_id {request_id!r}")
        if record.kind != "sample":
            raise ServiceError(
                Status.BAD_REQUEST,
                f"only sampling requests can be cancelled; {request_id} is {record.kind}",
            )
        if record.state is not FutureState.PENDING:
            return wire.CancelReply(
                request_id=request_id, cancelled=False, state=record.state.value
            )
        self.cancelled.add(request_id)
        self.store.cancel(request_id)
        return wire.CancelReply(
            request_id=request_id, cancelled=True, state=FutureState.CANCELLED.value
        )

    def stop(self) -> None:
        """Stop the worker: a running sample stops (left pending: "lost" after a restart),
        other requests finish."""
        self.closing = True
        for request_id in list(self.running):
            record = self.store.get(request_id)
            if record is not None and record.kind == "sample":
                self.cancelled.add(request_id)
        self.worker.shutdown()
