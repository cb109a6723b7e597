"""`start_server`: `skyrl serve` in a background thread of this process (harness tests, eval
and training with command agents), returned as a `RunningServer`."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from skyrl_sdk.agents.serving.app import create_app
from skyrl_sdk.agents.serving.auth import SessionKeys
from skyrl_sdk.agents.serving.capture import SessionStore
from skyrl_sdk.agents.serving.config import ServeConfig
from skyrl_sdk.http_guard import check_bind, header_timeout_protocol

if TYPE_CHECKING:
    import uvicorn

    from skyrl_sdk.agents.chat import ChatRenderer
    from skyrl_sdk.agents.policy import Policy
    from skyrl_sdk.agents.trajectory import Trajectory

START_TIMEOUT_S = 30.0
"""Seconds `start_server` waits for the server to accept connections."""


def uvicorn_options() -> dict[str, str]:
    """uvicorn's HTTP parser and event loop: `httptools` and `uvloop` (C) when they import,
    else `h11` and asyncio (pure Python), as uvicorn's `auto` would pick, but named so
    `skyrl bench serve` can report them. Measured: the C pair saves ~10% of the server's CPU
    per request, too little to show in wall time on a loaded machine, so the `server` extra
    does not require them."""
    options = {"http": "h11", "loop": "asyncio"}
    try:
        import httptools  # noqa: F401

        options["http"] = "httptools"
    except ImportError:
        pass
    try:
        import uvloop  # noqa: F401

        options["loop"] = "uvloop"
    except ImportError:
        pass
    return options


def uvicorn_settings(config: ServeConfig) -> dict[str, Any]:
    """`uvicorn_options()` with the HTTP protocol given the config's header-read deadline
    (`http_guard.header_timeout_protocol`): what `skyrl serve` passes to uvicorn."""
    options: dict[str, Any] = dict(uvicorn_options())
    options["http"] = header_timeout_protocol(options["http"], config.header_timeout_s)
    return options


class RunningServer:
    """A server running in a background thread; also a context manager that stops it."""

    def __init__(
        self,
        server: uvicorn.Server,
        thread: threading.Thread,
        host: str,
        port: int,
        store: SessionStore,
        keys: SessionKeys,
    ):
        self._server = server
        self._thread = thread
        self.host = host
        """The bound interface."""
        self.port = port
        """The bound port."""
        self.store = store
        """Every session's replies and captured turns."""
        self._keys = keys
        self.root_url = f"http://{_url_host(host)}:{port}"
        """`http://HOST:PORT`."""
        self.base_url = f"{self.root_url}/v1"
        """The OpenAI base URL (requests on it belong to their `user`, else `default`)."""

    def session_url(self, session_id: str) -> str:
        """`http://HOST:PORT/sessions/{id}/v1`: an OpenAI base URL whose requests all belong
        to session `session_id`."""
        return f"{self.root_url}/sessions/{quote(session_id, safe='')}/v1"

    def issue_session_key(self, session_id: str, token_budget: int | None = None) -> str:
        """A bearer key that opens `session_url(session_id)` and nothing else, for
        `token_budget` tokens (None: `ServeConfig.session_token_budget`; 0: no budget)."""
        return self._keys.issue(session_id, token_budget)

    def revoke_session_key(self, session_id: str) -> None:
        """Invalidate the session's key (its requests then need the main key)."""
        self._keys.revoke(session_id)

    def session_trajectory(self, session_id: str) -> Trajectory | None:
        """The session's captured turns so far (None when it has none)."""
        return self.store.trajectory(session_id)

    def end_session(self, session_id: str) -> None:
        """Free the session's memory (its key is revoked; its capture file stays). A later
        request to it continues from the file when there is one, else starts afresh."""
        self._keys.revoke(session_id)
        self.store.drop(session_id)

    def stop(self) -> None:
        """Stop serving and wait for the thread (idempotent)."""
        self._server.should_exit = True
        self._thread.join(timeout=10.0)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def start_server(
    policy: Policy,
    config: ServeConfig | None = None,
    *,
    renderer: ChatRenderer | None = None,
) -> RunningServer:
    """Serve `policy` from a background thread; return once it accepts connections.

    `renderer`: the chat template requests are rendered with (default: the policy's).
    Raises `InsecureBindError` for a non-loopback host without an API key.
    """
    import uvicorn

    config = config or ServeConfig()
    check_bind(config.host, config.api_key)
    store = SessionStore(policy.name, config.capture_dir)
    keys = SessionKeys(config.session_token_budget)
    app = create_app(policy, config, renderer=renderer, store=store, keys=keys)
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so, and
    # without it every response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.host, config.port))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=2,
            **uvicorn_settings(config),
        )
    )
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"skyrl-serve-{port}", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"the server on {config.host}:{port} did not start")
        time.sleep(0.01)
    return RunningServer(server, thread, config.host, port, store, keys)
