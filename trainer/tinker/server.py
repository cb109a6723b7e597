"""The Tinker-compatible HTTP server: `create_app(config)` returns a FastAPI app.

Training and sampling requests return a future id at once; the work runs on one torch worker
thread. Training requests of a model run in `seq_id` order (the SDK pipelines them and sends
the first forward_backward chunk last). `retrieve_future` long-polls. Failed requests resolve
to `{"error", "category"}`, which the SDK raises as `RequestFailedError`; malformed requests
get a 4xx with a JSON body. The REST side (training runs, checkpoints, sessions) is in `rest`.

What survives a restart (same `state_dir`): sessions, training runs, checkpoints and samplers
are rows in SQLite (`store.Registry`), weights are files under `state_dir/checkpoints`.

- Checkpoints (tinker:// paths of save_state / save_weights_for_sampler) stay loadable until
  deleted or expired (`ttl_seconds`).
- A training run's model id is rebuilt lazily, on its next request, from its last saved state,
  if nothing changed it since: a save_state taken with no gradients pending, or the autosave
  a clean shutdown writes for every model changed since (weights, optimizer and gradients).
  The model then continues exactly, at the next seq_id. Otherwise (the server was killed after
  the model changed) its requests get HTTP 410 naming the last save_state path to continue from
  with `create_training_client_from_state_with_optimizer`; the SDK raises that as an
  `APIStatusError`. Requests accepted but unfinished at the restart are reported as lost.
- Samplers of a tinker:// path or a base model are rebuilt lazily too; a sampler made by
  `save_weights_and_get_sampling_client` held an in-memory snapshot and gets HTTP 410.

Security: every request passes `skyrl_sdk.http_guard.HttpGuard` first (the key the `tinker`
SDK sends as `X-API-Key`, or `Authorization: Bearer`, when `ServerConfig.api_key` is set; 413
for bodies over `max_request_bytes`, unread). Checkpoint names and run ids become directory
names: `check_name` refuses `.`, `..`, separators, NUL, empty and overlong ones with 400, and
`TinkerService.state_path`, the one place a path under the state dir is built, refuses any
path that resolves outside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from skyrl_sdk.http_guard import DEFAULT_MAX_REQUEST_BYTES, ErrorStyle, GuardConfig, install
from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.backend import (
    BaseModels,
    BaseModelSpec,
    Cancelled,
    LoraSpec,
    Sampler,
    TrainedModel,
    check_loss,
    lora_of,
    read_meta,
)
from skyrl_sdk.trainer.tinker.store import (
    DB_NAME,
    CheckpointKind,
    CheckpointRow,
    FutureState,
    FutureStore,
    Registry,
    RunRow,
    SamplerRow,
    SessionRow,
)

PROTO = "application/x-protobuf"
_PATH = re.compile(r"^tinker://([^/]+)/(weights|sampler_weights)/([^/]+)$")
MAX_NAME_LENGTH = 128
"""Longest checkpoint name (and training run id) accepted."""
_NAME_CHARS = re.compile(r"^[A-Za-z0-9._-]+$")
OPEN_PATHS = frozenset({"/api/v1/healthz"})
"""Served without a key: liveness probes carry no credentials, and the answer says nothing but
"ok". (The `tinker` SDK itself sends its key on every request, this one included.)"""
GONE = 410
"""Status of requests to a model or sampler whose state a restart lost."""


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


class _ModelQueue:
    """Runs a model's training requests in seq_id order, whatever order they arrive in."""

    def __init__(self, next_seq: int = 1):
        self.next_seq = next_seq
        self.high_water = next_seq
        """One past the highest seq_id accepted (where a restored queue resumes)."""
        self.pending: dict[int, Callable[[], None]] = {}

    def check(self, seq_id: int | None) -> None:
        """HTTP 400 if `seq_id` was already accepted."""
        if seq_id is not None and (seq_id < self.next_seq or seq_id in self.pending):
            raise HTTPException(400, f"seq_id {seq_id} was already submitted for this model")

    def submit(self, seq_id: int | None, start: Callable[[], None]) -> None:
        if seq_id is None:
            start()
            return
        self.check(seq_id)
        self.pending[seq_id] = start
        self.high_water = max(self.high_water, seq_id + 1)
        while self.next_seq in self.pending:
            self.pending.pop(self.next_seq)()
            self.next_seq += 1


def iso(t: float | None) -> str | None:
    """Unix time as an ISO-8601 UTC datetime."""
    return None if t is None else datetime.fromtimestamp(t, tz=UTC).isoformat()


