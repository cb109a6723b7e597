"""An ASGI guard in front of skyrl's HTTP servers: API key, request-size limit, safe binding.

`skyrl serve`, `skyrl tinker serve` and `skyrl search serve` install `HttpGuard` as the outermost
middleware of their app, so that every request passes it before routing and before FastAPI
reads or parses a byte of the body:

- **API key.** With a key set, a request must carry it as `Authorization: Bearer KEY` (what the
  `openai` SDK and our clients send) or `X-API-Key: KEY` (what the `tinker` SDK sends); a missing
  or wrong key gets 401. Keys are compared in constant time (as SHA-256 digests, so not even
  the key's length leaks). Paths listed as open (liveness probes) skip the check.
- **Request size.** A body larger than `max_request_bytes` gets 413 without being read into
  memory: a declared `Content-Length` is checked before the app runs (not a byte of the body is
  read), and a chunked body is counted as it streams in and dropped as soon as the count passes
  the limit (at most `max_request_bytes` are ever held). Either way the response carries
  `Connection: close`, so the server reads no more of that connection.
- **Header-read time.** A client that opens a connection and sends its request head a byte
  at a time would hold the connection (and a slot of the server's) forever: uvicorn's
  keep-alive timer is cancelled by any byte received, and a new connection has none. The
  servers run uvicorn with `header_timeout_protocol(...)`, its HTTP protocol with one more
  timer: a connection must deliver a whole request head within `header_timeout_s` (10 s by
  default) of opening, or of its previous response ending, else it is closed. Time spent in
  the body or the response is not limited by it (the size limit bounds the body).
- **Binding.** `check_bind(host, api_key)` refuses a non-loopback address without a key: an
  unauthenticated server reachable from other machines (or from a sandbox that shares the host
  network) is a remote-control endpoint for the models and files behind it.

The guard has no dependency beyond the standard library; it works with any ASGI app.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

API_KEY_ENV = "SKYRL_API_KEY"
"""Environment variable the servers read their API key from when `--api-key` is not given."""

DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
"""Largest request body the servers accept by default (32 MiB)."""

DEFAULT_HEADER_TIMEOUT_S = 10.0
"""Seconds a connection has to send a whole request head (`header_timeout_protocol`)."""

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
"""Host names that always mean the loopback interface."""


class ErrorStyle(StrEnum):
    """The JSON shape of the guard's error bodies (each server keeps its clients' shape)."""

    OPENAI = "openai"
    """`{"error": {"message", "type", "param", "code"}}`, as the OpenAI API answers."""
    DETAIL = "detail"
    """`{"detail": message, "error": message, "code": refusal}`: FastAPI's shape plus the
    Tinker server's `error` field."""


class Refusal(StrEnum):
    """Why the guard answered a request itself."""

    MISSING_KEY = "missing_api_key"
    """A key is required and the request carried none."""
    WRONG_KEY = "invalid_api_key"
    """The request carried a key that is not the server's."""
    TOO_LARGE = "request_too_large"
    """The body is (or declared itself) larger than the limit."""
    BAD_LENGTH = "invalid_content_length"
    """The `Content-Length` header is not a non-negative integer."""


_STATUS = {
    Refusal.MISSING_KEY: 401,
    Refusal.WRONG_KEY: 401,
    Refusal.TOO_LARGE: 413,
    Refusal.BAD_LENGTH: 400,
}


class InsecureBindError(ValueError):
    """A server was asked to bind a non-loopback address without an API key."""


@dataclass(frozen=True)
class GuardConfig:
    """What `HttpGuard` enforces."""

    api_key: str | None = None
    """The key every request must carry (None or empty: no authentication, loopback only)."""
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    """Largest body accepted; larger ones get 413 before they are read."""
    open_paths: frozenset[str] = field(default_factory=frozenset)
    """Paths served without a key (liveness probes); the size limit still applies."""
    error_style: ErrorStyle = ErrorStyle.DETAIL
    """JSON shape of 401 / 413 bodies."""

    def __post_init__(self) -> None:
        if self.max_request_bytes < 1:
            raise ValueError(f"max_request_bytes must be positive, got {self.max_request_bytes}")


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps a server reachable from this machine only."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # any other name may resolve to a public interface


def check_bind(host: str, api_key: str | None) -> None:
    """Raise `InsecureBindError` if `host` is not loopback and no API key is set."""
    if not api_key and not is_loopback(host):
        raise InsecureBindError(
            f"refusing to bind {host!r} without an API key: anyone who can reach it could use "
            f"the server; pass --api-key KEY (or set ${API_KEY_ENV}), or bind 127.0.0.1"
        )


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    """The key a request carries: `X-API-Key`, else the token of `Authorization: Bearer`."""
    bearer = None
    for name, value in headers:
        lower = name.lower()
        if lower == b"x-api-key":
            return value.strip()
        if lower == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer":
                bearer = token.strip()
    return bearer


def key_matches(presented: bytes | None, expected: str) -> bool:
    """Constant-time comparison: its time depends neither on how many leading bytes match nor
    on the lengths (digests of equal size are compared)."""
    if presented is None:
        return False
    ours = hashlib.sha256(expected.encode("utf-8")).digest()
    return hmac.compare_digest(hashlib.sha256(presented).digest(), ours)


def error_body(style: ErrorStyle, refusal: Refusal, message: str) -> bytes:
    """The JSON body of a refusal in `style`."""
    if style is ErrorStyle.OPENAI:
        kind = "authentication_error" if _STATUS[refusal] == 401 else "invalid_request_error"
        payload: dict[str, Any] = {
            "error": {"message": message, "type": kind, "param": None, "code": refusal.value}
        }
    else:
        payload = {"detail": message, "error": message, "code": refusal.value}
    return json.dumps(payload).encode()


