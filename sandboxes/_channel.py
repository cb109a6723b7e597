"""The host's side of the command server's protocol (`_server.py`, `_server.c`).

Wire format, both ways: a 4-byte big-endian length, then a `marshal` (version 2) dict. One
request is in flight at a time; an `exec` cancelled by its caller gets a `cancel` frame, and
its reply, which still comes, is discarded before the next request.

The server shares a uid with the code it runs, so its replies are treated as untrusted: a
reply longer than the request in flight can legitimately return (two output caps for an
`exec`, `max_bytes` for a `read` or `tar`, plus a small overhead) is refused from its length
header before a byte of it is read, and payloads are decoded by a bounded decoder, not
`marshal.loads`. Either marks the sandbox broken and kills it.
"""

from __future__ import annotations

import asyncio
import contextlib
import marshal
import struct
from collections.abc import Callable
from typing import Any

from skyrl_sdk.sandboxes import tracking
from skyrl_sdk.sandboxes.spec import ExecResult, SandboxError, decode_capped

_GRACE_S = 5.0  # how long past an exec's timeout the server may take to answer

# Errors the server reports that map onto the usual Python exceptions.
_OS_ERRORS: dict[str, type[OSError]] = {
    "FileNotFoundError": FileNotFoundError,
    "IsADirectoryError": IsADirectoryError,
    "NotADirectoryError": NotADirectoryError,
    "PermissionError": PermissionError,
    "FileExistsError": FileExistsError,
}


def _frame(obj: dict[str, Any]) -> bytes:
    data = marshal.dumps(obj, 2)
    return len(data).to_bytes(4, "big") + data


# ---- replies from the server are untrusted ------------------------------------------------
# Code inside the sandbox might take over the command server (the seccomp filter and its
# non-dumpable state are there to stop that; this is the layer behind them). The host then
# must not let a reply make it allocate beyond the output cap: a frame's announced length is
# checked before any of it is read (`_read_frames`), and the payload is decoded by
# `_safe_loads`, not `marshal.loads`, which allocates a container of the announced element
# count (up to 2**31) before reading a single element.

_OVERHEAD = 64 << 10  # keys, numbers, an error message: everything in a reply but the data
_MAX_DEPTH = 4
_I32 = struct.Struct("<i")
_F64 = struct.Struct("<d")


class _BadReply(ValueError):
    """A reply that is not what the command server sends."""


def _safe_loads(data: bytes) -> Any:
    """Decode a marshal (version 2) reply made of dict, list, tuple, str, bytes, int, float,
    bool and None, where no length can exceed the bytes that are actually there."""
    value, pos = _decode(memoryview(data), 0, 0)
    if pos != len(data):
        raise _BadReply(f"{len(data) - pos} trailing bytes in a reply")
    return value


def _length(buf: memoryview, pos: int, unit: int) -> tuple[int, int]:
    if pos + 4 > len(buf):
        raise _BadReply("truncated reply")
    n = _I32.unpack_from(buf, pos)[0]
    if n < 0 or n * unit > len(buf) - pos - 4:
        raise _BadReply(f"a reply announces {n} items with {len(buf) - pos - 4} bytes left")
    return n, pos + 4


