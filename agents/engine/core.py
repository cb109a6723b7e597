"""`EngineCore`: the worker thread's loop, schedule -> execute, one step at a time.

Each round: load weights queued meanwhile (between two steps, never inside one), admit the
requests the scheduler lets in (each prefilled on its own and joined, or held to ride the next
step), then run the step the scheduler plans. A failed step fails its requests, not the
engine; closing fails whatever is still queued or running.
"""

from __future__ import annotations

from typing import Any

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.engine.batch import RunningBatch
from skyrl_sdk.agents.engine.fairness import FairnessLimits, FairQueue
from skyrl_sdk.agents.engine.prefix_cache import KV, PrefixCache
from skyrl_sdk.agents.engine.request import Request
from skyrl_sdk.agents.engine.runner import ModelRunner
from skyrl_sdk.agents.engine.scheduler import (
    Admission,
    Prefill,
    Scheduler,
    Scheduling,
    make_scheduler,
)
from skyrl_sdk.agents.engine.split_linear import use_split_linears
from skyrl_sdk.agents.engine.stats import Counters
from skyrl_sdk.agents.engine.weights import WeightSync
from skyrl_sdk.agents.policy import FinishReason, PolicyError


class EngineCore:
    """The scheduler, the runner and the weights, driven by one worker thread."""

    def __init__(
        self,
        name: str,
        queue: FairQueue[Request],
        scheduler: Scheduler,
        runner: ModelRunner,
        weights: WeightSync,
        counters: Counters,
        num_threads: int | None,
    ):
        self.name = name
        self.queue = queue
        self.scheduler = scheduler
        self.runner = runner
        self.batch: RunningBatch = runner.batch
        self.weights = weights
        self.counters = counters
        self.num_threads = num_threads
        self.closed = False
        """Set by `LocalEngine.aclose`; the loop fails what is left and returns."""

    def run(self) -> None:
        """The worker thread's body."""
        import torch

        torch.set_grad_enabled(False)
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)  # this thread's (OpenMP's are per thread)
        use_split_linears()
        while True:
            if self.closed:
                self.fail_rows(self.batch.rows)
                self.fail_queued()
                return
            self.step()

    def step(self) -> None:
        """One round of the loop: load queued weights, admit, run the planned step. The
        worker thread's body repeats it; a synchronous caller (`sync.SyncEngine`) drives it
        from its own thread instead."""
        self.weights.apply()  # between two steps, never inside one
        mix = self._admit()
        if not self.batch.rows:
            return
        try:
            self.runner.execute(self.scheduler.plan_step(self.batch, mix))
        except Exception as e:  # a failed step fails its requests, not the engine
            if mix is not None and not mix.request.done:
                self.fail_rows([mix.request], e)
            self.fail_rows(self.batch.rows, e)

    def _admit(self) -> Admission | None:
        """Prefill the requests the scheduler admits and add them to the running batch; a
        request to prefill inside the next decoding step is handed back instead."""
        joining: list[tuple[Request, KV, int]] = []
        while True:
            r = self.scheduler.next_request(self.batch, [j for j, _, _ in joining])
            if r is None:
                break
            if self.closed:
                r.finish = FinishReason.ABORT
                r.resolve(PolicyError(f"{self.name} is closed"))
                break
            if r.cancelled:
                self.counters.cancelled += 1
                continue
            # Weights queued before this request arrived are loaded before it starts (a
            # trainer that publishes, then samples, gets tokens of the new version).
            self.weights.apply()
            admission = self.scheduler.admit(r, self.batch, [j for j, _, _ in joining])
            if admission.prefill is Prefill.MIXED:  # only ever the first one admitted
                return admission
            try:
                kv, first = self.runner.prefill(admission)
            except Exception as e:
                r.finish = FinishReason.ABORT
                r.resolve(PolicyError(f"{self.name}: generation failed: {type(e).__name__}: {e}"))
                continue
            if r.finish is None:
                joining.append((r, kv, first))
        if joining:
            self.batch.join(joining)
        return None

    def fail_rows(self, rows: list[Any], error: Exception | None = None) -> None:
        """Fail `rows`' requests (closed, or a failed step); the batch's rows drop the batch."""
        message = (
            f"{self.name} is closed"
            if error is None
            else f"{self.name}: generation failed: {type(error).__name__}: {error}"
        )
        for r in rows:
            if r is not None and not r.done:
                r.finish = FinishReason.ABORT
                r.resolve(PolicyError(message))
        if rows is self.batch.rows:
            self.batch.reset()

    def fail_queued(self) -> None:
        """Fail every request still waiting (the engine is closing)."""
        for r in self.queue.drain():
            if not r.done:
                r.finish = FinishReason.ABORT
                r.resolve(PolicyError(f"{self.name} is closed"))


def build_core(
    name: str,
    model: Any,
    renderer: ChatRenderer,
    prefix_cache: PrefixCache,
    *,
    scheduling: Scheduling,
    fairness: FairnessLimits,
    max_batch_size: int,
    mixed_steps: bool,
    policy_version: int,
    num_threads: int | None,
) -> EngineCore:
    """An engine's parts on `model`: queue, scheduler, running batch, runner, weights and
    counters (one builder for the threaded `LocalEngine` and the inline `SyncEngine`)."""
    counters = Counters()
    queue: FairQueue[Request] = FairQueue(fairness, alive=lambda r: not r.done)
    scheduler = make_scheduler(
        scheduling, queue, fairness, max_batch_size, prefix_cache, mixed_steps=mixed_steps
    )
    weights = WeightSync(model, prefix_cache, policy_version)
    device = next(model.parameters()).device
    runner = ModelRunner(
        model,
        renderer,
        RunningBatch(device, counters),
        prefix_cache,
        weights,
        counters,
        frees_finished_rows=scheduler.frees_finished_rows,
    )
    return EngineCore(name, queue, scheduler, runner, weights, counters, num_threads)
