"""The Tinker service: sessions, training runs, samplers, checkpoints and futures, without HTTP.

Training and sampling requests return a future id at once; the work runs on one torch worker
thread (`worker.Worker`). Training requests of a model run in `seq_id` order (the SDK pipelines
them and sends the first forward_backward chunk last). Sampling requests on the same frozen
weights decode as one batch: those queued together start it, those arriving while it decodes
join it at the next token, and each is answered as soon as it ends. Failed requests resolve to
`{"error", "category"}`, which the SDK raises as `RequestFailedError`; refused requests raise
`ServiceError`, which the routes (`routes/`) answer with its status and a JSON body.

What survives a restart (same `state_dir`): sessions, training runs, checkpoints and samplers
are rows in SQLite (`store.Registry`), weights are files under `state_dir/checkpoints`.

- Checkpoints (tinker:// paths of save_state / save_weights_for_sampler) stay loadable until
  deleted or expired (`ttl_seconds`).
- A training run's model id is rebuilt lazily, on its next request, from its last saved state,
  if nothing changed it since: a save_state taken with no gradients pending, or the autosave
  a clean shutdown writes for every model changed since (weights, optimizer and gradients).
  The model then continues exactly, at the next seq_id. Otherwise (the server was killed after
  the model changed) its requests get 410 naming the last save_state path to continue from
  with `create_training_client_from_state_with_optimizer`. Requests accepted but unfinished at
  the restart are reported as lost.
- Samplers of a tinker:// path or a base model are rebuilt lazily too; a sampler made by
  `save_weights_and_get_sampling_client` held an in-memory snapshot and gets 410.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyrl_sdk.http_guard import DEFAULT_HEADER_TIMEOUT_S, DEFAULT_MAX_REQUEST_BYTES
from skyrl_sdk.sampling_limits import MAX_SAMPLED_TOKENS, sampled_tokens_problem
from skyrl_sdk.trainer.config import LoRAConfig
from skyrl_sdk.trainer.tinker import lora as lora_records
from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.backend import (
    DEFAULT_MICRO_BATCH_TOKENS,
    BaseModels,
    BaseModelSpec,
    Cancelled,
    SampleCall,
    Sampler,
    TrainedModel,
    check_loss,
    read_meta,
)
from skyrl_sdk.trainer.tinker.checkpoints import Checkpoints, disk_usage
from skyrl_sdk.trainer.tinker.errors import ServiceError, Status, refusal
from skyrl_sdk.trainer.tinker.model_queue import ModelQueue
from skyrl_sdk.trainer.tinker.names import check_name, model_id_of, session_of
from skyrl_sdk.trainer.tinker.store import (
    DB_NAME,
    CheckpointKind,
    CheckpointRow,
    FutureRecord,
    FutureState,
    FutureStore,
    Registry,
    RunRow,
    SamplerRow,
    SessionRow,
)
from skyrl_sdk.trainer.tinker.views import run_json
from skyrl_sdk.trainer.tinker.worker import Worker


@dataclass
class ServerConfig:
    """How the server runs."""

    models: list[BaseModelSpec]
    """Base models served."""
    state_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="skyrl-tinker-")))
    """Where the SQLite database and checkpoints live."""
    poll_timeout_s: float = 25.0
    """How long retrieve_future holds a request before answering try_again."""
    autosave_on_shutdown: bool = True
    """On a clean shutdown, save each model changed since its last saved state (weights,
    optimizer state, gradients) so that its model id resumes exactly after a restart."""
    api_key: str | None = None
    """The key every request but the health check must carry (`X-API-Key` as the `tinker` SDK
    sends it, or `Authorization: Bearer`); None: no authentication (bind loopback only)."""
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    """Request bodies larger than this get 413 without being read (and so does a zstd body
    that decompresses to more)."""
    micro_batch_tokens: int = DEFAULT_MICRO_BATCH_TOKENS
    """Most padded tokens in one forward pass of a forward_backward: larger requests run as
    several passes whose gradients add up, so memory is bounded whatever the request."""
    max_sample_batch: int = 64
    """Most sequences sampled in one batch (queued requests on the same weights join it)."""
    abandon_after_s: float = 60.0
    """A sampling request nobody has polled for this long (since it was submitted or since
    its last retrieve_future ended, with no poll waiting on it) is cancelled: a client that
    gave up does not keep the worker decoding for nobody."""
    max_queued_sample_tokens: int = 16 * MAX_SAMPLED_TOKENS
    """Most sampling work (`num_samples x max_tokens`, summed over the sampling requests
    queued or running) the server holds; a request past it gets 429."""
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    """A connection must send a whole request head within this many seconds of opening (or
    of its previous response), else it is closed (`http_guard.header_timeout_protocol`)."""
    gil_switch_interval_s: float | None = 0.0005
    """`sys.setswitchinterval` while the server runs (None: leave it). The torch worker holds
    the GIL through the Python parts of every forward pass; at Python's default 5 ms, each
    hand-over to the event loop (to answer the submit, to read the poll, to send the result)
    waited up to 5 ms, most of the per-call overhead. Set for the whole process while the
    server runs, restored after."""


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
    key: Hashable
    """The weights it samples (requests with the same key batch together)."""
    get: Callable[[], Sampler]
    call: SampleCall


class TinkerService:
    """Server state: sessions, models, samplers, checkpoints, futures and the worker."""

    def __init__(self, config: ServerConfig):
        self.config = config
        config.state_dir.mkdir(parents=True, exist_ok=True)
        self.bases = BaseModels(config.models)
        self.store = FutureStore(config.state_dir / DB_NAME)
        self.registry = Registry(config.state_dir / DB_NAME)
        self.files = Checkpoints(config.state_dir, self.registry)
        self.state_dir = self.files.state_dir
        self.worker = Worker(max_batch=config.max_sample_batch)
        self.session_ids = itertools.count(1)
        self.models: dict[str, TrainedModel] = {}
        """Models in memory; others in the registry are rebuilt on their next request."""
        self.versions: dict[str, int] = {}
        """Mirror of `RunRow.version` for the models with a queue."""
        self.queues: dict[str, ModelQueue] = {}
        self.samplers: dict[str, Sampler] = {}
        self.base_samplers: dict[str, Sampler] = {}
        """One frozen sampler per base model, shared by every sampler of it (so that their
        requests batch together)."""
        self.sample_ids = itertools.count()
        self.cancelled: set[str] = set()
        """Request ids the client cancelled (skipped, or stopped at the next token)."""
        self.running: set[str] = set()
        """The requests the worker is executing."""
        self.closing = False
        """Set when the server shuts down."""
        self.sample_work: dict[str, _SampleWork] = {}
        """Sampling requests not known to be settled (pruned by `queued_sample_tokens` and
        `reap_abandoned`)."""
        self.files.purge_expired()

    # -- futures --------------------------------------------------------------------------

    def _settle(self, request_id: str, outcome: Any, model_id: str | None, mutates: bool) -> None:
        """Record a job's result, or its exception as the failure the SDK raises."""
        if isinstance(outcome, Cancelled):
            if not self.closing:
                self.store.cancel(request_id)
        elif isinstance(outcome, ValueError | KeyError):
            msg = outcome.args[0] if isinstance(outcome, KeyError) and outcome.args else outcome
            self.store.finish(request_id, {"error": str(msg), "category": "user"}, failed=True)
        elif isinstance(outcome, ServiceError):  # a model or sampler lost in a restart
            err = {"error": outcome.message, "category": "user"}
            self.store.finish(request_id, err, failed=True)
        elif isinstance(outcome, Exception):  # every failure must reach the client
            err = {"error": f"{type(outcome).__name__}: {outcome}", "category": "server"}
            self.store.finish(request_id, err, failed=True)
        else:
            try:
                self.store.finish(request_id, outcome)  # the poller is answered first
            finally:  # the model changed whether or not its result could be recorded
                if mutates and model_id is not None:
                    self.mutated(model_id)

    def run(
        self,
        kind: str,
        model_id: str | None,
        fn: Callable[[], Any],
        *,
        mutates: bool = False,
    ) -> Callable[[], None]:
        """A starter that queues `fn` on the worker; its `request_id` names the new future.

        `mutates`: a success changes the model (its version goes up).
        """
        request_id = self.store.create(kind, model_id)

        def job() -> None:
            if request_id in self.cancelled:
                self.cancelled.discard(request_id)
                return
            self.running.add(request_id)
            try:
                outcome = fn()
            except Exception as e:  # recorded as the request's failure
                outcome = e
            try:
                self._settle(request_id, outcome, model_id, mutates)
            finally:
                self.running.discard(request_id)
                self.cancelled.discard(request_id)

        def start() -> None:
            self.worker.submit(job)

        start.request_id = request_id  # type: ignore[attr-defined]
        return start

    def start(self, kind: str, model_id: str, fn: Callable[[], Any]) -> dict[str, Any]:
        """Queue `fn` now (not in seq order); the SDK's future reply."""
        starter = self.run(kind, model_id, fn)
        starter()
        return {"request_id": starter.request_id, "model_id": model_id}  # type: ignore[attr-defined]

    def cancel(self, request_id: str) -> dict[str, Any]:
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
            return {"request_id": request_id, "cancelled": False, "state": record.state.value}
        self.cancelled.add(request_id)
        self.store.cancel(request_id)
        return {"request_id": request_id, "cancelled": True, "state": "cancelled"}

    async def retrieve(self, request_id: str) -> FutureRecord:
        """The request's record once settled, or still pending after the poll timeout."""
        work = self.sample_work.get(request_id)
        if work is not None:
            work.polling += 1
        try:
            record = await self.store.wait(request_id, self.config.poll_timeout_s)
        finally:
            if work is not None:
                work.polling -= 1
                work.seen = time.monotonic()
        if record is None:
            raise ServiceError(Status.NOT_FOUND, f"unknown request_id {request_id!r}")
        return record

    def submit(
        self,
        kind: str,
        model_id: str,
        seq_id: int | None,
        fn: Callable[[], Any],
        *,
        mutates: bool = False,
    ) -> dict[str, Any]:
        """Queue a training request of `model_id` in seq order; the SDK's future reply."""
        queue = self.queue_for(model_id)
        queue.check(seq_id)
        start = self.run(kind, model_id, fn, mutates=mutates)
        # The row first: once queued, the worker takes the GIL for its pass, and each write
        # here would then wait for it (the switch interval) before the reply could leave.
        high_water = queue.high_water if seq_id is None else max(queue.high_water, seq_id + 1)
        self.registry.runs.update(model_id, last_request=time.time(), next_seq=high_water)
        queue.submit(seq_id, start)
        return {"request_id": start.request_id, "model_id": model_id}  # type: ignore[attr-defined]

    def refuse(
        self, model_id: str | None, seq_id: int | None, status: Status, message: str
    ) -> ServiceError:
        """The error for a training request refused before it was queued. Its seq_id is used
        up all the same: the SDK numbers requests as it sends them, so the model's later
        requests would otherwise wait for it forever."""
        if model_id is not None and seq_id is not None:
            with contextlib.suppress(ServiceError):
                queue = self.queue_for(model_id)
                queue.submit(seq_id, lambda: None)
                self.registry.runs.update(model_id, next_seq=queue.high_water)
        return ServiceError(status, message)

    # -- training runs ----------------------------------------------------------------------

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
        self.session(session_id)
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
        intact = self._restore_intact(run)
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

    def _restore_intact(self, run: RunRow) -> bool:
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

    def autosave(self) -> list[str]:
        """Save every model in memory changed since its last saved state; their ids."""
        saved = []
        for model_id, model in list(self.models.items()):
            run = self.registry.runs.get(model_id)
            if run is None or run.unloaded:
                continue
            version = self.versions.get(model_id, run.version)
            if version == run.restore_version and self._restore_intact(run):
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

    def run_json(self, run: RunRow) -> dict[str, Any]:
        """A training run as the SDK's `TrainingRun`."""
        return run_json(
            run,
            corrupted=not run.unloaded and self.restore_problem(run) is not None,
            last=self.registry.latest_checkpoint(run.model_id, CheckpointKind.TRAINING),
            last_sampler=self.registry.latest_checkpoint(run.model_id, CheckpointKind.SAMPLER),
        )

    # -- model requests -------------------------------------------------------------------------

    def create_model(self, req: wire.CreateModelRequest) -> dict[str, Any]:
        """Register a trainable copy of a base model; it is built on the worker."""
        model_id = self.new_model_id(req.session_id, req.model_seq_id)
        try:
            spec = self.bases.spec(req.base_model)
            lora = None if req.lora_config is None else lora_records.from_request(req.lora_config)
        except (KeyError, ValueError) as e:
            raise ServiceError(Status.BAD_REQUEST, str(e.args[0])) from e
        self.new_run(model_id, req.session_id, spec.name, lora, req.user_metadata)

        def build() -> dict[str, Any]:
            self.model(model_id)
            return {"model_id": model_id, "type": "create_model"}

        return self.start("create_model", model_id, build)

    def get_info(self, model_id: str) -> dict[str, Any]:
        """The SDK's `GetInfoResponse` of a model."""
        run = self.registry.runs.get(model_id)
        if run is None or run.unloaded:
            raise ServiceError(Status.NOT_FOUND, f"unknown model_id {model_id!r}")
        spec = self.bases.specs.get(run.base_model)
        model_data = {"arch": "causal_lm", "model_name": run.base_model}
        if spec is not None:
            model_data["tokenizer_id"] = str(spec.tokenizer_dir)
        lora = lora_records.read(run.lora)
        return {
            "model_id": run.model_id,
            "model_data": model_data,
            "is_lora": lora is not None,
            "lora_rank": None if lora is None else lora.r,
            "model_name": run.base_model,
            "optimizer_config": {"type": "adamw"},
            "type": "get_info",
        }

    def unload_model(self, model_id: str) -> dict[str, Any]:
        """Drop a model for good (on the worker, after its queued requests)."""
        run = self.registry.runs.get(model_id)
        if run is None or run.unloaded:
            raise ServiceError(Status.NOT_FOUND, f"unknown model_id {model_id!r}")

        def unload() -> dict[str, Any]:
            self.models.pop(model_id, None)
            self.queues.pop(model_id, None)
            self.registry.runs.update(model_id, unloaded=True)
            return {"model_id": model_id, "type": "unload_model"}

        return self.start("unload_model", model_id, unload)

    def forward_backward(self, call: wire.ForwardBackwardCall) -> dict[str, Any]:
        """Queue a forward_backward (or forward) in seq order."""
        try:
            check_loss(call.loss_fn, call.loss_fn_config)
        except ValueError as e:
            raise self.refuse(call.model_id, call.seq_id, Status.BAD_REQUEST, str(e)) from e
        kind = "forward" if call.forward_only else "forward_backward"

        def work() -> dict[str, Any]:
            return self.model(call.model_id).forward_backward(
                call.data, call.loss_fn, call.loss_fn_config, forward_only=call.forward_only
            )

        return self.submit(kind, call.model_id, call.seq_id, work, mutates=not call.forward_only)

    def optim_step(self, req: wire.OptimStepRequest) -> dict[str, Any]:
        """Queue an AdamW step in seq order."""
        return self.submit(
            "optim_step",
            req.model_id,
            req.seq_id,
            lambda: self.model(req.model_id).optim_step(req.adam_params),
            mutates=True,
        )

    # -- checkpoints --------------------------------------------------------------------------

    def checkpoint_name(self, req: wire.SaveWeightsRequest) -> str:
        """The checkpoint name of a save request (400 saying what is wrong, seq_id used up)."""
        try:
            return check_name(req.path)
        except ValueError as e:
            raise self.refuse(req.model_id, req.seq_id, Status.BAD_REQUEST, str(e)) from e

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
        model = self.model(model_id)
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
                restore_version=self.versions.get(model_id, run.version),
                restore_optimizer=True,
                restore_grads=False,
            )
        return path

    def save_weights(self, req: wire.SaveWeightsRequest) -> dict[str, Any]:
        """Queue a save_state in seq order."""
        name = self.checkpoint_name(req)

        def work() -> dict[str, Any]:
            path = self.save(
                req.model_id,
                name,
                CheckpointKind.TRAINING,
                ttl_seconds=req.ttl_seconds,
                overwrite=req.overwrite,
                user_metadata=req.user_metadata,
            )
            return {"path": path, "type": "save_weights"}

        return self.submit("save_weights", req.model_id, req.seq_id, work)

    def save_weights_for_sampler(self, req: wire.SaveWeightsRequest) -> dict[str, Any]:
        """Queue a sampler save (a named checkpoint, or an in-memory snapshot sampler)."""
        session_id = session_of(req.model_id)
        name = None if req.path is None else self.checkpoint_name(req)

        def work() -> dict[str, Any]:
            if name is not None:
                path = self.save(
                    req.model_id,
                    name,
                    CheckpointKind.SAMPLER,
                    ttl_seconds=req.ttl_seconds,
                    user_metadata=req.user_metadata,
                )
                return {"path": path, "type": "save_weights_for_sampler"}
            sampler_id = self.new_sampler_id(session_id, req.sampling_session_seq_id)
            snapshot = self.model(req.model_id).snapshot()
            self.add_sampler(sampler_id, session_id, snapshot, snapshot_of=req.model_id)
            return {
                "path": None,
                "sampling_session_id": sampler_id,
                "type": "save_weights_for_sampler",
            }

        return self.submit("save_weights_for_sampler", req.model_id, req.seq_id, work)

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
            raise self.refuse(req.model_id, req.seq_id, error.status, error.message) from e
        return directory, meta, spec.name

    def load_weights(self, req: wire.LoadWeightsRequest) -> dict[str, Any]:
        """Load a checkpoint into a new model (session addressing) or, legacy, an existing one."""
        directory, meta, base = self._loadable(req)
        if req.model_id is not None:  # legacy: load into an existing model, in seq order
            model_id = req.model_id

            def into() -> dict[str, Any]:
                self.model(model_id).load(directory, optimizer=req.optimizer)
                return {"path": req.path, "type": "load_weights"}

            return self.submit("load_weights", model_id, req.seq_id, into, mutates=True)
        if req.session_id is None or req.model_seq_id is None:
            raise ServiceError(
                Status.BAD_REQUEST, "load_weights needs model_id, or session_id and model_seq_id"
            )
        model_id = self.new_model_id(req.session_id, req.model_seq_id)
        self.new_run(
            model_id,
            req.session_id,
            base,
            lora_records.read(meta.get("lora")),
            req.user_metadata,
            restore_dir=directory,
            restore_optimizer=req.optimizer,
        )

        def create() -> dict[str, Any]:
            self.model(model_id)
            return {"path": req.path, "model_id": model_id, "type": "load_weights"}

        return self.start("load_weights", model_id, create)

    def delete_checkpoint(self, path: str) -> None:
        """Remove a checkpoint's files and row (KeyError if unknown)."""
        self.files.delete(path)

    def purge_expired(self) -> None:
        """Delete the checkpoints whose TTL ran out."""
        self.files.purge_expired()

    # -- samplers -------------------------------------------------------------------------------

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

    def sampler_source(self, sampler_id: str) -> tuple[Hashable, Callable[[], Sampler]]:
        """The batch key of a sampling session's weights and a function (run it on the worker)
        returning its sampler, rebuilt if a restart dropped it; 404 if unknown, 410 if it
        cannot be rebuilt."""
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

    def new_sampler_id(self, session_id: str, seq: int | None) -> str:
        """A sampling session id: `{session}:sample:{seq}`."""
        return f"{session_id}:sample:{seq if seq is not None else next(self.sample_ids)}"

    async def create_sampling_session(
        self, req: wire.CreateSamplingSessionRequest
    ) -> dict[str, Any]:
        """A sampler of a base model or of saved weights (loaded on the worker)."""
        import asyncio

        self.session(req.session_id)
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
        return {"sampling_session_id": sampler_id, "type": "create_sampling_session"}

    def queued_sample_tokens(self) -> int:
        """Sampling work (`num_samples x max_tokens`) queued or running now."""
        for request_id in list(self.sample_work):
            record = self.store.get(request_id)
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
            self.cancelled.add(request_id)
            reason = (
                f"cancelled: nobody polled this sampling request for {limit:g} s "
                "(the server's abandon_after_s)"
            )
            if self.store.cancel(request_id, reason):
                reaped.append(request_id)
            del self.sample_work[request_id]
        return reaped

    def asample(self, req: wire.SampleRequest) -> dict[str, Any]:
        """Queue a sampling request; it joins the queued ones on the same weights."""
        if req.sampling_session_id is not None:
            key, get = self.sampler_source(req.sampling_session_id)
        elif req.model_path is not None:
            path = req.model_path
            key, get = ("path", uuid.uuid4().hex), lambda: self.load_sampler(path)
        elif req.base_model is not None:
            try:
                name = self.bases.spec(req.base_model).name
            except KeyError as e:
                raise ServiceError(Status.BAD_REQUEST, e.args[0]) from e
            key, get = ("base", name), lambda: self.base_sampler(name)
        else:
            raise ServiceError(
                Status.BAD_REQUEST, "asample needs sampling_session_id, model_path or base_model"
            )
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
        request_id = self.store.create("sample", None)
        self.sample_work[request_id] = _SampleWork(req.work(), time.monotonic())
        job = _SampleJob(request_id, key, get, call)
        self.worker.submit_batchable(key, job, self._run_samples, size=req.num_samples)
        return {
            "request_id": request_id,
            "sample_sequence_ids": [f"{request_id}:{i}" for i in range(req.num_samples)],
        }

    def _unless_cancelled(self, jobs: list[_SampleJob]) -> list[_SampleJob]:
        """The jobs still wanted (a cancelled one is dropped and forgotten)."""
        live = []
        for job in jobs:
            if job.request_id in self.cancelled:
                self.cancelled.discard(job.request_id)
            else:
                live.append(job)
        return live

    def _run_samples(self, jobs: list[_SampleJob]) -> None:
        """Decode queued sampling requests on the same weights as one batch (on the worker);
        requests on them that arrive meanwhile join it, and each is answered when it ends."""
        live = self._unless_cancelled(jobs)
        if not live:
            return
        ids: dict[int, str] = {}
        numbers = itertools.count()

        def admit(batch: list[_SampleJob]) -> list[tuple[int, SampleCall]]:
            out = []
            for job in batch:
                i = next(numbers)
                ids[i] = job.request_id
                self.running.add(job.request_id)
                out.append((i, job.call))
            return out

        def done(i: int, outcome: Any) -> None:
            request_id = ids.pop(i)
            try:
                self._settle(request_id, outcome, None, False)
            finally:
                self.running.discard(request_id)
                self.cancelled.discard(request_id)

        def join(room: int) -> list[tuple[int, SampleCall]]:
            return admit(self._unless_cancelled(self.worker.take(live[0].key, room)))

        requests = admit(live)
        try:
            sampler = live[0].get()
            sampler.decode(
                requests,
                done,
                should_stop=lambda i: ids.get(i) in self.cancelled,
                join=join,
                max_rows=self.config.max_sample_batch,
            )
        except Exception as e:  # e.g. the weights could not be loaded: the rest fail
            for i in list(ids):
                done(i, e)

    # -- sessions -------------------------------------------------------------------------------

    def session(self, session_id: str) -> SessionRow:
        """The session's row (404 if unknown)."""
        row = self.registry.sessions.get(session_id)
        if row is None:
            raise ServiceError(Status.NOT_FOUND, f"unknown session {session_id!r}")
        return row

    def create_session(self, req: wire.CreateSessionRequest) -> str:
        """Record a new client session; its id."""
        session_id = f"sess-{next(self.session_ids)}-{uuid.uuid4().hex[:8]}"
        self.registry.sessions.put(
            SessionRow(
                session_id=session_id,
                created=time.time(),
                tags=list(req.tags),
                user_metadata=dict(req.user_metadata or {}),
                display_name=req.display_name,
                project_id=req.project_id,
                finished=None,
            )
        )
        return session_id

    def close(self) -> None:
        """Stop the worker (a running sample stops, other requests finish), autosave, close
        the database."""
        self.closing = True
        for request_id in list(self.running):
            record = self.store.get(request_id)
            if record is not None and record.kind == "sample":
                self.cancelled.add(request_id)  # left pending: "lost" after a restart
        self.worker.shutdown()
        if self.config.autosave_on_shutdown:
            self.autosave()
        self.store.close()
        self.registry.close()