def _decode(buf: memoryview, pos: int, depth: int) -> tuple[Any, int]:
    if pos >= len(buf):
        raise _BadReply("truncated reply")
    code = buf[pos]
    pos += 1
    if code in (0x75, 0x74):  # "u" unicode, "t" interned
        n, pos = _length(buf, pos, 1)
        return str(buf[pos : pos + n], "utf-8", "surrogatepass"), pos + n
    if code == 0x73:  # "s" bytes
        n, pos = _length(buf, pos, 1)
        return bytes(buf[pos : pos + n]), pos + n
    if code == 0x69:  # "i" int32
        if pos + 4 > len(buf):
            raise _BadReply("truncated reply")
        return _I32.unpack_from(buf, pos)[0], pos + 4
    if code == 0x6C:  # "l" long: signed count of 15-bit digits, 2 bytes each
        if pos + 4 > len(buf):
            raise _BadReply("truncated reply")
        count = _I32.unpack_from(buf, pos)[0]
        digits = abs(count)
        if digits > 8 or pos + 4 + 2 * digits > len(buf):
            raise _BadReply("integer too large in a reply")
        pos += 4
        value = 0
        for i in range(digits):
            value |= int.from_bytes(buf[pos + 2 * i : pos + 2 * i + 2], "little") << (15 * i)
        return (-value if count < 0 else value), pos + 2 * digits
    if code == 0x67:  # "g" binary float
        if pos + 8 > len(buf):
            raise _BadReply("truncated reply")
        return _F64.unpack_from(buf, pos)[0], pos + 8
    if code == 0x54:  # "T"
        return True, pos
    if code == 0x46:  # "F"
        return False, pos
    if code == 0x4E:  # "N"
        return None, pos
    if depth >= _MAX_DEPTH:
        raise _BadReply("a reply nests too deeply")
    if code in (0x5B, 0x28):  # "[" list, "(" tuple: every element takes at least one byte
        n, pos = _length(buf, pos, 1)
        items = []
        for _ in range(n):
            item, pos = _decode(buf, pos, depth + 1)
            items.append(item)
        return (items if code == 0x5B else tuple(items)), pos
    if code == 0x7B:  # "{" dict, up to a "0"
        out: dict[Any, Any] = {}
        while True:
            if pos >= len(buf):
                raise _BadReply("truncated reply")
            if buf[pos] == 0x30:
                return out, pos + 1
            key, pos = _decode(buf, pos, depth + 1)
            if not isinstance(key, str):
                raise _BadReply("a reply has a non-str key")
            out[key], pos = _decode(buf, pos, depth + 1)
    raise _BadReply(f"unexpected type byte {code:#x} in a reply")


