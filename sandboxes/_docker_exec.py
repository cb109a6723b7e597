"""One `docker exec` of the docker backend, read from the raw attach socket.

The output is read frame by frame from the socket rather than through the SDK's stream
helpers, so the output caps (`_Capture`, the command server's own) and a client-side deadline
hold even against a command that floods its output or leaves orphans holding the stream.

The stream starts with what the HTTP client read past the response's headers (`_read_ahead`):
on a loaded host the engine's first frames are often already there when the headers are read,
and reading the socket alone would lose them (a `tar` download's whole archive, say).
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import socket
import time
from typing import Any

from skyrl_sdk.sandboxes import tracking
from skyrl_sdk.sandboxes._server import _Capture


def exec_blocking(
    api: Any,
    container: str | None,
    has_timeout: bool,
    argv: list[str],
    stdin: bytes | None,
    env: dict[str, str],
    cwd: str | None,
    timeout: float,
    limit: int,
) -> tuple[int, _Capture, _Capture, bool, float]:
    """Run `argv` in `container` through the engine's API `api`; returns (exit code,
    stdout, stderr, timed out, seconds). `has_timeout`: the container has `timeout`, which
    then bounds the command inside it."""
    started = time.monotonic()
    command = argv
    if has_timeout:
        command = ["timeout", "-s", "KILL", str(max(1, math.ceil(timeout))), *argv]
    created = api.exec_create(
        container,
        command,
        stdin=stdin is not None,
        stdout=True,
        stderr=True,
        environment=env,
        workdir=cwd,
    )
    exec_id = created["Id"]
    conn = api.exec_start(exec_id, socket=True)
    raw: socket.socket = getattr(conn, "_sock", conn)
    out, err = _Capture(limit), _Capture(limit)
    try:
        early = _read_ahead(conn, raw)
        timed_out = _pump(raw, stdin, started + timeout + 2.0, out, err, early)
    finally:
        with contextlib.suppress(Exception):
            conn.close()
    info = api.exec_inspect(exec_id)
    code = info.get("ExitCode")
    if info.get("Running") or code is None:
        timed_out = True
        pid = info.get("Pid")
        if pid and os.path.exists(f"/proc/{pid}"):  # a local engine: end it ourselves
            tracking.kill_quietly(pid)
        code = -9
    duration = time.monotonic() - started
    if has_timeout and code == 137 and duration >= timeout:
        timed_out, code = True, -9
    return int(code), out, err, timed_out, duration


def _read_ahead(conn: Any, raw: socket.socket) -> bytes:
    """The bytes of the attach stream that the HTTP client already read from the socket
    while it parsed the response's headers: they sit in the buffered reader of the SDK's
    response (`conn._response.raw._fp.fp`, whose `raw` is `conn`), not in the socket.
    Taken without waiting for more (b"" when there are none)."""
    response = getattr(conn, "_response", None)
    reader = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    if reader is None or getattr(reader, "raw", None) is not conn:
        return b""
    previous = raw.gettimeout()
    raw.setblocking(False)  # peek then returns the buffer, or b"" instead of waiting
    try:
        held = reader.peek()
        return reader.read(len(held)) if held else b""
    except (OSError, ValueError):  # a closed reader or socket: nothing was held
        return b""
    finally:
        with contextlib.suppress(OSError):
            raw.settimeout(previous)


def _pump(
    raw: socket.socket,
    stdin: bytes | None,
    deadline: float,
    out: _Capture,
    err: _Capture,
    early: bytes = b"",
) -> bool:
    """Send `stdin`, then demultiplex the attach stream (8-byte headers: stream, length),
    `early` (its start, read ahead with the headers) first, into `out` and `err` until it
    ends; True if `deadline` came first."""
    if stdin is not None:
        raw.sendall(stdin)
        with contextlib.suppress(OSError):
            raw.shutdown(socket.SHUT_WR)
    # Client-side deadline: the in-container `timeout` kills the command, this bounds
    # the wait even when orphans keep the stream open or `timeout` is missing.
    buf = bytearray()
    _demux(buf, early, out, err)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        ready, _, _ = select.select([raw], [], [], left)
        if not ready:
            continue
        chunk = raw.recv(1 << 16)
        if not chunk:
            return False
        _demux(buf, chunk, out, err)


def _demux(buf: bytearray, chunk: bytes, out: _Capture, err: _Capture) -> None:
    """Append `chunk` to `buf` and move its complete frames into `out` / `err`."""
    buf += chunk
    while len(buf) >= 8:
        size = int.from_bytes(buf[4:8], "big")
        if len(buf) < 8 + size:
            break
        (out if buf[0] != 2 else err).add(bytes(buf[8 : 8 + size]))
        del buf[: 8 + size]
