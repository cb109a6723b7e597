"""Samplers of the Tinker service: frozen weights to sample, and how to rebuild them.

A sampling session samples a base model (one shared sampler per base model, so that their
requests batch together), a saved tinker:// path, or an in-memory snapshot of a training run
(`save_weights_and_get_sampling_client`). After a restart the first two are rebuilt on their
next request; a snapshot is gone (410).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Hashable

from skyrl_sdk.trainer.tinker import lora as lora_records
from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.backend import BaseModels, Sampler, TrainedModel, read_meta
from skyrl_sdk.trainer.tinker.checkpoints import Checkpoints
from skyrl_sdk.trainer.tinker.errors import ServiceError, Status, refusal
from skyrl_sdk.trainer.tinker.service_sessions import Sessions
from skyrl_sdk.trainer.tinker.store import Registry, SamplerRow
from skyrl_sdk.trainer.tinker.worker import Worker

Source = tuple[Hashable, Callable[[], Sampler]]
"""A sampling request's weights: its batch key, and a function (run it on the worker)
returning the sampler."""


class Samplers:
    """The sampling sessions and the samplers they hold."""

    def __init__(
        self,
        bases: BaseModels,
        registry: Registry,
        files: Checkpoints,
        worker: Worker,
        sessions: Sessions,
    ):
        self.bases = bases
        self.registry = registry
        self.files = files
        self.worker = worker
        self.sessions = sessions
        self.samplers: dict[str, Sampler] = {}
        self.base_samplers: dict[str, Sampler] = {}
        """One frozen sampler per base model, shared by every sampler of it (so that their
        requests batch together)."""
        self.sample_ids = itertools.count()

    def load_sampler(self, path: str) -> Sampler:
        """A sampler of the weights saved at `path` (any checkpoint kind)."""
        _, directory = self.files.resolve(path)
        meta = read_meta(directory)
        trained = TrainedModel(
            "sampler",
            self.bases.spec(meta["base_model"]),
            self.bases,
            lora=lora_records.read(meta.get("lora")),
        )
        trained.load(directory, optimizer=False)
        return trained.snapshot()

    def base_sampler(self, name: str) -> Sampler:
        """The shared sampler of a base model's weights (built on first use; on the worker)."""
        if name not in self.base_samplers:
            spec = self.bases.spec(name)
            self.base_samplers[name] = Sampler(*self.bases.load(spec.name), spec)
        return self.base_samplers[name]

    def add_sampler(
        self,
        sampler_id: str,
        session_id: str,
        sampler: Sampler,
        *,
        model_path: str | None = None,
        snapshot_of: str | None = None,
    ) -> None:
        """Keep `sampler` and record how to rebuild it."""
        self.samplers[sampler_id] = sampler
        self.registry.samplers.put(
            SamplerRow(
                sampler_id=sampler_id,
                session_id=session_id,
                base_model=sampler.base.name,
                model_path=model_path,
                snapshot_of=snapshot_of,
                created=time.time(),
            )
        )

    def sampler_source(self, sampler_id: str) -> Source:
        """The weights of a sampling session, rebuilt if a restart dropped them; 404 if
        unknown, 410 if they cannot be rebuilt."""
        row = None
        if sampler_id not in self.samplers:
            row = self.registry.samplers.get(sampler_id)
            if row is None:
                raise ServiceError(Status.NOT_FOUND, f"unknown sampling session {sampler_id!r}")
            if row.snapshot_of is not None:
                raise ServiceError(
                    Status.GONE,
                    f"sampling session {sampler_id} held an in-memory snapshot of model "
                    f"{row.snapshot_of}, lost when the server restarted; make a new one with "
                    "save_weights_and_get_sampling_client, or sample a saved tinker:// path",
                )
            if row.model_path is None:
                name = row.base_model
                return ("base", name), lambda: self.base_sampler(name)
        cached = self.samplers.get(sampler_id)
        if cached is not None and cached in self.base_samplers.values():
            return ("base", cached.base.name), lambda: cached

        def rebuild() -> Sampler:
            if sampler_id not in self.samplers:
                assert row is not None and row.model_path is not None
                self.samplers[sampler_id] = self.load_sampler(row.model_path)
            return self.samplers[sampler_id]

        return ("sampler", sampler_id), rebuild

    def sampler_info(self, sampler_id: str) -> wire.SamplerInfo:
        """What a sampling session samples (404 if unknown)."""
        row = self.registry.samplers.get(sampler_id)
        if row is None:
            raise ServiceError(Status.NOT_FOUND, f"unknown sampler {sampler_id!r}")
        return wire.SamplerInfo(
            sampler_id=sampler_id, base_model=row.base_model, model_path=row.model_path
        )

    def new_sampler_id(self, session_id: str, seq: int | None) -> str:
        """A sampling session id: `{session}:sample:{seq}`."""
        return f"{session_id}:sample:{seq if seq is not None else next(self.sample_ids)}"

    async def create_sampling_session(
        self, req: wire.CreateSamplingSessionRequest
    ) -> wire.CreateSamplingSessionReply:
        """A sampler of a base model or of saved weights (loaded on the worker)."""
        self.sessions.session(req.session_id)
        if (req.base_model is None) == (req.model_path is None):
            raise ServiceError(Status.BAD_REQUEST, "give exactly one of base_model and model_path")
        sampler_id = self.new_sampler_id(req.session_id, req.sampling_session_seq_id)
        try:
            if req.model_path is not None:
                path = req.model_path
                load = self.worker.call(lambda: self.load_sampler(path))
            else:
                name = self.bases.spec(req.base_model).name  # type: ignore[arg-type]
                load = self.worker.call(lambda: self.base_sampler(name))
            sampler = await asyncio.wrap_future(load)
        except (ValueError, KeyError) as e:
            raise refusal(e) from e
        self.add_sampler(sampler_id, req.session_id, sampler, model_path=req.model_path)
        return wire.CreateSamplingSessionReply(sampling_session_id=sampler_id)
