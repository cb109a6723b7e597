"""`RequestLog`: one line per HTTP request, as `skyrl serve` prints it (off with `--quiet`).

A line reads `127.0.0.1 POST /sessions/run-1/v1/chat/completions 200 0.042s`: the client
address, the method and path as the client sent them (the session prefix kept; the query string
and headers, where keys travel, never), the response status and the time from the request to
the end of the response body (a streamed reply's last chunk). `GET /health` is not logged: a
readiness probe polls it, and its lines would bury the requests.

The middleware sits outside every other one, so refusals (401, 404, 413, 429) are logged too;
a request whose connection dropped before any response is logged with status `-`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["UNLOGGED_PATHS", "RequestLog", "stderr_line"]

UNLOGGED_PATHS = frozenset({"/health"})
"""Paths whose requests are not logged (readiness probes)."""


def stderr_line(line: str) -> None:
    """Write `line` to stderr at once (the default sink)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class RequestLog:
    """ASGI middleware: after each HTTP request, `write` one line (see the module docstring)."""

    def __init__(self, app: Any, *, write: Callable[[str], None] = stderr_line):
        self.app = app
        self.write = write

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or path in UNLOGGED_PATHS:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: int | None = None

        async def logged_send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, logged_send)
        finally:
            client = scope.get("client")
            host = client[0] if client else "-"
            self.write(
                f"{host} {scope.get('method', '-')} {_printable(path)} "
                f"{status if status is not None else '-'} {time.perf_counter() - started:.3f}s"
            )


MAX_PATH_CHARS = 200
"""Longer paths are cut (with `...`) in the log line."""


def _printable(path: str) -> str:
    """`path` with control characters escaped, so a crafted path cannot forge log lines."""
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in path)
    return text if len(text) <= MAX_PATH_CHARS else text[:MAX_PATH_CHARS] + "..."