class ServerChannel:
    """The requests to one running command server and its replies (see the module
    docstring): one request in flight at a time, replies bounded and decoded as untrusted.

    `kill` kills the server and everything in its sandbox (a reply it should not have sent
    means it is no longer trusted); `log_tail` is the end of the server's log, for errors.
    """

    def __init__(
        self,
        sandbox_id: str,
        proc: asyncio.subprocess.Process,
        output_limit: int,
        kill: Callable[[], None],
        log_tail: Callable[[], str],
    ) -> None:
        self.sandbox_id = sandbox_id
        self.proc = proc
        self._output_limit = output_limit
        self._kill = kill
        self._log_tail = log_tail
        self.lock = asyncio.Lock()
        self.discard = 0  # replies still due for cancelled execs
        self.broken: str | None = None
        """Why the sandbox can no longer be used (None: it can)."""
        self.data_cap = 0  # bytes of file data the request in flight may return
        self.frames: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.reader = asyncio.get_running_loop().create_task(self._read_frames())

    @property
    def idle(self) -> bool:
        """True when no request is in flight and the server is trusted (it may be asked to
        exit)."""
        return not self.lock.locked() and self.broken is None

    async def stop(self) -> None:
        """Stop reading the server's replies."""
        self.reader.cancel()
        with contextlib.suppress(BaseException):
            await self.reader

    def _frame_cap(self) -> int:
        """The largest reply the server may legitimately send now.

        An exec reply holds at most `output_limit_bytes` of each stream (any reply due for a
        cancelled exec is one too); a `read` or `tar` reply at most its `max_bytes`.
        """
        return max(2 * self._output_limit, self.data_cap) + _OVERHEAD

    async def _read_frames(self) -> None:
        """Move whole frames from the server's stdout into a queue (cancellation-safe reads).

        A frame longer than `_frame_cap()` is refused from its 4-byte header, before a byte of
        it is read: the server is killed and the sandbox marked broken.
        """
        assert self.proc.stdout is not None
        try:
            while True:
                size = int.from_bytes(await self.proc.stdout.readexactly(4), "big")
                cap = self._frame_cap()
                if size > cap:
                    self.broken = (
                        f"its server announced a {size}-byte reply where at most {cap} bytes "
                        "can be legitimate (a compromised server?); the sandbox was killed"
                    )
                    self._kill()
                    break
                payload = await self.proc.stdout.readexactly(size)
                self.frames.put_nowait(_safe_loads(payload))
        except _BadReply as e:
            self.broken = f"its server sent a malformed reply ({e}); the sandbox was killed"
            self._kill()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, EOFError):
            pass
        self.frames.put_nowait(None)

    async def request(
        self, request: dict[str, Any], timeout: float, data_cap: int = 0
    ) -> dict[str, Any]:
        """Send one request and wait for its reply; `data_cap`: the most file bytes it may
        return (beyond the exec output cap), which bounds the reply frame."""
        if self.broken:
            raise SandboxError(f"sandbox {self.sandbox_id} is broken: {self.broken}")
        assert self.proc.stdin is not None
        async with self.lock:
            while self.discard:
                got = await self._next_frame(timeout + _GRACE_S)
                self.discard -= 1
                if got is None:
                    break
            self.data_cap = data_cap
            try:
                self.proc.stdin.write(_frame(request))
                await self.proc.stdin.drain()
            except (ConnectionError, RuntimeError) as e:
                self.broken = f"its server is gone ({e})"
                raise SandboxError(
                    f"sandbox {self.sandbox_id}: server is gone{self._log_tail()}"
                ) from e
            try:
                reply = await self._next_frame(timeout)
            except asyncio.CancelledError:
                if request.get("op") == "exec":
                    # Kill the running command; its reply still comes and is discarded later.
                    with contextlib.suppress(Exception):
                        self.proc.stdin.write(_frame({"op": "cancel"}))
                self.discard += 1
                raise
            finally:
                self.data_cap = 0
        if reply is None:
            self.broken = self.broken or "its server exited"
            raise SandboxError(f"sandbox {self.sandbox_id}: {self.broken}{self._log_tail()}")
        error = reply.get("error")
        if error:
            raise _OS_ERRORS.get(error, SandboxError)(f"{error}: {reply.get('message', '')}")
        return reply

    def exec_result(self, reply: dict[str, Any], *, end_all: bool, oom_killed: bool) -> ExecResult:
        """An exec reply as an `ExecResult`; a malformed one kills the server and marks the
        sandbox broken."""
        try:
            return exec_result(reply, end_all=end_all, oom_killed=oom_killed)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            self.broken = f"its server sent a malformed exec reply ({type(e).__name__}: {e})"
            self._kill()
            raise SandboxError(f"sandbox {self.sandbox_id} is broken: {self.broken}") from None

    async def _next_frame(self, timeout: float) -> dict[str, Any] | None:
        try:
            return await asyncio.wait_for(self.frames.get(), timeout)
        except TimeoutError:
            self.broken = f"no answer within {timeout:.1f}s"
            tracking.kill_quietly(self.proc.pid)
            raise SandboxError(
                f"sandbox {self.sandbox_id} stopped answering{self._log_tail()}"
            ) from None


def exec_result(reply: dict[str, Any], *, end_all: bool, oom_killed: bool) -> ExecResult:
    """An exec reply as an `ExecResult` (KeyError, TypeError, ValueError or AttributeError
    when the reply is malformed)."""
    out, out_cut = decode_capped(reply["out_head"], reply["out_tail"], reply["out_total"])
    err, err_cut = decode_capped(reply["err_head"], reply["err_tail"], reply["err_total"])
    return ExecResult(
        exit_code=int(reply["exit_code"]),
        stdout=out,
        stderr=err,
        timed_out=bool(reply["timed_out"]),
        truncated=out_cut or err_cut,
        duration_s=float(reply["duration"]),
        oom_killed=oom_killed,
        cancelled=bool(reply.get("cancelled")),
        stdout_bytes=int(reply["out_total"]),
        stderr_bytes=int(reply["err_total"]),
        left_running=_count(reply, "others") if end_all else None,
        orphaned=_count(reply, "orphans") if end_all else None,
    )


def _count(reply: dict[str, Any], key: str) -> int | None:
    """One of the server's process counts (`others`, `orphans`); None when it is not PID 1."""
    value = int(reply.get(key, -1))
    return None if value < 0 else value
