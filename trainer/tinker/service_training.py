"""Training requests of the Tinker service: create, describe and unload models, and the
requests queued in a model's `seq_id` order (forward_backward, forward, optim_step).

The SDK pipelines a model's requests and sends the first forward_backward chunk last, so each
model has a `ModelQueue` that starts them in seq order; a refused request still uses up its
seq_id, else the model's later requests would wait for it forever.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from skyrl_sdk.trainer.tinker import lora as lora_records
from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.backend import BaseModels, BaseModelSpec, check_loss
from skyrl_sdk.trainer.tinker.errors import ServiceError, Status
from skyrl_sdk.trainer.tinker.service_config import TokenizerIds
from skyrl_sdk.trainer.tinker.service_futures import Futures, Outcome
from skyrl_sdk.trainer.tinker.service_runs import Runs
from skyrl_sdk.trainer.tinker.store import Registry


class Training:
    """Requests on training runs."""

    def __init__(self, runs: Runs, futures: Futures, bases: BaseModels, registry: Registry):
        self.runs = runs
        self.futures = futures
        self.bases = bases
        self.registry = registry

    def submit(
        self,
        kind: str,
        model_id: str,
        seq_id: int | None,
        fn: Callable[[], Outcome],
        *,
        mutates: bool = False,
    ) -> wire.FutureReply:
        """Queue a training request of `model_id` in seq order; the SDK's future reply.

        `mutates`: a success changes the model (its version goes up)."""
        queue = self.runs.queue_for(model_id)
        queue.check(seq_id)
        after = (lambda: self.runs.mutated(model_id)) if mutates else None
        queued = self.futures.run(kind, model_id, fn, after=after)
        # The row first: once queued, the worker takes the GIL for its pass, and each write
        # here would then wait for it (the switch interval) before the reply could leave.
        high_water = queue.high_water if seq_id is None else max(queue.high_water, seq_id + 1)
        self.registry.runs.update(model_id, last_request=time.time(), next_seq=high_water)
        queue.submit(seq_id, queued.start)
        return wire.FutureReply(request_id=queued.request_id, model_id=model_id)

    def refuse(
        self, model_id: str | None, seq_id: int | None, status: Status, message: str
    ) -> ServiceError:
        """The error for a training request refused before it was queued. Its seq_id is used
        up all the same: the SDK numbers requests as it sends them, so the model's later
        requests would otherwise wait for it forever."""
        if model_id is not None and seq_id is not None:
            with contextlib.suppress(ServiceError):
                queue = self.runs.queue_for(model_id)
                queue.submit(seq_id, lambda: None)
                self.registry.runs.update(model_id, next_seq=queue.high_water)
        return ServiceError(status, message)

    def create_model(self, req: wire.CreateModelRequest) -> wire.FutureReply:
        """Register a trainable copy of a base model; it is built on the worker."""
        model_id = self.runs.new_model_id(req.session_id, req.model_seq_id)
        try:
            spec = self.bases.spec(req.base_model)
            lora = None if req.lora_config is None else lora_records.from_request(req.lora_config)
        except (KeyError, ValueError) as e:
            raise ServiceError(Status.BAD_REQUEST, str(e.args[0])) from e
        self.runs.new_run(model_id, req.session_id, spec.name, lora, req.user_metadata)

        def build() -> wire.CreateModelReply:
            self.runs.model(model_id)
            return wire.CreateModelReply(model_id=model_id)

        return self.futures.start("create_model", model_id, build)

    def get_info(self, model_id: str) -> wire.GetInfoReply:
        """The SDK's `GetInfoResponse` of a model."""
        run = self.registry.runs.get(model_id)
        if run is None or run.unloaded:
            raise ServiceError(Status.NOT_FOUND, f"unknown model_id {model_id!r}")
        spec = self.bases.specs.get(run.base_model)
        lora = lora_records.read(run.lora)
        return wire.GetInfoReply(
            model_id=run.model_id,
            model_data=wire.ModelData(
                model_name=run.base_model,
                tokenizer_id=None if spec is None else self._tokenizer_id(spec),
            ),
            is_lora=lora is not None,
            lora_rank=None if lora is None else lora.r,
            model_name=run.base_model,
        )

    def _tokenizer_id(self, spec: BaseModelSpec) -> str:
        if self.runs.config.tokenizer_ids is TokenizerIds.NAME:
            return spec.name
        return str(spec.tokenizer_dir)

    def unload_model(self, model_id: str) -> wire.FutureReply:
        """Drop a model for good (on the worker, after its queued requests)."""
        run = self.registry.runs.get(model_id)
        if run is None or run.unloaded:
            raise ServiceError(Status.NOT_FOUND, f"unknown model_id {model_id!r}")

        def unload() -> wire.UnloadModelReply:
            self.runs.unload(model_id)
            return wire.UnloadModelReply(model_id=model_id)

        return self.futures.start("unload_model", model_id, unload)

    def forward_backward(self, call: wire.ForwardBackwardCall) -> wire.FutureReply:
        """Queue a forward_backward (or forward) in seq order."""
        try:
            check_loss(call.loss_fn, call.loss_fn_config)
        except ValueError as e:
            raise self.refuse(call.model_id, call.seq_id, Status.BAD_REQUEST, str(e)) from e
        kind = "forward" if call.forward_only else "forward_backward"

        def work() -> Outcome:
            return self.runs.model(call.model_id).forward_backward(
                call.data, call.loss_fn, call.loss_fn_config, forward_only=call.forward_only
            )

        return self.submit(kind, call.model_id, call.seq_id, work, mutates=not call.forward_only)

    def optim_step(self, req: wire.OptimStepRequest) -> wire.FutureReply:
        """Queue an AdamW step in seq order."""
        return self.submit(
            "optim_step",
            req.model_id,
            req.seq_id,
            lambda: self.runs.model(req.model_id).optim_step(req.adam_params),
            mutates=True,
        )
