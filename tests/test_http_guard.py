"""`skyrl_sdk.http_guard`: the API key, body limit and bind check every skyrl server uses.

The servers' own behaviour (real processes, 100 MB bodies, the SDKs) is tested in
`tests/e2e/security/test_servers.py`; here, the guard's rules, on a small app under real uvicorn.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from skyrl_sdk.http_guard import (
    DEFAULT_MAX_REQUEST_BYTES,
    ErrorStyle,
    GuardConfig,
    InsecureBindError,
    check_bind,
    install,
    is_loopback,
    key_matches,
    presented_key,
)

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
from fastapi import FastAPI, Request

KEY = "k-123"
LIMIT = 1000


def _app(config: GuardConfig) -> FastAPI:
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        return {"bytes": len(await request.body())}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    install(app, config)
    return app


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    from skyrl_sdk.tools.search.server import ServerThread

    config = GuardConfig(api_key=KEY, max_request_bytes=LIMIT, open_paths=frozenset({"/health"}))
    with ServerThread(_app(config)) as server:
        yield server.url


def test_key_forms(url: str) -> None:
    assert httpx.get(f"{url}/health").status_code == 200  # open path
    missing = httpx.post(f"{url}/echo", content=b"x")
    assert missing.status_code == 401 and missing.json()["code"] == "missing_api_key"
    assert missing.headers["www-authenticate"] == "Bearer"
    for headers in ({"X-API-Key": KEY}, {"Authorization": f"Bearer {KEY}"}, {"authorization": f"bearer {KEY}"}):  # fmt: skip
        assert httpx.post(f"{url}/echo", content=b"x", headers=headers).json() == {"bytes": 1}
    for headers in (
        {"X-API-Key": "k-12"},
        {"X-API-Key": KEY + "4"},
        {"Authorization": f"Basic {KEY}"},
        {"Authorization": KEY},
    ):
        r = httpx.post(f"{url}/echo", content=b"x", headers=headers)
        assert r.status_code == 401, headers


def test_body_limit_declared_and_chunked(url: str) -> None:
    auth = {"X-API-Key": KEY}

    def chunks(n: int) -> Iterator[bytes]:
        for _ in range(n):
            yield b"y" * 100

    at_limit = httpx.post(f"{url}/echo", content=b"x" * LIMIT, headers=auth)
    assert at_limit.json() == {"bytes": LIMIT}
    over = httpx.post(f"{url}/echo", content=b"x" * (LIMIT + 1), headers=auth)
    assert over.status_code == 413 and over.headers["connection"] == "close"
    assert str(LIMIT) in over.json()["detail"]
    assert httpx.post(f"{url}/echo", content=chunks(10), headers=auth).json() == {"bytes": LIMIT}
    assert httpx.post(f"{url}/echo", content=chunks(11), headers=auth).status_code == 413
    # The server goes on answering after refusing (and closing) those connections.
    assert httpx.post(f"{url}/echo", content=b"ok", headers=auth).json() == {"bytes": 2}


def test_openai_error_shape() -> None:
    from skyrl_sdk.tools.search.server import ServerThread

    config = GuardConfig(api_key=KEY, error_style=ErrorStyle.OPENAI)
    with ServerThread(_app(config)) as server:
        r = httpx.post(f"{server.url}/echo", content=b"x", headers={"Authorization": "Bearer no"})
    assert r.status_code == 401
    assert r.json() == {
        "error": {
            "message": "invalid API key",
            "type": "authentication_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }


def test_no_key_means_no_authentication() -> None:
    from skyrl_sdk.tools.search.server import ServerThread

    with ServerThread(_app(GuardConfig())) as server:
        assert httpx.post(f"{server.url}/echo", content=b"abc").json() == {"bytes": 3}
    assert GuardConfig().max_request_bytes == DEFAULT_MAX_REQUEST_BYTES == 32 * 1024 * 1024


def test_helpers() -> None:
    for host in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback(host), host
        check_bind(host, None)
    for host in ("0.0.0.0", "::", "", "192.168.1.5", "example.com", "localhost.evil.com"):
        assert not is_loopback(host), host
        with pytest.raises(InsecureBindError, match="--api-key"):
            check_bind(host, None)
        check_bind(host, "key")
    assert presented_key([(b"Authorization", b"Bearer  abc ")]) == b"abc"
    assert presented_key([(b"x-api-key", b"k"), (b"authorization", b"Bearer b")]) == b"k"
    assert presented_key([(b"authorization", b"Token abc")]) is None
    assert key_matches(b"\xc3\xa9", "é") and not key_matches(None, "k")
    with pytest.raises(ValueError):
        GuardConfig(max_request_bytes=0)


# -- header-read deadline ---------------------------------------------------------------------


@pytest.mark.parametrize("http", ["h11", "httptools"])
def test_the_header_deadline_closes_a_slow_head_and_spares_a_slow_answer(http: str) -> None:
    """A request head sent a byte at a time is cut after the deadline; an answer that takes
    longer than the deadline, and a second request on the kept-alive connection, are not."""
    import asyncio
    import socket
    import threading
    import time

    import uvicorn

    from skyrl_sdk.http_guard import header_timeout_protocol

    if http == "httptools":
        pytest.importorskip("httptools")
    app = FastAPI()

    @app.get("/slow")
    async def slow() -> dict[str, str]:
        await asyncio.sleep(0.8)
        return {"ok": "yes"}

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    protocol = header_timeout_protocol(http, 0.4)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", http=protocol)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.01)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            assert c.get("/slow").json() == {"ok": "yes"}  # 0.8 s: twice the deadline
            time.sleep(0.1)
            assert c.get("/slow").status_code == 200  # the same connection, kept alive
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n")
            started, closed = time.monotonic(), None
            s.settimeout(0.1)
            while time.monotonic() - started < 5:
                try:
                    s.sendall(b"X")
                    if s.recv(100) == b"":
                        closed = time.monotonic() - started
                        break
                except TimeoutError:
                    continue
                except OSError:
                    closed = time.monotonic() - started
                    break
        assert closed is not None and 0.3 < closed < 2, closed
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_header_deadline_refuses_what_it_cannot_guard() -> None:
    from skyrl_sdk.http_guard import header_timeout_protocol

    with pytest.raises(ValueError, match="positive"):
        header_timeout_protocol("h11", 0)
    with pytest.raises(ValueError, match="h11 or httptools"):
        header_timeout_protocol("zttp", 1.0)
