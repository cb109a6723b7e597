"""The REST views of the Tinker service: training runs and their checkpoints (list, delete,
publish, TTL), weights info and storage use, as the SDK's shapes."""

from __future__ import annotations

import time

from skyrl_sdk.trainer.tinker import lora as lora_records
from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.backend import read_meta
from skyrl_sdk.trainer.tinker.checkpoints import Checkpoints
from skyrl_sdk.trainer.tinker.errors import ServiceError, Status, refusal
from skyrl_sdk.trainer.tinker.service_runs import Runs
from skyrl_sdk.trainer.tinker.store import CheckpointKind, CheckpointRow, Registry, RunRow
from skyrl_sdk.trainer.tinker.views import checkpoint_json


def _checkpoint(row: CheckpointRow) -> wire.Checkpoint:
    return wire.Checkpoint.model_validate(checkpoint_json(row))


class Catalog:
    """What a client can list and change of the runs and checkpoints kept."""

    def __init__(self, runs: Runs, registry: Registry, files: Checkpoints):
        self.runs = runs
        self.registry = registry
        self.files = files

    def run_row(self, model_id: str) -> RunRow:
        """A training run's row (404 if unknown)."""
        run = self.registry.runs.get(model_id)
        if run is None:
            raise ServiceError(Status.NOT_FOUND, f"unknown training run {model_id!r}")
        return run

    def training_runs(
        self, limit: int, offset: int, project_id: str | None
    ) -> wire.TrainingRunsReply:
        """A page of training runs, newest first (of one project if named)."""
        self.files.purge_expired()
        where, params = "1", ()
        if project_id is not None:
            where = "session_id IN (SELECT session_id FROM sessions WHERE project_id=?)"
            params = (project_id,)
        runs = self.registry.runs
        rows = runs.select(where, params, order="created DESC", limit=limit, offset=offset)
        return wire.TrainingRunsReply(
            training_runs=[self.runs.training_run(r) for r in rows],
            cursor=wire.PageCursor(
                offset=offset, limit=limit, total_count=runs.count(where, params)
            ),
        )

    def training_run(self, model_id: str) -> wire.TrainingRun:
        """One training run (404 if unknown)."""
        self.files.purge_expired()
        return self.runs.training_run(self.run_row(model_id))

    def run_checkpoints(self, model_id: str) -> wire.CheckpointsReply:
        """Every checkpoint of a training run, oldest first."""
        self.run_row(model_id)
        self.files.purge_expired()
        rows = self.registry.checkpoints.select("model_id=?", (model_id,), order="created")
        return wire.CheckpointsReply(checkpoints=[_checkpoint(r) for r in rows], cursor=None)

    def checkpoints(self, limit: int, offset: int) -> wire.CheckpointsReply:
        """A page of every run's checkpoints, newest first."""
        self.files.purge_expired()
        rows = self.registry.checkpoints.select(order="created DESC", limit=limit, offset=offset)
        return wire.CheckpointsReply(
            checkpoints=[_checkpoint(r) for r in rows],
            cursor=wire.PageCursor(
                offset=offset, limit=limit, total_count=self.registry.checkpoints.count()
            ),
        )

    def checkpoint_path(self, model_id: str, kind: str, name: str) -> str:
        """The tinker:// path of an existing checkpoint (400 malformed, 404 unknown)."""
        if kind not in (k.value for k in CheckpointKind):
            raise ServiceError(
                Status.BAD_REQUEST,
                "checkpoint ids look like weights/<name> or sampler_weights/<name>, "
                f"got {kind}/{name}",
            )
        try:
            self.files.directory(model_id, kind, name)  # names checked: 400, not a path lookup
        except ValueError as e:
            raise ServiceError(Status.BAD_REQUEST, str(e)) from e
        path = f"tinker://{model_id}/{kind}/{name}"
        self.files.purge_expired()
        if self.registry.checkpoints.get(path) is None:
            raise ServiceError(Status.NOT_FOUND, f"no checkpoint at {path}")
        return path

    def delete(self, model_id: str, kind: str, name: str) -> wire.DeletedReply:
        """Remove a checkpoint's files and row."""
        path = self.checkpoint_path(model_id, kind, name)
        self.files.delete(path)
        return wire.DeletedReply(deleted=path)

    def publish(self, model_id: str, kind: str, name: str, public: bool) -> wire.PublishedReply:
        """Publish (or unpublish) a checkpoint."""
        path = self.checkpoint_path(model_id, kind, name)
        self.registry.checkpoints.update(path, public=public)
        return wire.PublishedReply(tinker_path=path, public=public)

    def set_ttl(self, model_id: str, kind: str, name: str, req: wire.TtlRequest) -> wire.TtlReply:
        """Set when a checkpoint expires (None: never)."""
        path = self.checkpoint_path(model_id, kind, name)
        expires = None if req.ttl_seconds is None else time.time() + req.ttl_seconds
        self.registry.checkpoints.update(path, expires_at=expires)
        return wire.TtlReply(tinker_path=path, expires_at=expires)

    def weights_info(self, req: wire.WeightsInfoRequest) -> wire.WeightsInfoReply:
        """What weights a tinker:// path holds (404 unknown, 400 malformed)."""
        try:
            _, directory = self.files.resolve(req.tinker_path)
            meta = read_meta(directory)
        except (ValueError, KeyError) as e:
            raise refusal(e) from e
        lora = lora_records.read(meta.get("lora"))
        fields = {} if lora is None else lora_records.sdk_fields(lora)
        return wire.WeightsInfoReply(
            base_model=meta["base_model"], is_lora=lora is not None, **fields
        )

    def storage(self, project_id: str | None) -> wire.StorageReply:
        """The checkpoints' disk use."""
        self.files.purge_expired()
        rows = self.registry.checkpoints.select()
        size = sum(r.size_bytes for r in rows)
        item = wire.StorageUsage(
            project_id=project_id,
            checkpoint_count=len(rows),
            size_bytes=size,
            size_gigabytes=size / 1e9,
        )
        return wire.StorageReply(data=[item])
