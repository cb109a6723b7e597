"""Serve any `Retriever` (by default our BM25 index) over the Search-R1 retrieval API.

`POST /retrieve {"queries": [...], "topk": 3, "return_scores": false}` returns
`{"result": [[doc, ...], ...]}`, or `[{"document": doc, "score": s}, ...]` per query with
`return_scores`. Each `doc` carries `id`, `title`, `text`, and Search-R1's `contents`
(`"title"\\ntext`), so clients written for either shape work. `GET /health` reports the
document count. Needs the `server` extra (fastapi, uvicorn), imported only here.

Every request passes `skyrl_sdk.http_guard.HttpGuard` first: with an API key set, requests other
than `GET /health` need `Authorization: Bearer KEY` (what `HttpRetriever(api_key=...)` sends)
or `X-API-Key: KEY`, else 401; bodies over `max_request_bytes` get 413 unread.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from skyrl_sdk.http_guard import DEFAULT_MAX_REQUEST_BYTES, ErrorStyle, GuardConfig, install
from skyrl_sdk.tools.search.types import Passage, RetrievalError, Retriever

MAX_QUERIES = 1024
"""Queries per request; larger batches are rejected with 422."""

OPEN_PATHS = frozenset({"/health"})
"""Served without a key: liveness probes carry no credentials, and the answer holds only the
document count."""


class RetrieveRequest(BaseModel):
    """The body of `POST /retrieve` (Search-R1's request shape)."""

    queries: list[str] = Field(max_length=MAX_QUERIES)
    """The queries, answered in order."""
    topk: int = Field(3, ge=1)
    """Passages per query (at most the app's `max_topk`)."""
    return_scores: bool = False
    """Wrap each document as `{"document": doc, "score": s}`."""


def _fastapi() -> Any:
    try:
        import fastapi
    except ImportError as e:
        raise ImportError(
            "serving an index needs the 'server' extra: pip install 'skyrl-sdk[server]'"
        ) from e
    return fastapi


def _doc(p: Passage) -> dict[str, Any]:
    return {"id": p.id, "title": p.title, "text": p.text, "contents": f'"{p.title}"\n{p.text}'}


def create_app(
    retriever: Retriever,
    *,
    max_topk: int = 100,
    documents: int | None = None,
    api_key: str | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> Any:
    """A FastAPI app answering `/retrieve` from `retriever`.

    `api_key`: the key every request but `GET /health` must carry (None: no authentication;
    bind loopback only). `max_request_bytes`: larger bodies get 413 unread.
    """
    fastapi = _fastapi()
    app = fastapi.FastAPI(title="skyrl search", description=__doc__)
    install(
        app,
        GuardConfig(
            api_key=api_key,
            max_request_bytes=max_request_bytes,
            open_paths=OPEN_PATHS,
            error_style=ErrorStyle.DETAIL,
        ),
    )

    @app.post("/retrieve")
    def retrieve(request: RetrieveRequest) -> dict[str, Any]:
        # A plain `def`: FastAPI runs it in its thread pool, so slow queries never block I/O.
        if request.topk > max_topk:
            raise fastapi.HTTPException(status_code=422, detail=f"topk must be <= {max_topk}")
        try:
            results = retriever.retrieve(request.queries, request.topk)
        except RetrievalError as e:
            raise fastapi.HTTPException(status_code=503, detail=str(e)) from e
        if request.return_scores:
            return {
                "result": [[{"document": _doc(p), "score": p.score} for p in r] for r in results]
            }
        return {"result": [[_doc(p) for p in r] for r in results]}

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "documents": documents}

    return app


def serve_index(
    index_dir: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    api_key: str | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> None:
    """Serve the BM25 index at `index_dir` until interrupted (blocking).

    Raises `InsecureBindError` for a non-loopback `host` without `api_key`.
    """
    import uvicorn

    from skyrl_sdk.http_guard import check_bind
    from skyrl_sdk.tools.search.bm25 import BM25Index

    check_bind(host, api_key)
    index = BM25Index(index_dir)
    app = create_app(
        index, documents=index.num_docs, api_key=api_key, max_request_bytes=max_request_bytes
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level)


class ServerThread:
    """Run an ASGI app with uvicorn in a daemon thread (tests, benchmarks, notebooks).

    `with ServerThread(app) as server:` starts it on a free port of 127.0.0.1 and waits until
    it accepts connections; `server.url` is its base URL. Leaving the block stops it.
    """

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 10.0
    ):
        import uvicorn

        if port == 0:
            with socket.socket() as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
        self.url = f"http://{host}:{port}"
        self.start_timeout_s = start_timeout_s
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="search-server", daemon=True)

    def __enter__(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server at {self.url} did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)