class HttpGuard:
    """ASGI middleware enforcing a `GuardConfig` (see the module docstring).

    Install it outermost, e.g. `app.add_middleware(HttpGuard, config=GuardConfig(...))`.
    """

    def __init__(self, app: ASGIApp, config: GuardConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan: nothing to guard
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers", ()))
        refusal = self._auth_refusal(scope, headers)
        if refusal is not None:
            await self._refuse(scope, send, refusal)
            return
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        limit = self.config.max_request_bytes
        for name, value in headers:
            if name.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared < 0:
                    await self._refuse(scope, send, Refusal.BAD_LENGTH)
                    return
                if declared > limit:  # refused before a byte of the body is read
                    await self._refuse(scope, send, Refusal.TOO_LARGE)
                    return
        body = await _read_body(receive, limit)
        if body is None:
            await self._refuse(scope, send, Refusal.TOO_LARGE)
            return
        if isinstance(body, _Disconnected):
            return  # the client left before its body arrived: nobody to answer
        await self.app(scope, _replay(body, receive), send)

    def _auth_refusal(self, scope: Scope, headers: list[tuple[bytes, bytes]]) -> Refusal | None:
        key = self.config.api_key
        if not key or scope.get("path") in self.config.open_paths:
            return None
        presented = presented_key(headers)
        if presented is None:
            return Refusal.MISSING_KEY
        return None if key_matches(presented, key) else Refusal.WRONG_KEY

    async def _refuse(self, scope: Scope, send: Send, refusal: Refusal) -> None:
        status = _STATUS[refusal]
        if refusal is Refusal.TOO_LARGE:
            message = (
                f"request body larger than the server's limit of "
                f"{self.config.max_request_bytes} bytes (--max-request-bytes)"
            )
        elif refusal is Refusal.BAD_LENGTH:
            message = "Content-Length must be a non-negative integer"
        elif refusal is Refusal.MISSING_KEY:
            message = (
                "this server requires an API key: send it as 'Authorization: Bearer KEY' "
                "or 'X-API-Key: KEY'"
            )
        else:
            message = "invalid API key"
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
            return
        await send_refusal(send, status, error_body(self.config.error_style, refusal, message))


class _Disconnected:
    """The client disconnected while its body was being read."""


async def _read_body(receive: Receive, limit: int) -> bytes | _Disconnected | None:
    """The whole request body, or None as soon as it passes `limit` bytes.

    The guard reads the body itself (rather than counting inside the app's reads) so that a
    refused body is dropped here at once: no parser holds a partial copy, and no exception
    raised mid-parse keeps one alive in a traceback. One growing `bytearray` (not a list of
    small chunks) so that the memory goes back to the system when it is dropped.
    """
    buffer = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return _Disconnected()
        chunk: bytes = message.get("body", b"")
        more = message.get("more_body", False)
        if not more and not buffer:  # the usual case, one message: no copy
            return chunk if len(chunk) <= limit else None
        buffer += chunk
        if len(buffer) > limit:
            return None
        if not more:
            return bytes(buffer)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that yields `body` as one message, then the server's own messages
    (a later `http.disconnect`, which streaming responses listen for)."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def install(app: Any, config: GuardConfig) -> None:
    """Add `HttpGuard` to a Starlette/FastAPI `app` (outside its routing and body parsing)."""
    app.add_middleware(HttpGuard, config=config)


async def send_refusal(send: Any, status: int, body: bytes) -> None:
    """Answer an ASGI request with `status` and the JSON `body`, closing the connection (the
    server stops reading it, so an unread, possibly large, body is not drained); a 401 says
    the scheme it wants (`WWW-Authenticate: Bearer`)."""
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def default_http() -> str:
    """uvicorn's HTTP parser as its `auto` picks it: "httptools" when it imports, else "h11"."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "h11"
    return "httptools"


def header_timeout_protocol(http: str, timeout_s: float) -> type[Any]:
    """uvicorn's HTTP protocol `http` ("h11" or "httptools", as `uvicorn.Config(http=...)`
    names them) with a header-read deadline: a connection that has not delivered a complete
    request head `timeout_s` seconds after it opened, or after its previous response ended,
    is closed. Pass the class as `uvicorn.Config(http=...)`.

    uvicorn starts a new request cycle (`protocol.cycle`) only once a request's head is
    complete, in both implementations; the deadline closes the connection if the cycle is
    still the one it saw when armed and that one has been answered.
    """
    if timeout_s <= 0:
        raise ValueError(f"header timeout must be positive, got {timeout_s}")
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    if http not in ("h11", "httptools"):
        raise ValueError(f"no header timeout for uvicorn's {http!r} protocol: use h11 or httptools")
    base: type[Any] = import_from_string(HTTP_PROTOCOLS[http])

    class HeaderDeadline(base):  # type: ignore[misc, valid-type]
        """`base` with the header-read deadline (see `header_timeout_protocol`)."""

        _deadline: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            if self.transport is None or self.transport.is_closing():
                return
            self._deadline = self.loop.call_later(timeout_s, self._expire, self.cycle)

        def _expire(self, armed: Any) -> None:
            self._deadline = None
            waiting = armed is None or armed.response_complete  # not mid-request
            if self.cycle is armed and waiting and not self.transport.is_closing():
                self.transport.close()  # no request head in time: nothing to answer

    HeaderDeadline.__name__ = HeaderDeadline.__qualname__ = f"HeaderDeadline{base.__name__}"
    return HeaderDeadline
