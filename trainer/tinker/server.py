"""The Tinker-compatible HTTP server: `create_app(config)` returns a FastAPI app.

Training and sampling requests return a future id at once; the work runs on one torch worker
thread. Training requests of a model run in `seq_id` order (the SDK pipelines them and sends
the first forward_backward chunk last). `retrieve_future` long-polls. Failed requests resolve
to `{"error", "category"}`, which the SDK raises as `RequestFailedError`; malformed requests
get a 4xx with a JSON body.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from trainer.tinker import wire
from trainer.tinker.backend import (
    BaseModels,
    BaseModelSpec,
    LoraSpec,
    Sampler,
    TrainedModel,
    lora_of,
    read_meta,
)
from trainer.tinker.store import FutureState, FutureStore

PROTO = "application/x-protobuf"
_PATH = re.compile(r"^tinker://([^/]+)/(weights|sampler_weights)/([^/]+)$")
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


@dataclass
class ServerConfig:
    """How the server runs."""

    models: list[BaseModelSpec]
    """Base models served."""
    state_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="skyrl-tinker-")))
    """Where the SQLite database and checkpoints live."""
    poll_timeout_s: float = 25.0
    """How long retrieve_future holds a request before answering try_again."""


class _ModelQueue:
    """Runs a model's training requests in seq_id order, whatever order they arrive in."""

    def __init__(self, next_seq: int = 1):
        self.next_seq = next_seq
        self.pending: dict[int, Callable[[], None]] = {}

    def submit(self, seq_id: int | None, start: Callable[[], None]) -> None:
        if seq_id is None:
            start()
            return
        if seq_id < self.next_seq or seq_id in self.pending:
            raise HTTPException(409, f"seq_id {seq_id} was already submitted")
        self.pending[seq_id] = start
        while self.next_seq in self.pending:
            self.pending.pop(self.next_seq)()
            self.next_seq += 1


class TinkerService:
    """Server state: sessions, models, samplers, futures and the worker."""

    def __init__(self, config: ServerConfig):
        self.config = config
        config.state_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoints = config.state_dir / "checkpoints"
        self.bases = BaseModels(config.models)
        self.store = FutureStore(config.state_dir / "futures.sqlite")
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tinker-torch")
        self.sessions: set[str] = set()
        self.session_ids = itertools.count(1)
        self.models: dict[str, TrainedModel] = {}
        self.queues: dict[str, _ModelQueue] = {}
        self.samplers: dict[str, Sampler] = {}
        self.sampler_paths: dict[str, str | None] = {}
        self.sample_ids = itertools.count()

    # -- futures --------------------------------------------------------------------------

    def run(self, kind: str, model_id: str | None, fn: Callable[[], Any]) -> Callable[[], None]:
        """A starter that queues `fn` on the worker; its `request_id` names the new future."""
        request_id = self.store.create(kind, model_id)

        def job() -> None:
            try:
                result = fn()
            except (ValueError, KeyError) as e:
                msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
                self.store.finish(request_id, {"error": str(msg), "category": "user"}, failed=True)
            except Exception as e:  # every failure must reach the client
                err = {"error": f"{type(e).__name__}: {e}", "category": "server"}
                self.store.finish(request_id, err, failed=True)
            else:
                self.store.finish(request_id, result)

        def start() -> None:
            self.worker.submit(job)

        start.request_id = request_id  # type: ignore[attr-defined]
        return start

    def submit(
        self, kind: str, model_id: str, seq_id: int | None, fn: Callable[[], Any]
    ) -> dict[str, Any]:
        """Queue a training request of `model_id` in seq order; the SDK's future reply."""
        queue = self.queues.get(model_id)
        if queue is None:
            raise HTTPException(404, f"unknown model_id {model_id!r}")
        start = self.run(kind, model_id, fn)
        queue.submit(seq_id, start)
        return {"request_id": start.request_id, "model_id": model_id}  # type: ignore[attr-defined]

    # -- helpers --------------------------------------------------------------------------

    def model(self, model_id: str) -> TrainedModel:
        if model_id not in self.models:
            raise KeyError(f"unknown model_id {model_id!r}")
        return self.models[model_id]

    def checkpoint_dir(self, model_id: str, kind: str, name: str) -> Path:
        return self.checkpoints / model_id.replace(":", "_") / kind / name

    def resolve_path(self, path: str) -> Path:
        """The directory of a `tinker://run/kind/name` path (ValueError if malformed)."""
        m = _PATH.match(path)
        if not m:
            raise ValueError(f"not a tinker:// checkpoint path: {path!r}")
        return self.checkpoint_dir(*m.groups())

    def save(self, model_id: str, name: str | None, kind: str, optimizer: bool) -> str:
        if name is None or not _NAME.match(name):
            raise ValueError(f"checkpoint name must match {_NAME.pattern}, got {name!r}")
        directory = self.checkpoint_dir(model_id, kind, name)
        if directory.exists():
            shutil.rmtree(directory)
        self.model(model_id).save(directory, optimizer=optimizer)
        return f"tinker://{model_id}/{kind}/{name}"

    def load_sampler(self, path: str) -> Sampler:
        directory = self.resolve_path(path)
        meta = read_meta(directory)
        trained = TrainedModel(
            "sampler",
            self.bases.spec(meta["base_model"]),
            self.bases,
            lora=lora_of(meta),
        )
        trained.load(directory, optimizer=False)
        return trained.snapshot()

    def new_sampler_id(self, session_id: str, seq: int | None) -> str:
        return f"{session_id}:sample:{seq if seq is not None else next(self.sample_ids)}"


