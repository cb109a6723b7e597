"""One docker exec's output read from the attach socket (`_docker_exec`), without an engine:
the bytes the HTTP client read ahead with the response's headers are the stream's start."""

from __future__ import annotations

import http.client
import socket
from types import SimpleNamespace
from typing import Any

from skyrl_sdk.sandboxes import _docker_exec


def _frame(stream: int, data: bytes) -> bytes:
    """One frame of the engine's multiplexed stream (8-byte header: stream, length)."""
    return bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data


class _Api:
    """The three engine calls `exec_blocking` makes; `exec_start` gives `conn`."""

    def __init__(self, conn: Any):
        self.conn = conn

    def exec_create(self, container: str, command: list[str], **_: Any) -> dict[str, str]:
        return {"Id": "exec-1"}

    def exec_start(self, exec_id: str, socket: bool) -> Any:
        return self.conn

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        return {"ExitCode": 0, "Running": False}


def _sdk_socket(wire: bytes, *, close: bool = True) -> tuple[Any, socket.socket]:
    """What the docker SDK's `exec_start(socket=True)` returns once the engine sent `wire`
    (headers, then frames) before the client read the headers, as on a loaded host: the
    response's `fp.raw` (a SocketIO) with `_response` kept on it, its first frames already
    in the response's buffer. Also the engine's end of the connection."""
    client, engine = socket.socketpair()
    engine.sendall(wire)
    if close:
        engine.close()
    response = http.client.HTTPResponse(client)
    response.begin()  # reads the headers, and with them whatever else had arrived
    conn = response.fp.raw
    conn._response = SimpleNamespace(raw=SimpleNamespace(_fp=response))  # as the SDK keeps it
    return conn, engine


HEADERS = (
    b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.multiplexed-stream\r\n"
    b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
)


def test_output_read_ahead_with_the_headers_is_kept():
    """The engine's frames that arrived with the headers (a descheduled client reads them
    late) are the command's output: without them a `tar` download is empty and a grading
    sandbox's reward files are never seen (`reward_file_not_found`)."""
    wire = HEADERS + _frame(1, b"hello\n") + _frame(2, b"warn\n") + _frame(1, b"bye\n")
    conn, _ = _sdk_socket(wire)
    code, out, err, timed_out, _ = _docker_exec.exec_blocking(
        _Api(conn), "c", False, ["true"], None, {}, None, 5, 1 << 16
    )
    assert (code, timed_out) == (0, False)
    assert bytes(out.head) == b"hello\nbye\n"
    assert bytes(err.head) == b"warn\n"


def test_a_frame_split_between_the_buffer_and_the_socket_is_whole():
    """A frame whose start was read ahead and whose rest comes later on the socket."""
    frame = _frame(1, b"x" * 100)
    conn, engine = _sdk_socket(HEADERS + frame[:50], close=False)
    engine.sendall(frame[50:] + _frame(1, b"end\n"))
    engine.close()
    code, out, _, timed_out, _ = _docker_exec.exec_blocking(
        _Api(conn), "c", False, ["true"], None, {}, None, 5, 1 << 16
    )
    assert (code, timed_out) == (0, False)
    assert bytes(out.head) == b"x" * 100 + b"end\n"


def test_nothing_read_ahead_does_not_wait():
    """With nothing in the response's buffer, the socket is read as before (the read-ahead
    does not block on a stream whose output comes later)."""
    conn, engine = _sdk_socket(HEADERS, close=False)
    engine.sendall(_frame(1, b"later\n"))
    engine.close()
    code, out, _, timed_out, duration = _docker_exec.exec_blocking(
        _Api(conn), "c", False, ["true"], None, {}, None, 5, 1 << 16
    )
    assert (code, timed_out, bytes(out.head)) == (0, False, b"later\n")
    assert duration < 2
