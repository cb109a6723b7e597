"""Training runs of the Tinker service: their models in memory, queues and restore points.

A run's row lives in the registry; its `TrainedModel` is built on first use and rebuilt after
a restart from its last saved state, if nothing changed the model since (else 410 naming the
last save_state to continue from).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from skyrl_sdk.trainer.config import LoRAConfig
from skyrl_sdk.trainer.tinker import lora as lora_records
from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.backend import BaseModels, TrainedModel
from skyrl_sdk.trainer.tinker.checkpoints import Checkpoints
from skyrl_sdk.trainer.tinker.errors import ServiceError, Status
from skyrl_sdk.trainer.tinker.model_queue import ModelQueue
from skyrl_sdk.trainer.tinker.names import model_id_of
from skyrl_sdk.trainer.tinker.service_config import ServerConfig
from skyrl_sdk.trainer.tinker.service_sessions import Sessions
from skyrl_sdk.trainer.tinker.store import CheckpointKind, Registry, RunRow
from skyrl_sdk.trainer.tinker.views import run_json


class Runs:
    """The training runs: rows, models in memory, versions and request queues."""

    def __init__(
        self,
        config: ServerConfig,
        bases: BaseModels,
        registry: Registry,
        files: Checkpoints,
        sessions: Sessions,
    ):
        self.config = config
        self.bases = bases
        self.registry = registry
        self.files = files
        self.sessions = sessions
        self.models: dict[str, TrainedModel] = {}
        """Models in memory; others in the registry are rebuilt on their next request."""
        self.versions: dict[str, int] = {}
        """Mirror of `RunRow.version` for the models with a queue."""
        self.queues: dict[str, ModelQueue] = {}

    def new_run(
        self,
        model_id: str,
        session_id: str,
        base: str,
        lora: LoRAConfig | None,
        user_metadata: dict[str, Any] | None,
        *,
        restore_dir: Path | None = None,
        restore_optimizer: bool = False,
    ) -> None:
        """Register a training run (version 0, rebuilt from `restore_dir` or the base model)."""
        now = time.time()
        self.registry.runs.put(
            RunRow(
                model_id=model_id,
                session_id=session_id,
                base_model=base,
                lora=lora_records.to_record(lora),
                user_metadata=dict(user_metadata or {}),
                created=now,
                last_request=now,
                next_seq=1,
                version=0,
                restore_dir=None if restore_dir is None else self.files.rel(restore_dir),
                restore_version=0,
                restore_optimizer=restore_optimizer,
                restore_grads=False,
                unloaded=False,
            )
        )
        self.versions[model_id] = 0
        self.queues[model_id] = ModelQueue(next_seq=1)

    def new_model_id(self, session_id: str, model_seq_id: int) -> str:
        """The id of a new training run of `session_id` (404 unknown session, 400 taken)."""
        self.sessions.session(session_id)
        model_id = model_id_of(session_id, model_seq_id)
        if self.registry.runs.get(model_id) is not None:
            raise ServiceError(Status.BAD_REQUEST, f"model {model_id!r} already exists")
        return model_id

    def mutated(self, model_id: str) -> None:
        """Count a completed request that changed the model."""
        version = self.versions.get(model_id, 0) + 1
        self.versions[model_id] = version
        self.registry.runs.update(model_id, version=version, last_request=time.time())

    def restore_problem(self, run: RunRow) -> str | None:
        """Why `run` cannot be rebuilt exactly after a restart (None: it can, or is in memory)."""
        if run.model_id in self.models:
            return None
        intact = self.restore_intact(run)
        if run.restore_version == run.version and intact:
            return None
        lost = "changed after its last saved state" if intact else "had its saved state deleted"
        saved = self.registry.latest_checkpoint(run.model_id, CheckpointKind.TRAINING)
        hint = (
            f"; continue from its last save_state, {saved.tinker_path}, with "
            "ServiceClient.create_training_client_from_state_with_optimizer(path)"
            if saved is not None
            else "; it has no save_state checkpoint to continue from"
        )
        return (
            f"model {run.model_id} {lost} and the server restarted since, "
            f"so its weights and optimizer state are gone{hint}"
        )

    def restore_intact(self, run: RunRow) -> bool:
        """Whether the saved state `run` rebuilds from still exists."""
        return (
            run.restore_dir is None
            or (self.files.state_path(run.restore_dir) / "meta.json").exists()
        )

    def queue_for(self, model_id: str) -> ModelQueue:
        """The request queue of `model_id`, set up again after a restart (404 / 410)."""
        queue = self.queues.get(model_id)
        if queue is not None:
            return queue
        run = self.registry.runs.get(model_id)
        if run is None:
            raise ServiceError(Status.NOT_FOUND, f"unknown model_id {model_id!r}")
        if run.unloaded:
            raise ServiceError(Status.NOT_FOUND, f"model {model_id!r} was unloaded")
        problem = self.restore_problem(run)
        if problem is not None:
            raise ServiceError(Status.GONE, problem)
        self.versions[model_id] = run.version
        queue = self.queues[model_id] = ModelQueue(next_seq=run.next_seq)
        return queue

    def model(self, model_id: str) -> TrainedModel:
        """The model in memory, rebuilt from its saved state if a restart dropped it."""
        if model_id in self.models:
            return self.models[model_id]
        run = self.registry.runs.get(model_id)
        if run is None or run.unloaded:
            raise KeyError(f"unknown model_id {model_id!r}")
        problem = self.restore_problem(run)
        if problem is not None:
            raise ServiceError(Status.GONE, problem)
        model = TrainedModel(
            model_id,
            self.bases.spec(run.base_model),
            self.bases,
            lora=lora_records.read(run.lora),
            micro_batch_tokens=self.config.micro_batch_tokens,
        )
        if run.restore_dir is not None:
            model.load(
                self.files.state_path(run.restore_dir),
                optimizer=run.restore_optimizer,
                grads=run.restore_grads,
            )
        self.models[model_id] = model
        self.versions.setdefault(model_id, run.version)
        return model

    def unload(self, model_id: str) -> None:
        """Drop a model for good (its row stays, marked unloaded)."""
        self.models.pop(model_id, None)
        self.queues.pop(model_id, None)
        self.registry.runs.update(model_id, unloaded=True)

    def autosave(self) -> list[str]:
        """Save every model in memory changed since its last saved state; their ids."""
        saved = []
        for model_id, model in list(self.models.items()):
            run = self.registry.runs.get(model_id)
            if run is None or run.unloaded:
                continue
            version = self.versions.get(model_id, run.version)
            if version == run.restore_version and self.restore_intact(run):
                continue
            directory = self.files.autosave_dir(model_id)
            if directory.exists():
                shutil.rmtree(directory)
            model.save(directory, optimizer=True, grads=True)
            self.registry.runs.update(
                model_id,
                restore_dir=self.files.rel(directory),
                restore_version=version,
                restore_optimizer=True,
                restore_grads=True,
            )
            saved.append(model_id)
        return saved

    def training_run(self, run: RunRow) -> wire.TrainingRun:
        """A training run as the SDK's `TrainingRun`."""
        return wire.TrainingRun.model_validate(
            run_json(
                run,
                corrupted=not run.unloaded and self.restore_problem(run) is not None,
                last=self.registry.latest_checkpoint(run.model_id, CheckpointKind.TRAINING),
                last_sampler=self.registry.latest_checkpoint(run.model_id, CheckpointKind.SAMPLER),
            )
        )
