"""Sampling requests of the Tinker service: queued, batched, bounded, abandoned.

Requests on the same frozen weights decode as one batch: those queued together start it,
those arriving while it decodes join it at the next token, and each is answered as soon as it
ends. The queued work (`num_samples x max_tokens`) is bounded (429 past it), and a request
nobody polls for `abandon_after_s` is cancelled.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from skyrl_sdk.sampling_limits import sampled_tokens_problem
from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.backend import BaseModels, SampleCall, Sampler
from skyrl_sdk.trainer.tinker.errors import ServiceError, Status
from skyrl_sdk.trainer.tinker.service_config import ServerConfig
from skyrl_sdk.trainer.tinker.service_futures import Futures
from skyrl_sdk.trainer.tinker.service_samplers import Samplers, Source
from skyrl_sdk.trainer.tinker.store import FutureState


@dataclass
class _SampleWork:
    """A sampling request not settled yet: its share of the queued-work bound, and when a
    client last showed interest in it."""

    cost: int
    """`num_samples x max_tokens`."""
    seen: float
    """`time.monotonic()` of its submission or of the end of its last poll."""
    polling: int = 0
    """retrieve_future calls waiting on it now."""


@dataclass(frozen=True)
class _SampleJob:
    """A queued sampling request."""

    request_id: str
    """Its future's id."""
    key: Hashable
    """The weights it samples (requests with the same key batch together)."""
    get: Callable[[], Sampler]
    """Its sampler (run on the worker)."""
    call: SampleCall
    """What to sample."""


class Sampling:
    """The sampling requests queued or running."""

    def __init__(
        self, config: ServerConfig, futures: Futures, samplers: Samplers, bases: BaseModels
    ):
        self.config = config
        self.futures = futures
        self.samplers = samplers
        self.bases = bases
        self.sample_work: dict[str, _SampleWork] = {}
        """Sampling requests not known to be settled (pruned by `queued_sample_tokens` and
        `reap_abandoned`)."""

    def queued_sample_tokens(self) -> int:
        """Sampling work (`num_samples x max_tokens`) queued or running now."""
        store = self.futures.store
        for request_id in list(self.sample_work):
            record = store.get(request_id)
            if record is None or record.state is not FutureState.PENDING:
                del self.sample_work[request_id]
        return sum(w.cost for w in self.sample_work.values())

    def reap_abandoned(self, now: float | None = None) -> list[str]:
        """Cancel the sampling requests nobody has polled for `abandon_after_s` (skipped if
        queued, stopped at the next token if running); their ids."""
        now = time.monotonic() if now is None else now
        limit = self.config.abandon_after_s
        reaped = []
        self.queued_sample_tokens()  # forget the settled ones
        for request_id, work in list(self.sample_work.items()):
            if work.polling or now - work.seen <= limit:
                continue
            self.futures.cancelled.add(request_id)
            reason = (
                f"cancelled: nobody polled this sampling request for {limit:g} s "
                "(the server's abandon_after_s)"
            )
            if self.futures.store.cancel(request_id, reason):
                reaped.append(request_id)
            del self.sample_work[request_id]
        return reaped

    @contextmanager
    def polled(self, request_id: str) -> Iterator[None]:
        """While a retrieve_future waits on `request_id`: a polled request is not abandoned."""
        work = self.sample_work.get(request_id)
        if work is not None:
            work.polling += 1
        try:
            yield
        finally:
            if work is not None:
                work.polling -= 1
                work.seen = time.monotonic()

    def source(self, req: wire.SampleRequest) -> Source:
        """The weights a sampling request samples (400 if it names none)."""
        if req.sampling_session_id is not None:
            return self.samplers.sampler_source(req.sampling_session_id)
        if req.model_path is not None:
            path = req.model_path
            return ("path", uuid.uuid4().hex), lambda: self.samplers.load_sampler(path)
        if req.base_model is not None:
            try:
                name = self.bases.spec(req.base_model).name
            except KeyError as e:
                raise ServiceError(Status.BAD_REQUEST, e.args[0]) from e
            return ("base", name), lambda: self.samplers.base_sampler(name)
        raise ServiceError(
            Status.BAD_REQUEST, "asample needs sampling_session_id, model_path or base_model"
        )

    def asample(self, req: wire.SampleRequest) -> wire.FutureReply:
        """Queue a sampling request; it joins the queued ones on the same weights."""
        key, get = self.source(req)
        problem = sampled_tokens_problem(req.num_samples, req.sampling_params.token_limit())
        if problem is not None:  # the wire model refuses it already; kept for direct callers
            raise ServiceError(Status.BAD_REQUEST, problem)
        queued, bound = self.queued_sample_tokens(), self.config.max_queued_sample_tokens
        if queued + req.work() > bound:
            raise ServiceError(
                Status.BUSY,
                f"the server already holds {queued} tokens of sampling work (its bound is "
                f"{bound}, num_samples x max_tokens summed); retry when some has finished",
            )
        call = SampleCall(
            prompt=req.prompt.tokens(),
            num_samples=req.num_samples,
            params=req.sampling_params,
            prompt_logprobs=req.prompt_logprobs,
        )
        request_id = self.futures.store.create("sample", None)
        self.sample_work[request_id] = _SampleWork(req.work(), time.monotonic())
        job = _SampleJob(request_id, key, get, call)
        self.futures.worker.submit_batchable(key, job, self._run_samples, size=req.num_samples)
        return wire.FutureReply(
            request_id=request_id,
            sample_sequence_ids=[f"{request_id}:{i}" for i in range(req.num_samples)],
        )

    def _unless_cancelled(self, jobs: list[_SampleJob]) -> list[_SampleJob]:
        """The jobs still wanted (a cancelled one is dropped and forgotten)."""
        live = []
        for job in jobs:
            if job.request_id in self.futures.cancelled:
                self.futures.cancelled.discard(job.request_id)
            else:
                live.append(job)
        return live

    def _run_samples(self, jobs: list[_SampleJob]) -> None:
        """Decode queued sampling requests on the same weights as one batch (on the worker);
        requests on them that arrive meanwhile join it, and each is answered when it ends."""
        live = self._unless_cancelled(jobs)
        if not live:
            return
        futures = self.futures
        ids: dict[int, str] = {}
        numbers = itertools.count()

        def admit(batch: list[_SampleJob]) -> list[tuple[int, SampleCall]]:
            out = []
            for job in batch:
                i = next(numbers)
                ids[i] = job.request_id
                futures.running.add(job.request_id)
                out.append((i, job.call))
            return out

        def done(i: int, outcome: Any) -> None:
            request_id = ids.pop(i)
            try:
                futures.settle(request_id, outcome)
            finally:
                futures.running.discard(request_id)
                futures.cancelled.discard(request_id)

        def join(room: int) -> list[tuple[int, SampleCall]]:
            return admit(self._unless_cancelled(futures.worker.take(live[0].key, room)))

        requests = admit(live)
        try:
            sampler = live[0].get()
            sampler.decode(
                requests,
                done,
                should_stop=lambda i: ids.get(i) in futures.cancelled,
                join=join,
                max_rows=self.config.max_sample_batch,
            )
        except Exception as e:  # e.g. the weights could not be loaded: the rest fail
            for i in list(ids):
                done(i, e)
