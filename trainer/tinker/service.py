"""The Tinker service: sessions, training runs, samplers, checkpoints and futures, without HTTP.

`TinkerService` is the facade the routes call; each concept lives in a part of its own
(`service_sessions`, `service_futures`, `service_runs`, `service_training`, `service_weights`,
`service_samplers`, `service_sampling`). Public methods take the request models of `wire` and
return its reply models (`wire.FutureReply`, `wire.GetInfoReply`, ...), which the routes send
with `Reply.body()`.

Training and sampling requests return a future id at once; the work runs on one torch worker
thread (`worker.Worker`). Training requests of a model run in `seq_id` order (the SDK pipelines
them and sends the first forward_backward chunk last). Sampling requests on the same frozen
weights decode as one batch: those queued together start it, those arriving while it decodes
join it at the next token, and each is answered as soon as it ends. Failed requests resolve to
`wire.RequestFailed`, which the SDK raises as `RequestFailedError`; refused requests raise
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

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.backend import BaseModels, Sampler, TrainedModel
from skyrl_sdk.trainer.tinker.checkpoints import Checkpoints
from skyrl_sdk.trainer.tinker.errors import ServiceError, Status
from skyrl_sdk.trainer.tinker.service_catalog import Catalog
from skyrl_sdk.trainer.tinker.service_config import ServerConfig
from skyrl_sdk.trainer.tinker.service_futures import Futures
from skyrl_sdk.trainer.tinker.service_runs import Runs
from skyrl_sdk.trainer.tinker.service_samplers import Samplers
from skyrl_sdk.trainer.tinker.service_sampling import Sampling
from skyrl_sdk.trainer.tinker.service_sessions import Sessions
from skyrl_sdk.trainer.tinker.service_training import Training
from skyrl_sdk.trainer.tinker.service_weights import Weights
from skyrl_sdk.trainer.tinker.store import (
    DB_NAME,
    FutureRecord,
    FutureStore,
    Registry,
    RunRow,
    SessionRow,
)
from skyrl_sdk.trainer.tinker.worker import Worker

__all__ = ["ServerConfig", "TinkerService"]


class TinkerService:
    """Server state: sessions, models, samplers, checkpoints, futures and the worker.

    The facade the routes use; each method hands the request to the part that holds it."""

    def __init__(self, config: ServerConfig):
        self.config = config
        config.state_dir.mkdir(parents=True, exist_ok=True)
        self.bases = BaseModels(config.models)
        self.store = FutureStore(config.state_dir / DB_NAME)
        self.registry = Registry(config.state_dir / DB_NAME)
        self.files = Checkpoints(config.state_dir, self.registry)
        self.state_dir = self.files.state_dir
        self.worker = Worker(max_batch=config.max_sample_batch)
        self.sessions = Sessions(self.registry)
        """Client sessions."""
        self.futures = Futures(self.store, self.worker)
        """Request futures and the worker settling them."""
        self.runs = Runs(config, self.bases, self.registry, self.files, self.sessions)
        """Training runs: models in memory, versions, request queues."""
        self.training = Training(self.runs, self.futures, self.bases, self.registry)
        """Requests on training runs."""
        self.sampler_sessions = Samplers(
            self.bases, self.registry, self.files, self.worker, self.sessions
        )
        """Sampling sessions and their samplers."""
        self.sampling = Sampling(config, self.futures, self.sampler_sessions, self.bases)
        """Sampling requests queued or running."""
        self.weights = Weights(
            self.runs,
            self.training,
            self.futures,
            self.sampler_sessions,
            self.bases,
            self.files,
            self.registry,
        )
        """Checkpoints: save, load."""
        self.catalog = Catalog(self.runs, self.registry, self.files)
        """The REST views of runs and checkpoints."""
        self.files.purge_expired()

    # -- state the server's checks look at ------------------------------------------------

    @property
    def models(self) -> dict[str, TrainedModel]:
        """Models in memory; others in the registry are rebuilt on their next request."""
        return self.runs.models

    @property
    def samplers(self) -> dict[str, Sampler]:
        """The samplers of the sampling sessions in memory, by id."""
        return self.sampler_sessions.samplers

    @property
    def base_samplers(self) -> dict[str, Sampler]:
        """One frozen sampler per base model, shared by every sampler of it."""
        return self.sampler_sessions.base_samplers

    @property
    def running(self) -> set[str]:
        """The requests the worker is executing."""
        return self.futures.running

    @property
    def cancelled(self) -> set[str]:
        """Request ids the client cancelled (skipped, or stopped at the next token)."""
        return self.futures.cancelled

    # -- sessions ---------------------------------------------------------------------------

    def session(self, session_id: str) -> SessionRow:
        """The session's row (404 if unknown)."""
        return self.sessions.session(session_id)

    def create_session(self, req: wire.CreateSessionRequest) -> wire.CreateSessionReply:
        """Record a new client session."""
        return self.sessions.create_session(req)

    def heartbeat(self, req: wire.SessionRequest) -> wire.HeartbeatReply:
        """A live session's heartbeat (410 once its client finished it)."""
        return self.sessions.heartbeat(req)

    def finish_session(self, session_id: str, req: wire.FinishSessionRequest) -> wire.StatusOk:
        """Record that the client finished the session, and why."""
        return self.sessions.finish(session_id, req)

    def list_sessions(self, limit: int, offset: int) -> wire.SessionIds:
        """A page of session ids, newest first."""
        return self.sessions.list_sessions(limit, offset)

    def session_info(self, session_id: str) -> wire.SessionInfo:
        """The SDK's `GetSessionResponse` (404 if unknown)."""
        return self.sessions.session_info(session_id)

    def search_sessions(self, req: wire.SessionSearchRequest) -> wire.SessionSearchReply:
        """The sessions passing a search's filters, a page at a time."""
        return self.sessions.search(req)

    # -- futures ----------------------------------------------------------------------------

    def cancel(self, request_id: str) -> wire.CancelReply:
        """Cancel a sampling request: skipped if queued, stopped at its next token if running."""
        return self.futures.cancel(request_id)

    async def retrieve(self, request_id: str) -> FutureRecord:
        """The request's record once settled, or still pending after the poll timeout."""
        with self.sampling.polled(request_id):
            record = await self.store.wait(request_id, self.config.poll_timeout_s)
        if record is None:
            raise ServiceError(Status.NOT_FOUND, f"unknown request_id {request_id!r}")
        return record

    def refuse(
        self, model_id: str | None, seq_id: int | None, status: Status, message: str
    ) -> ServiceError:
        """The error for a training request refused before it was queued (its seq_id used
        up, so that the model's later requests do not wait for it)."""
        return self.training.refuse(model_id, seq_id, status, message)

    # -- training runs ------------------------------------------------------------------------

    def create_model(self, req: wire.CreateModelRequest) -> wire.FutureReply:
        """Register a trainable copy of a base model; it is built on the worker."""
        return self.training.create_model(req)

    def get_info(self, model_id: str) -> wire.GetInfoReply:
        """The SDK's `GetInfoResponse` of a model."""
        return self.training.get_info(model_id)

    def unload_model(self, model_id: str) -> wire.FutureReply:
        """Drop a model for good (on the worker, after its queued requests)."""
        return self.training.unload_model(model_id)

    def forward_backward(self, call: wire.ForwardBackwardCall) -> wire.FutureReply:
        """Queue a forward_backward (or forward) in seq order."""
        return self.training.forward_backward(call)

    def optim_step(self, req: wire.OptimStepRequest) -> wire.FutureReply:
        """Queue an AdamW step in seq order."""
        return self.training.optim_step(req)

    def training_run(self, run: RunRow) -> wire.TrainingRun:
        """A training run as the SDK's `TrainingRun`."""
        return self.runs.training_run(run)

    def autosave(self) -> list[str]:
        """Save every model in memory changed since its last saved state; their ids."""
        return self.runs.autosave()

    # -- checkpoints ------------------------------------------------------------------------

    def save_weights(self, req: wire.SaveWeightsRequest) -> wire.FutureReply:
        """Queue a save_state in seq order."""
        return self.weights.save_weights(req)

    def save_weights_for_sampler(self, req: wire.SaveWeightsRequest) -> wire.FutureReply:
        """Queue a sampler save (a named checkpoint, or an in-memory snapshot sampler)."""
        return self.weights.save_weights_for_sampler(req)

    def load_weights(self, req: wire.LoadWeightsRequest) -> wire.FutureReply:
        """Load a checkpoint into a new model (session addressing) or, legacy, an existing one."""
        return self.weights.load_weights(req)

    def list_training_runs(
        self, limit: int, offset: int, project_id: str | None = None
    ) -> wire.TrainingRunsReply:
        """A page of training runs, newest first (of one project if named)."""
        return self.catalog.training_runs(limit, offset, project_id)

    def get_training_run(self, model_id: str) -> wire.TrainingRun:
        """One training run (404 if unknown)."""
        return self.catalog.training_run(model_id)

    def list_run_checkpoints(self, model_id: str) -> wire.CheckpointsReply:
        """Every checkpoint of a training run, oldest first (404 if unknown)."""
        return self.catalog.run_checkpoints(model_id)

    def list_checkpoints(self, limit: int, offset: int) -> wire.CheckpointsReply:
        """A page of every run's checkpoints, newest first."""
        return self.catalog.checkpoints(limit, offset)

    def delete_run_checkpoint(self, model_id: str, kind: str, name: str) -> wire.DeletedReply:
        """Delete the checkpoint `tinker://{model_id}/{kind}/{name}` (400 / 404)."""
        return self.catalog.delete(model_id, kind, name)

    def publish_checkpoint(
        self, model_id: str, kind: str, name: str, *, public: bool
    ) -> wire.PublishedReply:
        """Publish (or unpublish) a checkpoint (400 / 404)."""
        return self.catalog.publish(model_id, kind, name, public)

    def set_checkpoint_ttl(
        self, model_id: str, kind: str, name: str, req: wire.TtlRequest
    ) -> wire.TtlReply:
        """Set when a checkpoint expires (400 / 404)."""
        return self.catalog.set_ttl(model_id, kind, name, req)

    def weights_info(self, req: wire.WeightsInfoRequest) -> wire.WeightsInfoReply:
        """What weights a tinker:// path holds."""
        return self.catalog.weights_info(req)

    def checkpoint_storage(self, project_id: str | None = None) -> wire.StorageReply:
        """The checkpoints' disk use."""
        return self.catalog.storage(project_id)

    def delete_checkpoint(self, path: str) -> None:
        """Remove a checkpoint's files and row (KeyError if unknown)."""
        self.files.delete(path)

    def purge_expired(self) -> None:
        """Delete the checkpoints whose TTL ran out."""
        self.files.purge_expired()

    # -- sampling ---------------------------------------------------------------------------

    async def create_sampling_session(
        self, req: wire.CreateSamplingSessionRequest
    ) -> wire.CreateSamplingSessionReply:
        """A sampler of a base model or of saved weights (loaded on the worker)."""
        return await self.sampler_sessions.create_sampling_session(req)

    def sampler_info(self, sampler_id: str) -> wire.SamplerInfo:
        """What a sampling session samples (404 if unknown)."""
        return self.sampler_sessions.sampler_info(sampler_id)

    def capabilities(self) -> wire.ServerCapabilities:
        """The base models served."""
        return wire.ServerCapabilities(
            supported_models=[
                wire.SupportedModel(model_name=s.name, max_context_length=s.max_context_length)
                for s in self.config.models
            ]
        )

    def asample(self, req: wire.SampleRequest) -> wire.FutureReply:
        """Queue a sampling request; it joins the queued ones on the same weights."""
        return self.sampling.asample(req)

    def queued_sample_tokens(self) -> int:
        """Sampling work (`num_samples x max_tokens`) queued or running now."""
        return self.sampling.queued_sample_tokens()

    def reap_abandoned(self, now: float | None = None) -> list[str]:
        """Cancel the sampling requests nobody has polled for `abandon_after_s`; their ids."""
        return self.sampling.reap_abandoned(now)

    def close(self) -> None:
        """Stop the worker (a running sample stops, other requests finish), autosave, close
        the database."""
        self.futures.stop()
        if self.config.autosave_on_shutdown:
            self.autosave()
        self.store.close()
        self.registry.close()