def str_metadata(meta: dict[str, Any] | None) -> dict[str, str]:
    """Metadata as the SDK's `dict[str, str]` (other values as JSON)."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in (meta or {}).items()}


def check_name(name: str | None, what: str = "checkpoint name") -> str:
    """`name` if it is safe as one directory name; ValueError saying which rule it breaks.

    Refused: empty, `.` and `..` (they name the parent or the directory itself: `save_state("..")`
    would replace the run's whole checkpoint folder), path separators, NUL, more than
    `MAX_NAME_LENGTH` characters, and anything but letters, digits, `.`, `_` and `-`.
    """
    if not name:
        raise ValueError(f"{what} must not be empty")
    if "\x00" in name:
        raise ValueError(f"{what} must not contain NUL, got {name!r}")
    if "/" in name or "\\" in name:
        raise ValueError(f"{what} must be one name without '/' or '\\', got {name!r}")
    if name in (".", ".."):
        raise ValueError(f"{what} must not be '.' or '..', got {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"{what} must be at most {MAX_NAME_LENGTH} characters, got {len(name)}")
    if not _NAME_CHARS.match(name):
        raise ValueError(f"{what} may use only letters, digits, '.', '_' and '-', got {name!r}")
    return name


def _run_dir_name(model_id: str) -> str:
    """The directory name of a training run's checkpoints (its id with `:` as `_`)."""
    return check_name(model_id.replace(":", "_"), "training run id")


def _du(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


def http_error(e: Exception) -> HTTPException:
    """A KeyError as 404 and anything else (ValueError) as 400, with the message."""
    message = str(e.args[0]) if e.args else str(e)
    return HTTPException(404 if isinstance(e, KeyError) else 400, message)


class TinkerService:
    """Server state: sessions, models, samplers, checkpoints, futures and the worker."""

    def __init__(self, config: ServerConfig):
        self.config = config
        config.state_dir.mkdir(parents=True, exist_ok=True)
        # Resolved once: `state_path` compares resolved paths against it.
        self.state_dir = config.state_dir.resolve()
        self.checkpoints = self.state_dir / "checkpoints"
        self.bases = BaseModels(config.models)
        self.store = FutureStore(config.state_dir / DB_NAME)
        self.registry = Registry(config.state_dir / DB_NAME)
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tinker-torch")
        self.session_ids = itertools.count(1)
        self.models: dict[str, TrainedModel] = {}
        """Models in memory; others in the registry are rebuilt on their next request."""
        self.versions: dict[str, int] = {}
        """Mirror of `RunRow.version` for the models with a queue."""
        self.queues: dict[str, _ModelQueue] = {}
        self.samplers: dict[str, Sampler] = {}
        self.sample_ids = itertools.count()
        self.cancelled: set[str] = set()
        """Request ids the client cancelled (skipped, or stopped at the next token)."""
        self.running: str | None = None
        """The request the worker is executing."""
        self.closing = False
        """Set when the server shuts down."""
        self.purge_expired()

    # -- futures --------------------------------------------------------------------------

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
            self.running = request_id
            try:
                result = fn()
            except Cancelled:
                if not self.closing:
                    self.store.cancel(request_id)
            except (ValueError, KeyError) as e:
                msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
                self.store.finish(request_id, {"error": str(msg), "category": "user"}, failed=True)
            except HTTPException as e:  # a model or sampler lost in a restart
                err = {"error": str(e.detail), "category": "user"}
                self.store.finish(request_id, err, failed=True)
            except Exception as e:  # every failure must reach the client
                err = {"error": f"{type(e).__name__}: {e}", "category": "server"}
                self.store.finish(request_id, err, failed=True)
            else:
                if mutates and model_id is not None:
                    self.mutated(model_id)
                self.store.finish(request_id, result)
            finally:
                self.running = None
                self.cancelled.discard(request_id)

        def start() -> None:
            self.worker.submit(job)

        start.request_id = request_id  # type: ignore[attr-defined]
        return start

    def stop_requested(self) -> bool:
        """Whether the client cancelled the request being executed."""
        return self.running is not None and self.running in self.cancelled

    def cancel(self, request_id: str) -> dict[str, Any]:
        """Cancel a sampling request: skipped if queued, stopped at its next token if running."""
        record = self.store.get(request_id)
        if record is None:
            raise HTTPException(404, f"unknown request_id {request_id!r}")
        if record.kind != "sample":
            raise HTTPException(
                400, f"only sampling requests can be cancelled; {request_id} is {record.kind}"
            )
        if record.state is not FutureState.PENDING:
            return {"request_id": request_id, "cancelled": False, "state": record.state.value}
        self.cancelled.add(request_id)
        self.store.cancel(request_id)
        return {"request_id": request_id, "cancelled": True, "state": "cancelled"}

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
        queue.submit(seq_id, start)
        self.registry.runs.update(model_id, last_request=time.time(), next_seq=queue.high_water)
        return {"request_id": start.request_id, "model_id": model_id}  # type: ignore[attr-defined]

    def refuse(
        self, model_id: str | None, seq_id: int | None, status: int, message: str
    ) -> HTTPException:
        """The HTTP error for a training request refused before it was queued. Its seq_id is
        used up all the same: the SDK numbers requests as it sends them, so the model's later
        requests would otherwise wait for it forever."""
        if model_id is not None and seq_id is not None:
            with contextlib.suppress(HTTPException):
                queue = self.queue_for(model_id)
                queue.submit(seq_id, lambda: None)
                self.registry.runs.update(model_id, next_seq=queue.high_water)
        return HTTPException(status, message)

    # -- training runs ----------------------------------------------------------------------

    def new_run(
        self,
        model_id: str,
        session_id: str,
        base: str,
        lora: LoraSpec | None,
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
                lora=None if lora is None else asdict(lora),
                user_metadata=dict(user_metadata or {}),
                created=now,
                last_request=now,
                next_seq=1,
                version=0,
                restore_dir=None if restore_dir is None else self.rel(restore_dir),
                restore_version=0,
                restore_optimizer=restore_optimizer,
                restore_grads=False,
                unloaded=False,
            )
        )
        self.versions[model_id] = 0
        self.queues[model_id] = _ModelQueue(next_seq=1)

    def mutated(self, model_id: str) -> None:
        """Count a completed request that changed the model."""
        version = self.versions.get(model_id, 0) + 1
        self.versions[model_id] = version
        self.registry.runs.update(model_id, version=version, last_request=time.time())

    def restore_problem(self, run: RunRow) -> str | None:
        """Why `run` cannot be rebuilt exactly after a restart (None: it can, or is in memory)."""
        if run.model_id in self.models:
            return None
        intact = (
            run.restore_dir is None or (self.state_path(run.restore_dir) / "meta.json").exists()
        )
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

    def queue_for(self, model_id: str) -> _ModelQueue:
        """The request queue of `model_id`, set up again after a restart (HTTP 404 / 410)."""
        queue = self.queues.get(model_id)
        if queue is not None:
            return queue
        run = self.registry.runs.get(model_id)
        if run is None:
            raise HTTPException(404, f"unknown model_id {model_id!r}")
        if run.unloaded:
            raise HTTPException(404, f"model {model_id!r} was unloaded")
        problem = self.restore_problem(run)
        if problem is not None:
            raise HTTPException(GONE, problem)
        self.versions[model_id] = run.version
        queue = self.queues[model_id] = _ModelQueue(next_seq=run.next_seq)
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
            raise HTTPException(GONE, problem)
        lora = None if run.lora is None else LoraSpec(**run.lora)
        model = TrainedModel(model_id, self.bases.spec(run.base_model), self.bases, lora=lora)
        if run.restore_dir is not None:
            model.load(
                self.state_path(run.restore_dir),
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
            intact = run.restore_dir is None or (
                (self.state_path(run.restore_dir) / "meta.json").exists()
            )
            if version == run.restore_version and intact:
                continue
            directory = self.state_path("checkpoints", _run_dir_name(model_id), "autosave")
            if directory.exists():
                shutil.rmtree(directory)
            model.save(directory, optimizer=True, grads=True)
            self.registry.runs.update(
                model_id,
                restore_dir=self.rel(directory),
                restore_version=version,
                restore_optimizer=True,
                restore_grads=True,
            )
            saved.append(model_id)
        return saved

    # -- checkpoints --------------------------------------------------------------------------

    def rel(self, directory: Path) -> str:
        """`directory` relative to the state dir (what the registry stores)."""
        return str(directory.relative_to(self.state_dir))

    def state_path(self, *parts: str) -> Path:
        """`state_dir / parts...`, resolved; ValueError unless it lies strictly inside the state
        dir. Every path the server reads, writes or deletes under its state dir is built here."""
        path = self.state_dir.joinpath(*parts).resolve()
        if path == self.state_dir or not path.is_relative_to(self.state_dir):
            raise ValueError(f"path {'/'.join(parts)!r} is outside the server's state dir")
        return path

    def checkpoint_dir(self, model_id: str, kind: str, name: str) -> Path:
        """The directory of checkpoint `name` of `kind` of run `model_id` (names checked)."""
        if kind not in (k.value for k in CheckpointKind):
            raise ValueError(f"unknown checkpoint kind {kind!r}")
        run = _run_dir_name(model_id)
        return self.state_path("checkpoints", run, kind, check_name(name))

    def resolve(self, path: str) -> tuple[CheckpointRow, Path]:
        """The row and directory of a saved `tinker://run/kind/name` path.

        ValueError if malformed; KeyError if there is no such checkpoint (or it expired).
        """
        m = _PATH.match(path)
        if not m:
            raise ValueError(
                f"not a tinker:// checkpoint path: {path!r} "
                "(expected tinker://<run>/weights|sampler_weights/<name>)"
            )
        directory = self.checkpoint_dir(*m.groups())  # ValueError for a bad name
        self.purge_expired()
        row = self.registry.checkpoints.get(path)
        if row is None:
            raise KeyError(f"no checkpoint at {path} (never saved, deleted, or expired)")
        return row, directory

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
        directory = self.checkpoint_dir(model_id, kind.value, name)  # ValueError for a bad name
        path = f"tinker://{model_id}/{kind.value}/{name}"
        existing = self.registry.checkpoints.get(path)
        if existing is not None and not overwrite:
            raise ValueError(f"checkpoint {path} already exists; pass overwrite=True to replace it")
        model = self.model(model_id)
        run = self.registry.runs.get(model_id)
        if directory.exists():
            shutil.rmtree(directory)
            for other in self.registry.runs.select("restore_dir=?", (self.rel(directory),)):
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
                size_bytes=_du(directory),
                public=False,
                expires_at=None if ttl_seconds is None else now + ttl_seconds,
                user_metadata=dict(user_metadata or {}),
                optimizer=optimizer,
            )
        )
        if optimizer and run is not None and not model.grads_pending:  # an exact restore point
            self.registry.runs.update(
                model_id,
                restore_dir=self.rel(directory),
                restore_version=self.versions.get(model_id, run.version),
                restore_optimizer=True,
                restore_grads=False,
            )
        return path

    def delete_checkpoint(self, path: str) -> None:
        """Remove a checkpoint's files and row (KeyError if unknown)."""
        m = _PATH.match(path)
        row = self.registry.checkpoints.get(path)
        if m is None or row is None:
            raise KeyError(f"no checkpoint at {path}")
        try:
            directory: Path | None = self.checkpoint_dir(*m.groups())
        except ValueError:  # a row an older server let through ("..": its files are not its own)
            directory = None
        if directory is not None and directory.exists():
            shutil.rmtree(directory)
        self.registry.checkpoints.delete(path)

    def purge_expired(self) -> None:
        """Delete the checkpoints whose TTL ran out."""
        for row in self.registry.expired(time.time()):
            self.delete_checkpoint(row.tinker_path)

    def checkpoint_json(self, row: CheckpointRow) -> dict[str, Any]:
        """A checkpoint as the SDK's `Checkpoint`."""
        return {
            "checkpoint_id": f"{row.kind}/{row.name}",
            "checkpoint_type": CheckpointKind(row.kind).api_type,
            "time": iso(row.created),
            "tinker_path": row.tinker_path,
            "size_bytes": row.size_bytes,
            "public": row.public,
            "user_metadata": str_metadata(row.user_metadata),
            "expires_at": iso(row.expires_at),
        }

    def run_json(self, run: RunRow) -> dict[str, Any]:
        """A training run as the SDK's `TrainingRun`."""
        last = self.registry.latest_checkpoint(run.model_id, CheckpointKind.TRAINING)
        last_sampler = self.registry.latest_checkpoint(run.model_id, CheckpointKind.SAMPLER)
        return {
            "training_run_id": run.model_id,
            "base_model": run.base_model,
            "model_owner": "local",
            "is_lora": run.lora is not None,
            "corrupted": not run.unloaded and self.restore_problem(run) is not None,
            "lora_rank": None if run.lora is None else run.lora["rank"],
            "last_request_time": iso(run.last_request),
            "last_checkpoint": None if last is None else self.checkpoint_json(last),
            "last_sampler_checkpoint": (
                None if last_sampler is None else self.checkpoint_json(last_sampler)
            ),
            "user_metadata": str_metadata(run.user_metadata),
        }

    # -- samplers -------------------------------------------------------------------------------

    def load_sampler(self, path: str) -> Sampler:
        """A sampler of the weights saved at `path` (any checkpoint kind)."""
        _, directory = self.resolve(path)
        meta = read_meta(directory)
        trained = TrainedModel(
            "sampler", self.bases.spec(meta["base_model"]), self.bases, lora=lora_of(meta)
        )
        trained.load(directory, optimizer=False)
        return trained.snapshot()

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

    def sampler_getter(self, sampler_id: str) -> Callable[[], Sampler]:
        """A function (run it on the worker) returning the sampler, rebuilt if a restart
        dropped it; HTTP 404 if unknown, 410 if it cannot be rebuilt."""
        if sampler_id in self.samplers:
            sampler = self.samplers[sampler_id]
            return lambda: sampler
        row = self.registry.samplers.get(sampler_id)
        if row is None:
            raise HTTPException(404, f"unknown sampling session {sampler_id!r}")
        if row.snapshot_of is not None:
            raise HTTPException(
                GONE,
                f"sampling session {sampler_id} held an in-memory snapshot of model "
                f"{row.snapshot_of}, lost when the server restarted; make a new one with "
                "save_weights_and_get_sampling_client, or sample a saved tinker:// path",
            )

        def rebuild() -> Sampler:
            if sampler_id not in self.samplers:
                if row.model_path is not None:
                    self.samplers[sampler_id] = self.load_sampler(row.model_path)
                else:
                    spec = self.bases.spec(row.base_model)
                    self.samplers[sampler_id] = Sampler(*self.bases.load(spec.name), spec)
            return self.samplers[sampler_id]

        return rebuild

    def new_sampler_id(self, session_id: str, seq: int | None) -> str:
        return f"{session_id}:sample:{seq if seq is not None else next(self.sample_ids)}"

    # -- sessions -------------------------------------------------------------------------------

    def session(self, session_id: str) -> SessionRow:
        """The session's row (HTTP 404 if unknown)."""
        row = self.registry.sessions.get(session_id)
        if row is None:
            raise HTTPException(404, f"unknown session {session_id!r}")
        return row

    def close(self) -> None:
        """Stop the worker (a running sample stops, other requests finish), autosave, close
        the database."""
        self.closing = True
        running = self.running
        record = None if running is None else self.store.get(running)
        if record is not None and record.kind == "sample":
            self.cancelled.add(record.request_id)  # left pending: "lost" after a restart
        self.worker.shutdown(wait=True, cancel_futures=True)
        if self.config.autosave_on_shutdown:
            self.autosave()
        self.store.close()
        self.registry.close()


