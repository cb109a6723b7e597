"""The Tinker-compatible HTTP server: `create_app(config)` returns a FastAPI app.

The app is the `TinkerService` (`service`: sessions, models, samplers, checkpoints, futures,
no HTTP) behind the route modules (`routes/`: thin handlers grouped by concern). Refusals
(`errors.ServiceError`, FastAPI's `HTTPException`) reach the client as
`{"detail": message, "error": message}` with their status.

Fair use: a sampling request may ask for at most 65,536 tokens (`num_samples x max_tokens`)
and 16 stop strings / 256 stop token ids (400, `skyrl_sdk.sampling_limits`, checked by the
wire models every sampling route parses); the queued sampling work is bounded
(`max_queued_sample_tokens`, 429 past it); a sampling request nobody has polled for
`abandon_after_s` (60 s) is cancelled; a connection that does not send a whole request head
within `header_timeout_s` (10 s) is closed.

Security: every request passes `skyrl_sdk.http_guard.HttpGuard` first (the key the `tinker`
SDK sends as `X-API-Key`, or `Authorization: Bearer`, when `ServerConfig.api_key` is set; 413
for bodies over `max_request_bytes`, unread). Checkpoint names and run ids become directory
names: `names.check_name` refuses `.`, `..`, separators, NUL, empty and overlong ones with 400,
and `Checkpoints.state_path`, the one place a path under the state dir is built, refuses any
path that resolves outside it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from skyrl_sdk.http_guard import (
    ErrorStyle,
    GuardConfig,
    default_http,
    header_timeout_protocol,
    install,
)
from skyrl_sdk.trainer.tinker.errors import ServiceError
from skyrl_sdk.trainer.tinker.routes import install_routes
from skyrl_sdk.trainer.tinker.service import ServerConfig, TinkerService

__all__ = ["OPEN_PATHS", "ServerConfig", "ServerThread", "TinkerService", "create_app"]

OPEN_PATHS = frozenset({"/api/v1/healthz"})
"""Served without a key: liveness probes carry no credentials, and the answer says nothing but
"ok". (The `tinker` SDK itself sends its key on every request, this one included.)"""


def _error(status: int, message: Any) -> JSONResponse:
    return JSONResponse({"detail": message, "error": str(message)}, status_code=status)


async def _reap(svc: TinkerService) -> None:
    """Cancel abandoned sampling requests, checking a few times per `abandon_after_s`."""
    period = max(0.05, min(1.0, svc.config.abandon_after_s / 4))
    while True:
        await asyncio.sleep(period)
        svc.reap_abandoned()


def uvicorn_http(config: ServerConfig) -> type[Any]:
    """uvicorn's HTTP protocol (httptools when it imports, else h11) with the config's
    header-read deadline (`http_guard.header_timeout_protocol`)."""
    return header_timeout_protocol(default_http(), config.header_timeout_s)


def create_app(config: ServerConfig) -> FastAPI:
    """The FastAPI app serving the Tinker API under `/api/v1`."""
    svc = TinkerService(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        svc.store.bind(asyncio.get_running_loop())
        interval = sys.getswitchinterval()
        if config.gil_switch_interval_s is not None:
            sys.setswitchinterval(config.gil_switch_interval_s)
        reaper = asyncio.create_task(_reap(svc))
        try:
            yield
        finally:
            reaper.cancel()
            sys.setswitchinterval(interval)
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
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, exc.detail)

    @app.exception_handler(ServiceError)
    async def service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return _error(int(exc.status), exc.message)

    install_routes(app)
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
        self.config = config
        self.app = create_app(config)
        self._server: Any = None
        self._thread: Any = None

    def __enter__(self) -> ServerThread:
        import threading
        import time

        import uvicorn

        cfg = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            http=uvicorn_http(self.config),
        )
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