def create_app(config: ServerConfig) -> FastAPI:
    """The FastAPI app serving the Tinker API under `/api/v1`."""
    svc = TinkerService(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        svc.store.bind(asyncio.get_running_loop())
        yield
        svc.worker.shutdown(wait=False, cancel_futures=True)
        svc.store.close()

    app = FastAPI(title="skyrl tinker server", lifespan=lifespan)
    app.state.service = svc

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse(
            {"detail": exc.detail, "error": str(exc.detail)}, status_code=exc.status_code
        )

    # -- client, session, capabilities ------------------------------------------------------

    @app.post("/api/v1/client/config")
    async def client_config() -> dict[str, Any]:
        return {"pjwt_auth_enabled": False}

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config() -> dict[str, Any]:
        return {"refresh_interval_sec": 300, "sample_cancel_enabled": False}

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
        svc.sessions.add(session_id)
        return {"session_id": session_id, "type": "create_session"}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(req: wire.SessionRequest) -> dict[str, Any]:
        if req.session_id not in svc.sessions:
            raise HTTPException(404, f"unknown session {req.session_id!r}")
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish_session(session_id: str) -> dict[str, Any]:
        svc.sessions.discard(session_id)
        return {"status": "ok"}

    @app.post("/api/v1/telemetry")
    async def telemetry() -> dict[str, str]:
        return {"status": "accepted"}

    # -- models -------------------------------------------------------------------------------

    def _session(session_id: str) -> None:
        if session_id not in svc.sessions:
            raise HTTPException(404, f"unknown session {session_id!r}")

    @app.post("/api/v1/create_model")
    async def create_model(req: wire.CreateModelRequest) -> dict[str, Any]:
        _session(req.session_id)
        try:
            spec = svc.bases.spec(req.base_model)
        except KeyError as e:
            raise HTTPException(400, e.args[0]) from e
        model_id = f"{req.session_id}:train:{req.model_seq_id}"
        if model_id in svc.queues:
            raise HTTPException(409, f"model {model_id!r} already exists")
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
        svc.queues[model_id] = _ModelQueue()

        def build() -> dict[str, Any]:
            svc.models[model_id] = TrainedModel(
                model_id,
                spec,
                svc.bases,
                lora=lora,
            )
            return {"model_id": model_id, "type": "create_model"}

        start = svc.run("create_model", model_id, build)
        start()
        return {"request_id": start.request_id, "model_id": model_id}  # type: ignore[attr-defined]

    @app.post("/api/v1/get_info")
    async def get_info(req: wire.ModelRequest) -> dict[str, Any]:
        if req.model_id not in svc.models:
            raise HTTPException(404, f"unknown model_id {req.model_id!r}")
        m = svc.models[req.model_id]
        return {
            "model_id": m.model_id,
            "model_data": {
                "arch": "causal_lm",
                "model_name": m.base.name,
                "tokenizer_id": str(m.base.tokenizer_dir),
            },
            "is_lora": m.lora_rank is not None,
            "lora_rank": m.lora_rank,
            "model_name": m.base.name,
            "type": "get_info",
        }

    @app.post("/api/v1/unload_model")
    async def unload_model(req: wire.ModelRequest) -> dict[str, Any]:
        def unload() -> dict[str, Any]:
            svc.models.pop(req.model_id, None)
            return {"model_id": req.model_id, "type": "unload_model"}

        return svc.submit("unload_model", req.model_id, None, unload)

    # -- training -----------------------------------------------------------------------------

    async def _fwdbwd(request: Request, forward_only: bool) -> dict[str, Any]:
        body = await request.body()
        try:
            if request.headers.get("content-encoding", "") == "zstd":
                import zstandard

                body = zstandard.ZstdDecompressor().decompress(body)
            if PROTO in request.headers.get("content-type", ""):
                call = wire.decode_forward_backward(body)
            else:
                parsed = wire.ForwardBackwardJSON.model_validate_json(body)
                call = wire.decode_forward_backward_json(parsed, forward_only)
        except Exception as e:  # any decoding failure is the client's
            raise HTTPException(400, f"bad forward_backward body: {e}") from e
        kind = "forward" if call.forward_only else "forward_backward"

        def work() -> dict[str, Any]:
            return svc.model(call.model_id).forward_backward(
                call.data, call.loss_fn, call.loss_fn_config, forward_only=call.forward_only
            )

        return svc.submit(kind, call.model_id, call.seq_id, work)

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
        )

    # -- weights ------------------------------------------------------------------------------

    @app.post("/api/v1/save_weights")
    async def save_weights(req: wire.SaveWeightsRequest) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            path = svc.save(req.model_id, req.path, "weights", optimizer=True)
            return {"path": path, "type": "save_weights"}

        return svc.submit("save_weights", req.model_id, req.seq_id, work)

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_for_sampler(req: wire.SaveWeightsRequest) -> dict[str, Any]:
        session_id = req.model_id.split(":train:")[0]

        def work() -> dict[str, Any]:
            if req.path is not None:
                path = svc.save(req.model_id, req.path, "sampler_weights", optimizer=False)
                return {"path": path, "type": "save_weights_for_sampler"}
            sampler_id = svc.new_sampler_id(session_id, req.sampling_session_seq_id)
            svc.samplers[sampler_id] = svc.model(req.model_id).snapshot()
            svc.sampler_paths[sampler_id] = None
            return {
                "path": None,
                "sampling_session_id": sampler_id,
                "type": "save_weights_for_sampler",
            }

        return svc.submit("save_weights_for_sampler", req.model_id, req.seq_id, work)

    @app.post("/api/v1/load_weights")
    async def load_weights(req: wire.LoadWeightsRequest) -> dict[str, Any]:
        try:
            directory = svc.resolve_path(req.path)
            meta = read_meta(directory)
            spec = svc.bases.spec(meta["base_model"])
        except (ValueError, KeyError) as e:
            raise HTTPException(400, str(e.args[0] if e.args else e)) from e
        if req.model_id is not None:  # legacy: load into an existing model, in seq order

            def into() -> dict[str, Any]:
                svc.model(req.model_id).load(directory, optimizer=req.optimizer)  # type: ignore[arg-type]
                return {"path": req.path, "type": "load_weights"}

            return svc.submit("load_weights", req.model_id, req.seq_id, into)
        if req.session_id is None or req.model_seq_id is None:
            raise HTTPException(400, "load_weights needs model_id, or session_id and model_seq_id")
        _session(req.session_id)
        model_id = f"{req.session_id}:train:{req.model_seq_id}"
        if model_id in svc.queues:
            raise HTTPException(409, f"model {model_id!r} already exists")
        svc.queues[model_id] = _ModelQueue(next_seq=1)

        def create() -> dict[str, Any]:
            m = TrainedModel(model_id, spec, svc.bases, lora=lora_of(meta))
            m.load(directory, optimizer=req.optimizer)
            svc.models[model_id] = m
            return {"path": req.path, "model_id": model_id, "type": "load_weights"}

        start = svc.run("load_weights", model_id, create)
        start()
        return {"request_id": start.request_id, "model_id": model_id}  # type: ignore[attr-defined]

    # -- sampling -----------------------------------------------------------------------------

    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(req: wire.CreateSamplingSessionRequest) -> dict[str, Any]:
        _session(req.session_id)
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
            raise HTTPException(400, str(e.args[0] if e.args else e)) from e
        svc.samplers[sampler_id] = sampler
        svc.sampler_paths[sampler_id] = req.model_path
        return {"sampling_session_id": sampler_id, "type": "create_sampling_session"}

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str) -> dict[str, Any]:
        if sampler_id not in svc.samplers:
            raise HTTPException(404, f"unknown sampler {sampler_id!r}")
        return {
            "sampler_id": sampler_id,
            "base_model": svc.samplers[sampler_id].base.name,
            "model_path": svc.sampler_paths.get(sampler_id),
        }

    @app.post("/api/v1/asample")
    async def asample(req: wire.SampleRequest) -> dict[str, Any]:
        if req.sampling_session_id is not None:
            sampler = svc.samplers.get(req.sampling_session_id)
            if sampler is None:
                raise HTTPException(404, f"unknown sampling session {req.sampling_session_id!r}")
            get: Callable[[], Sampler] = lambda: sampler  # noqa: E731
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
                prompt, req.num_samples, req.sampling_params, prompt_logprobs=req.prompt_logprobs
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
