"""Saving and loading weights in the Tinker service: save_state, sampler weights, load.

A checkpoint is a directory under `state_dir/checkpoints` plus a registry row naming its
tinker:// path. A save_state taken with no gradients pending is also the run's exact restore
point after a restart.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from skyrl_sdk.trainer.tinker import lora as lora_records
from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.backend import BaseModels, read_meta
from skyrl_sdk.trainer.tinker.checkpoints import Checkpoints, disk_usage
from skyrl_sdk.trainer.tinker.errors import ServiceError, Status, refusal
from skyrl_sdk.trainer.tinker.names import check_name, session_of
from skyrl_sdk.trainer.tinker.service_futures import Futures
from skyrl_sdk.trainer.tinker.service_runs import Runs
from skyrl_sdk.trainer.tinker.service_samplers import Samplers
from skyrl_sdk.trainer.tinker.service_training import Training
from skyrl_sdk.trainer.tinker.store import CheckpointKind, CheckpointRow, Registry


class Weights:
    """Checkpoints of training runs: save, load, delete."""

    def __init__(
        self,
        runs: Runs,
        training: Training,
        futures: Futures,
        samplers: Samplers,
        bases: BaseModels,
        files: Checkpoints,
        registry: Registry,
    ):
        self.runs = runs
        self.training = training
        self.futures = futures
        self.samplers = samplers
        self.bases = bases
        self.files = files
        self.registry = registry

    def checkpoint_name(self, req: wire.SaveWeightsRequest) -> str:
        """The checkpoint name of a save request (400 saying what is wrong, seq_id used up)."""
        try:
            return check_name(req.path)
        except ValueError as e:
            raise self.training.refuse(req.model_id, req.seq_id, Status.BAD_REQUEST, str(e)) from e

    def save(
        self,
        model_id: str,
        name: str,
        kind: CheckpointKind,
        *,
        ttl_seconds: int | None = None,
        overwrite: bool = True,
        user_metadata: dict[str, Any] | None = None,
    ) -> str:
        """Save the model's weights (+ optimizer state for training checkpoints); the path."""
        directory = self.files.directory(model_id, kind.value, name)  # ValueError: bad name
        path = f"tinker://{model_id}/{kind.value}/{name}"
        existing = self.registry.checkpoints.get(path)
        if existing is not None and not overwrite:
            raise ValueError(f"checkpoint {path} already exists; pass overwrite=True to replace it")
        model = self.runs.model(model_id)
        run = self.registry.runs.get(model_id)
        if directory.exists():
            shutil.rmtree(directory)
            for other in self.registry.runs.select("restore_dir=?", (self.files.rel(directory),)):
                # Runs that would rebuild from the old content cannot do so exactly any more.
                self.registry.runs.update(other.model_id, restore_version=-1)
        optimizer = kind is CheckpointKind.TRAINING
        model.save(directory, optimizer=optimizer)
        now = time.time()
        self.registry.checkpoints.put(
            CheckpointRow(
                tinker_path=path,
                model_id=model_id,
                kind=kind.value,
                name=name,
                created=now,
                size_bytes=disk_usage(directory),
                public=False,
                expires_at=None if ttl_seconds is None else now + ttl_seconds,
                user_metadata=dict(user_metadata or {}),
                optimizer=optimizer,
            )
        )
        if optimizer and run is not None and not model.grads_pending:  # an exact restore point
            self.registry.runs.update(
                model_id,
                restore_dir=self.files.rel(directory),
                restore_version=self.runs.versions.get(model_id, run.version),
                restore_optimizer=True,
                restore_grads=False,
            )
        return path

    def save_weights(self, req: wire.SaveWeightsRequest) -> wire.FutureReply:
        """Queue a save_state in seq order."""
        name = self.checkpoint_name(req)

        def work() -> wire.SaveWeightsReply:
            path = self.save(
                req.model_id,
                name,
                CheckpointKind.TRAINING,
                ttl_seconds=req.ttl_seconds,
                overwrite=req.overwrite,
                user_metadata=req.user_metadata,
            )
            return wire.SaveWeightsReply(path=path)

        return self.training.submit("save_weights", req.model_id, req.seq_id, work)

    def save_weights_for_sampler(self, req: wire.SaveWeightsRequest) -> wire.FutureReply:
        """Queue a sampler save (a named checkpoint, or an in-memory snapshot sampler)."""
        session_id = session_of(req.model_id)
        name = None if req.path is None else self.checkpoint_name(req)

        def work() -> wire.SaveForSamplerReply:
            if name is not None:
                path = self.save(
                    req.model_id,
                    name,
                    CheckpointKind.SAMPLER,
                    ttl_seconds=req.ttl_seconds,
                    user_metadata=req.user_metadata,
                )
                return wire.SaveForSamplerReply(path=path)
            sampler_id = self.samplers.new_sampler_id(session_id, req.sampling_session_seq_id)
            snapshot = self.runs.model(req.model_id).snapshot()
            self.samplers.add_sampler(sampler_id, session_id, snapshot, snapshot_of=req.model_id)
            return wire.SaveForSamplerReply(path=None, sampling_session_id=sampler_id)

        return self.training.submit("save_weights_for_sampler", req.model_id, req.seq_id, work)

    def _loadable(self, req: wire.LoadWeightsRequest) -> tuple[Path, dict[str, Any], str]:
        """The directory, metadata and base model name of a load request's checkpoint."""
        try:
            _, directory = self.files.resolve(req.path)
            meta = read_meta(directory)
            spec = self.bases.spec(meta["base_model"])
            if req.base_model is not None and req.base_model != spec.name:
                raise ValueError(
                    f"{req.path} was trained from {spec.name}, not from {req.base_model}"
                )
            if req.optimizer and not (directory / "optimizer.pt").exists():
                raise ValueError(
                    f"{req.path} has no optimizer state (saved for sampling?); load it without"
                )
        except (ValueError, KeyError) as e:
            error = refusal(e)
            raise self.training.refuse(req.model_id, req.seq_id, error.status, error.message) from e
        return directory, meta, spec.name

    def load_weights(self, req: wire.LoadWeightsRequest) -> wire.FutureReply:
        """Load a checkpoint into a new model (session addressing) or, legacy, an existing one."""
        directory, meta, base = self._loadable(req)
        if req.model_id is not None:  # legacy: load into an existing model, in seq order
            model_id = req.model_id

            def into() -> wire.LoadWeightsReply:
                self.runs.model(model_id).load(directory, optimizer=req.optimizer)
                return wire.LoadWeightsReply(path=req.path)

            return self.training.submit("load_weights", model_id, req.seq_id, into, mutates=True)
        if req.session_id is None or req.model_seq_id is None:
            raise ServiceError(
                Status.BAD_REQUEST, "load_weights needs model_id, or session_id and model_seq_id"
            )
        model_id = self.runs.new_model_id(req.session_id, req.model_seq_id)
        self.runs.new_run(
            model_id,
            req.session_id,
            base,
            lora_records.read(meta.get("lora")),
            req.user_metadata,
            restore_dir=directory,
            restore_optimizer=req.optimizer,
        )

        def create() -> wire.LoadWeightsReply:
            self.runs.model(model_id)
            return wire.LoadWeightsReply(path=req.path, model_id=model_id)

        return self.futures.start("load_weights", model_id, create)