def _check_name(svc: TinkerService, req: wire.SaveWeightsRequest) -> str:
    """The checkpoint name of a save request, or HTTP 400 saying what is wrong with it."""
    try:
        return check_name(req.path)
    except ValueError as e:
        raise svc.refuse(req.model_id, req.seq_id, 400, str(e)) from e


def _unzstd(body: bytes, limit: int) -> bytes:
    """Decompress a zstd body, HTTP 413 if it inflates past `limit` bytes (a small body must
    not become a large one in memory)."""
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(body) as reader:
        data = reader.read(limit + 1)
    if len(data) > limit:
        raise HTTPException(413, f"zstd body decompresses to more than {limit} bytes")
    return data


def create_app(config: ServerConfig) -> FastAPI:
    """The FastAPI app serving the Tinker API under `/api/v1`."""
    from skyrl_sdk.trainer.tinker.rest import add_rest_routes

    svc = TinkerService(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        svc.store.bind(asyncio.get_running_loop())
        yield
        svc.close()

    app = FastAPI(title="skyrl tinker server", lifespan=lifespan)
    app.state.service = svc
    guard = GuardConfig(
        api_key=config.api_key,
        max_request_bytes=config.max_request_bytes,
        open_paths=OPEN_PATHS,
        error_style=ErrorStyle.DETAIL,
    )
    install(app, guard)

    @app.exception_handler(HTTPException)
    async def http_error_body(_: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse(
            {"detail": exc.detail, "error": str(exc.detail)}, status_code=exc.status_code
        )

    # -- client, session, capabilities ------------------------------------------------------

    @app.post("/api/v1/client/config")
    async def client_config() -> dict[str, Any]:
        return {"pjwt_auth_enabled": False}

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config() -> dict[str, Any]:
        return {"refresh_interval_sec": 300, "sample_cancel_enabled": True}

    @app.get("/api/v1/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities() -> dict[str, Any]:
        return {
            "supported_models": [
                {
                    "model_name": s.name,
                    "max_context_length": s.max_context_length,
                    "trainable": True,
                    "sampleable": True,
                }
                for s in config.models
            ]
        }

    @app.post("/api/v1/create_session")
    async def create_session(req: wire.CreateSessionRequest) -> dict[str, Any]:
        session_id = f"sess-{next(svc.session_ids)}-{uuid.uuid4().hex[:8]}"
        svc.registry.sessions.put(
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
        return {"session_id": session_id, "type": "create_session"}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(req: wire.SessionRequest) -> dict[str, Any]:
        if svc.session(req.session_id).finished is not None:
            raise HTTPException(GONE, f"session {req.session_id} has finished")
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish_session(session_id: str, req: wire.FinishSessionRequest) -> dict[str, Any]:
        svc.session(session_id)
        finished = {"reason": req.reason or {"type": "success"}, "detail": req.detail}
        svc.registry.sessions.update(session_id, finished=finished)
        return {"status": "ok"}

    @app.post("/api/v1/telemetry")
    async def telemetry() -> dict[str, str]:
        return {"status": "accepted"}

    # -- models -------------------------------------------------------------------------------

    def _new_model_id(session_id: str, model_seq_id: int) -> str:
        svc.session(session_id)
        model_id = f"{session_id}:train:{model_seq_id}"
        if svc.registry.runs.get(model_id) is not None:
            raise HTTPException(400, f"model {model_id!r} already exists")
        return model_id

    @app.post("/api/v1/create_model")
    async def create_model(req: wire.CreateModelRequest) -> dict[str, Any]:
        model_id = _new_model_id(req.session_id, req.model_seq_id)
        try:
            spec = svc.bases.spec(req.base_model)
        except KeyError as e:
            raise HTTPException(400, e.args[0]) from e
        cfg = req.lora_config
        lora = None
        if cfg is not None:
            lora = LoraSpec(
                rank=cfg.rank,
                train_attn=cfg.train_attn,
                train_mlp=cfg.train_mlp,
                train_unembed=cfg.train_unembed,
                seed=cfg.seed,
            )
            try:
                lora.target_modules()
            except ValueError as e:
                raise HTTPException(400, str(e)) from e
        svc.new_run(model_id, req.session_id, spec.name, lora, req.user_metadata)

        def build() -> dict[str, Any]:
            svc.model(model_id)
            return {"model_id": model_id, "type": "create_model"}

        start = svc.run("create_model", model_id, build)
        start()
        return {"request_id": start.request_id, "model_id": model_id}  # type: ignore[attr-defined]

    @app.post("/api/v1/get_info")
    async def get_info(req: wire.ModelRequest) -> dict[str, Any]:
        run = svc.registry.runs.get(req.model_id)
        if run is None or run.unloaded:
            raise HTTPException(404, f"unknown model_id {req.model_id!r}")
        spec = svc.bases.specs.get(run.base_model)
        model_data = {"arch": "causal_lm", "model_name": run.base_model}
        if spec is not None:
            model_data["tokenizer_id"] = str(spec.tokenizer_dir)
        return {
            "model_id": run.model_id,
            "model_data": model_data,
            "is_lora": run.lora is not None,
            "lora_rank": None if run.lora is None else run.lora["rank"],
            "model_name": run.base_model,
            "optimizer_config": {"type": "adamw"},
            "type": "get_info",
        }

    @app.post("/api/v1/unload_model")
    async def unload_model(req: wire.ModelRequest) -> dict[str, Any]:
        run = svc.registry.runs.get(req.model_id)
        if run is None or run.unloaded:
            raise HTTPException(404, f"unknown model_id {req.model_id!r}")

        def unload() -> dict[str, Any]:
            svc.models.pop(req.model_id, None)
            svc.queues.pop(req.model_id, None)
            svc.registry.runs.update(req.model_id, unloaded=True)
            return {"model_id": req.model_id, "type": "unload_model"}

        start = svc.run("unload_model", req.model_id, unload)
        start()
        return {"request_id": start.request_id, "model_id": req.model_id}  # type: ignore[attr-defined]

    # -- training -----------------------------------------------------------------------------

    async def _fwdbwd(request: Request, forward_only: bool) -> dict[str, Any]:
        body = await request.body()
        try:
            if request.headers.get("content-encoding", "") == "zstd":
                body = _unzstd(body, config.max_request_bytes)
            if PROTO in request.headers.get("content-type", ""):
                call = wire.decode_forward_backward(body)
            else:
                parsed = wire.ForwardBackwardJSON.model_validate_json(body)
                call = wire.decode_forward_backward_json(parsed, forward_only)
        except HTTPException:  # 413 for an inflating zstd body
            raise
        except Exception as e:  # any decoding failure is the client's
            raise HTTPException(400, f"bad forward_backward body: {e}") from e
        try:
            check_loss(call.loss_fn, call.loss_fn_config)
        except ValueError as e:
            raise svc.refuse(call.model_id, call.seq_id, 400, str(e)) from e
        kind = "forward" if call.forward_only else "forward_backward"

        def work() -> dict[str, Any]:
            return svc.model(call.model_id).forward_backward(
                call.data, call.loss_fn, call.loss_fn_config, forward_only=call.forward_only
            )

        return svc.submit(kind, call.model_id, call.seq_id, work, mutates=not call.forward_only)

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request) -> dict[str, Any]:
        return await _fwdbwd(request, forward_only=False)

    @app.post("/api/v1/forward")
    async def forward(request: Request) -> dict[str, Any]:
        return await _fwdbwd(request, forward_only=True)

    @app.post("/api/v1/optim_step")
    async def optim_step(req: wire.OptimStepRequest) -> dict[str, Any]:
        return svc.submit(
            "optim_step",
            req.model_id,
            req.seq_id,
            lambda: svc.model(req.model_id).optim_step(req.adam_params),
            mutates=True,
        )

    # -- weights ------------------------------------------------------------------------------

    @app.post("/api/v1/save_weights")
    async def save_weights(req: wire.SaveWeightsRequest) -> dict[str, Any]:
        name = _check_name(svc, req)

        def work() -> dict[str, Any]:
            path = svc.save(
                req.model_id,
                name,
                CheckpointKind.TRAINING,
                ttl_seconds=req.ttl_seconds,
                overwrite=req.overwrite,
                user_metadata=req.user_metadata,
            )
            return {"path": path, "type": "save_weights"}

        return svc.submit("save_weights", req.model_id, req.seq_id, work)

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_for_sampler(req: wire.SaveWeightsRequest) -> dict[str, Any]:
        session_id = req.model_id.split(":train:")[0]
        name = None if req.path is None else _check_name(svc, req)

        def work() -> dict[str, Any]:
            if name is not None:
                path = svc.save(
                    req.model_id,
                    name,
                    CheckpointKind.SAMPLER,
                    ttl_seconds=req.ttl_seconds,
                    user_metadata=req.user_metadata,
                )
                return {"path": path, "type": "save_weights_for_sampler"}
            sampler_id = svc.new_sampler_id(session_id, req.sampling_session_seq_id)
            snapshot = svc.model(req.model_id).snapshot()
            svc.add_sampler(sampler_id, session_id, snapshot, snapshot_of=req.model_id)
            return {
                "path": None,
                "sampling_session_id": sampler_id,
                "type": "save_weights_for_sampler",
            }

        return svc.submit("save_weights_for_sampler", req.model_id, req.seq_id, work)

    @app.post("/api/v1/load_weights")
    async def load_weights(req: wire.LoadWeightsRequest) -> dict[str, Any]:
        try:
            _, directory = svc.resolve(req.path)
            meta = read_meta(directory)
            spec = svc.bases.spec(meta["base_model"])
            if req.base_model is not None and req.base_model != spec.name:
                raise ValueError(
                    f"{req.path} was trained from {spec.name}, not from {req.base_model}"
                )
            if req.optimizer and not (directory / "optimizer.pt").exists():
                raise ValueError(
                    f"{req.path} has no optimizer state (saved for sampling?); load it without"
                )
        except (ValueError, KeyError) as e:
            error = http_error(e)
            raise svc.refuse(req.model_id, req.seq_id, error.status_code, error.detail) from e
        if req.model_id is not None:  # legacy: load into an existing model, in seq order

            def into() -> dict[str, Any]:
                svc.model(req.model_id).load(directory, optimizer=req.optimizer)  # type: ignore[arg-type]
                return {"path": req.path, "type": "load_weights"}

            return svc.submit("load_weights", req.model_id, req.seq_id, into, mutates=True)
        if req.session_id is None or req.model_seq_id is None:
            raise HTTPException(400, "load_weights needs model_id, or session_id and model_seq_id")
        model_id = _new_model_id(req.session_id, req.model_seq_id)
        svc.new_run(
            model_id,
            req.session_id,
            spec.name,
            lora_of(meta),
            req.user_metadata,
            restore_dir=directory,
            restore_optimizer=req.optimizer,
        )

        def create() -> dict[str, Any]:
            svc.model(model_id)
            return {"path": req.path, "model_id": model_id, "type": "load_weights"}

        start = svc.run("load_weights", model_id, create)
        start()
        return {"request_id": start.request_id, "model_id": model_id}  # type: ignore[attr-defined]

    @app.post("/api/v1/save_weights_external")
    async def save_weights_external(req: wire.SaveWeightsRequest) -> dict[str, Any]:
        from skyrl_sdk.trainer.tinker.rest import EXTERNAL_WHY

        why = f"not supported by the local tinker server: {EXTERNAL_WHY}"
        raise svc.refuse(req.model_id, req.seq_id, 400, why)

    # -- sampling -----------------------------------------------------------------------------

    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(req: wire.CreateSamplingSessionRequest) -> dict[str, Any]:
        svc.session(req.session_id)
        if (req.base_model is None) == (req.model_path is None):
            raise HTTPException(400, "give exactly one of base_model and model_path")
        sampler_id = svc.new_sampler_id(req.session_id, req.sampling_session_seq_id)
        loop = asyncio.get_running_loop()
        try:
            if req.model_path is not None:
                path = req.model_path
                sampler = await loop.run_in_executor(svc.worker, svc.load_sampler, path)
            else:
                base = req.base_model
                spec = svc.bases.spec(base)  # type: ignore[arg-type]
                model, tok = await loop.run_in_executor(svc.worker, svc.bases.load, spec.name)
                sampler = Sampler(model, tok, spec)
        except (ValueError, KeyError) as e:
            raise http_error(e) from e
        svc.add_sampler(sampler_id, req.session_id, sampler, model_path=req.model_path)
        return {"sampling_session_id": sampler_id, "type": "create_sampling_session"}

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str) -> dict[str, Any]:
        row = svc.registry.samplers.get(sampler_id)
        if row is None:
            raise HTTPException(404, f"unknown sampler {sampler_id!r}")
        return {
            "sampler_id": sampler_id,
            "base_model": row.base_model,
            "model_path": row.model_path,
        }

    @app.post("/api/v1/asample")
    async def asample(req: wire.SampleRequest) -> dict[str, Any]:
        if req.sampling_session_id is not None:
            get = svc.sampler_getter(req.sampling_session_id)
        elif req.model_path is not None:
            get = lambda: svc.load_sampler(req.model_path)  # type: ignore[arg-type]  # noqa: E731
        elif req.base_model is not None:
            try:
                spec = svc.bases.spec(req.base_model)
            except KeyError as e:
                raise HTTPException(400, e.args[0]) from e
            get = lambda: Sampler(*svc.bases.load(spec.name), spec)  # noqa: E731
        else:
            raise HTTPException(400, "asample needs sampling_session_id, model_path or base_model")
        prompt = req.prompt.tokens()

        def work() -> dict[str, Any]:
            return get().sample(
                prompt,
                req.num_samples,
                req.sampling_params,
                prompt_logprobs=req.prompt_logprobs,
                should_stop=svc.stop_requested,
            )

        start = svc.run("sample", None, work)
        start()
        rid: str = start.request_id  # type: ignore[attr-defined]
        return {
            "request_id": rid,
            "sample_sequence_ids": [f"{rid}:{i}" for i in range(req.num_samples)],
        }

    # -- futures ------------------------------------------------------------------------------

    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(req: wire.FutureRequest, request: Request) -> Response:
        record = await svc.store.wait(req.request_id, config.poll_timeout_s)
        if record is None:
            raise HTTPException(404, f"unknown request_id {req.request_id!r}")
        if record.state is FutureState.PENDING:
            return JSONResponse(
                {"type": "try_again", "request_id": req.request_id, "queue_state": "active"}
            )
        if record.state is not FutureState.DONE:
            return JSONResponse(record.result)
        proto = PROTO in request.headers.get("accept", "")
        if record.kind in ("forward", "forward_backward"):
            if proto:
                return Response(wire.forward_backward_to_proto(record.result), media_type=PROTO)
            return JSONResponse(wire.forward_backward_to_json(record.result))
        if record.kind == "sample":
            if proto:
                return Response(wire.sample_to_proto(record.result), media_type=PROTO)
            return JSONResponse(wire.sample_to_json(record.result))
        return JSONResponse(record.result)

    @app.post("/api/v1/cancel_future")
    async def cancel_future(req: wire.CancelRequest) -> dict[str, Any]:
        return svc.cancel(req.request_id)

    add_rest_routes(app, svc)
    return app


class ServerThread:
    """Runs the app under uvicorn on 127.0.0.1 in a daemon thread (tests, benchmarks).

    Use as a context manager; `base_url` is set once the server accepts connections.
    """

    def __init__(self, config: ServerConfig, port: int = 0):
        import socket

        if port == 0:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.app = create_app(config)
        self._server: Any = None
        self._thread: Any = None

    def __enter__(self) -> ServerThread:
        import threading
        import time

        import uvicorn

        cfg = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(cfg)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the tinker server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
