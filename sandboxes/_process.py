"""Sandboxes driven by the in-sandbox command server: the `bwrap` and `local` backends.

Start = create cgroups, spawn the server (inside bwrap or as a plain subprocess) and wait for
its hello. Every `exec` is then one request/response over the server's stdin/stdout.

The server shares a uid with the code it runs, so its replies are treated as untrusted: a
reply longer than the request in flight can legitimately return (two output caps for an
`exec`, `max_bytes` for a `read` or `tar`, plus a small overhead) is refused from its length
header before a byte of it is read, and payloads are decoded by a bounded decoder, not
`marshal.loads`. Either marks the sandbox broken and kills it.
"""

from __future__ import annotations

import abc
import asyncio
import atexit
import contextlib
import importlib.util
import marshal
import os
import shlex
import struct
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skyrl_sdk.sandboxes import _native, tracking
from skyrl_sdk.sandboxes.base import DEFAULT_MAX_READ, Command, Sandbox, to_argv, to_bytes
from skyrl_sdk.sandboxes.cgroups import CgroupSet, controller_bases
from skyrl_sdk.sandboxes.spec import DEFAULT_PATH, ExecResult, SandboxError, decode_capped
from skyrl_sdk.sandboxes.workspace import chown_tree

SERVER_SOURCE = (Path(__file__).with_name("_server.py")).read_text()
# Compiling the server's source takes 4-10 ms of a ~20 ms start. Once an interpreter has said
# (in its hello) that its bytecode magic matches ours, later starts send it bytecode compiled
# here, read from stdin by this bootstrap, instead of the source.
_BOOT = (
    "import os,marshal\nb=b''\nwhile len(b)<{size}:\n c=os.read(0,{size}-len(b))\n"
    " if not c:raise SystemExit(1)\n b+=c\nexec(marshal.loads(b))"
)
_SERVER_CODE = marshal.dumps(compile(SERVER_SOURCE, "<sandbox-server>", "exec"))
_bytecode_ok: dict[tuple[str, ...], bool] = {}
SANDBOX_UID = 65534  # nobody: sandboxes started by root run as this real, unprivileged user
_GRACE_S = 5.0  # how long past an exec's timeout the server may take to answer
_LOG_TAIL = 2000
_live: weakref.WeakSet[ServerSandbox] = weakref.WeakSet()

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


class ServerSandbox(Sandbox):
    """Shared client side of the command server; subclasses say how to launch it."""

    max_archive_bytes: int = DEFAULT_MAX_READ
    """The largest tar archive `download()` accepts from the server."""

    def __init__(self, spec=None):
        super().__init__(spec)
        self._proc: asyncio.subprocess.Process | None = None
        self._frames: asyncio.Queue[dict[str, Any] | None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._discard = 0  # replies still due for cancelled execs
        self._broken: str | None = None
        self._record: tracking.SandboxRecord | None = None
        self._cgroups = CgroupSet({})
        self._workspace: Path | None = None
        self._state_dir: Path | None = None
        self._fsize_rlimit: int | None = None
        self._disk = "none"  # how the workspace's size is capped: tmpfs, rlimit or none
        # Descriptors `_server_argv` opened for the launcher to inherit (bwrap's seccomp
        # program); closed here once the server is spawned.
        self._pass_fds: tuple[int, ...] = ()
        self._data_cap = 0  # bytes of file data the request in flight may return
        self._server_hardened = False  # the server said it made itself non-dumpable
        self._seccomp_loaded = False  # set by backends that load a seccomp filter
        self._userns_disabled = False  # set by backends that disable nested user namespaces
        # The native command server's binary on the host (None: the Python server), chosen
        # at start; `_server_argv` launches it instead of the interpreter.
        self._server_binary: str | None = None
        self._server_kind: str | None = None

    # ---- what subclasses provide --------------------------------------------------------------

    @abc.abstractmethod
    def _server_argv(self, workspace: Path, python_args: list[str]) -> list[str]:
        """The command that starts the server's interpreter with `python_args`."""

    @abc.abstractmethod
    def _interpreter_key(self) -> tuple[str, ...]:
        """Identifies the interpreter that runs the server (for the bytecode cache)."""

    def _server_cwd(self, workspace: Path) -> str | None:
        return None

    def _server_needs_static(self) -> bool:
        """True if the native server must be a static binary (it runs in an image root)."""
        return False

    def _helper_python(self) -> str:
        """The interpreter that runs tar/untar helpers under the native server."""
        return self.spec.python

    def _pick_server(self) -> str | None:
        """The native server's binary to launch, or None for the Python server."""
        native = _native.choose(need_static=self._server_needs_static())
        return None if native is None else str(native.path)

    @property
    def server_kind(self) -> str | None:
        """Which command server runs this sandbox: `native` (`_server.c`) or `python`
        (`_server.py`); None until started. `$SKYRL_SANDBOX_SERVER` chooses."""
        return self._server_kind

    def _command(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """The argv and environment the server is asked to run for one `exec` (a two-uid
        grading sandbox routes them through its exec shim)."""
        return argv, env

    @property
    def _run_as(self) -> int | None:
        """Host uid the sandbox runs as (the workspace is handed to it), or None for ours."""
        return None

    # ---- lifecycle ----------------------------------------------------------------------------

    @property
    def host_workspace(self) -> Path | None:
        return self._workspace

    @property
    def limits(self) -> dict[str, str]:
        """How each cap is enforced here (see `Sandbox.limits`)."""
        spec = self.spec
        memory = "cgroup" if self._cgroups.has("memory") else "rlimit"
        return {
            "memory": memory if spec.memory_bytes else "none",
            "pids": "cgroup" if self._cgroups.has("pids") and spec.pids else "none",
            "cpus": "cgroup" if self._cgroups.has("cpu") and spec.cpus else "none",
            "cpu_time": "rlimit" if spec.cpu_time_s else "none",
            "disk": self._disk,
            "tmp": self._tmp_cap(),
            "wall_time": "timeout",
            "output": "truncate",
        }

    def _tmp_cap(self) -> str:
        """How the sandbox's `/tmp` is size-capped (`tmpfs` or `none`)."""
        return "none"

    @property
    def hardening(self) -> dict[str, bool]:
        """Which defences of the command server are on (known once started):
        `nondumpable` (the server said so in its hello), `seccomp` (a filter was loaded),
        `no_userns` (nested user namespaces are disabled)."""
        return {
            "nondumpable": self._server_hardened,
            "seccomp": self._seccomp_loaded,
            "no_userns": self._seccomp_loaded or self._userns_disabled,
        }

    async def start(self) -> None:
        if self._started:
            return
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed")
        tracking.reap_at_startup()
        spec = self.spec
        self._started = True
        _live.add(self)
        try:
            await asyncio.wait_for(self._launch(), spec.start_timeout_s)
        except BaseException as e:
            log = self._log_tail()
            await self.close()
            if isinstance(e, SandboxError | asyncio.CancelledError):
                raise
            if isinstance(e, asyncio.TimeoutError):
                raise SandboxError(
                    f"{self.backend} sandbox did not start within {spec.start_timeout_s}s{log}"
                ) from None
            raise SandboxError(
                f"{self.backend} sandbox failed to start: {type(e).__name__}: {e}{log}"
            ) from e

    async def _launch(self) -> None:
        spec = self.spec
        root = tracking.ensure_state_root()
        state = root / self.id
        owned = spec.workspace_dir is None
        workspace = state / "ws" if owned else Path(spec.workspace_dir).resolve()  # type: ignore[arg-type]
        mounts: tuple[str, ...] = ()
        tmpfs_disk = bool(spec.disk_bytes) and owned and os.geteuid() == 0
        if tmpfs_disk:
            mounts = (str(workspace),)
        bases = controller_bases()
        planned = [str(bases[c] / self.id) for c in ("memory", "pids", "cpu") if c in bases]
        # Recorded before anything exists, so a SIGKILL from here on still gets reaped.
        self._record = tracking.SandboxRecord.for_current_process(
            self.id,
            self.backend,
            workspace=str(workspace) if owned else None,
            mounts=mounts,
            cgroups=tuple(planned),
        )
        self._state_dir = tracking.save(self._record, root)
        workspace.mkdir(parents=True, exist_ok=True)
        if tmpfs_disk:
            tracking.mount_tmpfs(workspace, spec.disk_bytes, self._run_as)  # type: ignore[arg-type]
            self._disk = "tmpfs"
        elif not owned:
            # A caller's workspace carries its own cap (a `Workspace` is a sized tmpfs).
            self._disk = "tmpfs" if tracking.tmpfs_size(workspace) else "none"
        elif spec.disk_bytes:
            self._fsize_rlimit = spec.disk_bytes
            self._disk = "rlimit"
        self._workspace = workspace
        for rel, content in spec.files:
            target = workspace / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        if self._run_as is not None:
            chown_tree(workspace, self._run_as)
        with contextlib.suppress(OSError):
            self._cgroups = CgroupSet.create(self.id, spec)
        if _native.settled():
            self._server_binary = self._pick_server()
        else:  # the first start of this process may compile the server: off the event loop
            self._server_binary = await asyncio.to_thread(self._pick_server)
        native = self._server_binary is not None
        key = self._interpreter_key()
        use_bytecode = not native and _bytecode_ok.get(key, False)
        boot = _BOOT.format(size=len(_SERVER_CODE)) if use_bytecode else SERVER_SOURCE
        try:
            argv = self._server_argv(workspace, [] if native else ["-I", "-S", "-c", boot])
            await self._spawn(argv, workspace, state)
        finally:
            for fd in self._pass_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._pass_fds = ()
        assert self._proc is not None
        if use_bytecode:
            assert self._proc.stdin is not None
            self._proc.stdin.write(_SERVER_CODE)
        self._frames = asyncio.Queue()
        self._reader = asyncio.get_running_loop().create_task(self._read_frames())
        hello = await self._frames.get()
        if not hello or not hello.get("ready"):
            raise SandboxError(f"{self.backend} sandbox server did not start{self._log_tail()}")
        if not native:
            _bytecode_ok[key] = hello.get("magic") == importlib.util.MAGIC_NUMBER
        self._server_kind = "native" if hello.get("server") == "native" else "python"
        self._server_hardened = bool(hello.get("nondumpable"))

    async def _spawn(self, argv: list[str], workspace: Path, state: Path) -> None:
        if self._cgroups.paths:
            # Join the cgroups before exec'ing the launcher, so every process it ever forks
            # is inside them from its first instruction.
            joins = " && ".join(
                f"echo $$ > {shlex.quote(str(p))}" for p in self._cgroups.procs_files()
            )
            argv = ["/bin/sh", "-c", f'{joins} && exec "$@"', "sh", *argv]
        log = open(state / "server.log", "wb")  # noqa: SIM115 - handed to the child
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                cwd=self._server_cwd(workspace),
                # The sandbox's own PATH: `spec.python` must resolve inside it, not to a venv.
                env={"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"},
                limit=1 << 20,
                pass_fds=self._pass_fds,
            )
        finally:
            log.close()

    def _frame_cap(self) -> int:
        """The largest reply the server may legitimately send now.

        An exec reply holds at most `output_limit_bytes` of each stream (any reply due for a
        cancelled exec is one too); a `read` or `tar` reply at most its `max_bytes`.
        """
        return max(2 * self.spec.output_limit_bytes, self._data_cap) + _OVERHEAD

    async def _read_frames(self) -> None:
        """Move whole frames from the server's stdout into a queue (cancellation-safe reads).

        A frame longer than `_frame_cap()` is refused from its 4-byte header, before a byte of
        it is read: the server is killed and the sandbox marked broken.
        """
        assert self._proc is not None and self._proc.stdout is not None and self._frames
        try:
            while True:
                size = int.from_bytes(await self._proc.stdout.readexactly(4), "big")
                cap = self._frame_cap()
                if size > cap:
                    self._broken = (
                        f"its server announced a {size}-byte reply where at most {cap} bytes "
                        "can be legitimate (a compromised server?); the sandbox was killed"
                    )
                    self._kill_server()
                    break
                payload = await self._proc.stdout.readexactly(size)
                self._frames.put_nowait(_safe_loads(payload))
        except _BadReply as e:
            self._broken = f"its server sent a malformed reply ({e}); the sandbox was killed"
            self._kill_server()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, EOFError):
            pass
        self._frames.put_nowait(None)

    def _kill_server(self) -> None:
        """Kill the server and everything in the sandbox now (it is no longer trusted)."""
        if self._proc is not None:
            tracking.kill_quietly(self._proc.pid)
            if self._proc.stdin is not None:
                with contextlib.suppress(Exception):
                    self._proc.stdin.close()
        self._cgroups.kill_all(0.5)

    def _log_tail(self) -> str:
        if self._state_dir is None:
            return ""
        try:
            text = (self._state_dir / "server.log").read_bytes()[-_LOG_TAIL:]
        except OSError:
            return ""
        text_s = text.decode("utf-8", "replace").strip()
        return f"\n--- sandbox log ---\n{text_s}" if text_s else ""

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _live.discard(self)
        proc = self._proc
        if proc is not None and proc.returncode is None:
            if not self._lock.locked() and self._broken is None and proc.stdin is not None:
                with contextlib.suppress(Exception):
                    proc.stdin.write(_frame({"op": "exit"}))
            if proc.stdin is not None:
                with contextlib.suppress(Exception):
                    proc.stdin.close()  # EOF: the server exits even if it missed "exit"
            try:
                await asyncio.wait_for(proc.wait(), 1.0)
            except TimeoutError:
                tracking.kill_quietly(proc.pid)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 1.0)
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
        if self._record is not None:
            record = self._record
            await asyncio.to_thread(tracking.release, record)

    def _teardown_now(self) -> None:
        """Synchronous last-resort cleanup (interpreter exit)."""
        if self._closed:
            return
        self._closed = True
        if self._proc is not None:
            tracking.kill_quietly(self._proc.pid)
        if self._record is not None:
            tracking.release(self._record)

    # ---- requests -----------------------------------------------------------------------------

    async def _request(
        self, request: dict[str, Any], timeout: float, data_cap: int = 0
    ) -> dict[str, Any]:
        """Send one request and wait for its reply; `data_cap`: the most file bytes it may
        return (beyond the exec output cap), which bounds the reply frame."""
        self._check_usable()
        if self._broken:
            raise SandboxError(f"sandbox {self.id} is broken: {self._broken}")
        assert self._proc is not None and self._proc.stdin is not None and self._frames
        async with self._lock:
            while self._discard:
                got = await self._next_frame(timeout + _GRACE_S)
                self._discard -= 1
                if got is None:
                    break
            self._data_cap = data_cap
            try:
                self._proc.stdin.write(_frame(request))
                await self._proc.stdin.drain()
            except (ConnectionError, RuntimeError) as e:
                self._broken = f"its server is gone ({e})"
                raise SandboxError(f"sandbox {self.id}: server is gone{self._log_tail()}") from e
            try:
                reply = await self._next_frame(timeout)
            except asyncio.CancelledError:
                if request.get("op") == "exec":
                    # Kill the running command; its reply still comes and is discarded later.
                    with contextlib.suppress(Exception):
                        self._proc.stdin.write(_frame({"op": "cancel"}))
                self._discard += 1
                raise
            finally:
                self._data_cap = 0
        if reply is None:
            self._broken = self._broken or "its server exited"
            raise SandboxError(f"sandbox {self.id}: {self._broken}{self._log_tail()}")
        error = reply.get("error")
        if error:
            raise _OS_ERRORS.get(error, SandboxError)(f"{error}: {reply.get('message', '')}")
        return reply

    async def _next_frame(self, timeout: float) -> dict[str, Any] | None:
        assert self._frames is not None
        try:
            return await asyncio.wait_for(self._frames.get(), timeout)
        except TimeoutError:
            self._broken = f"no answer within {timeout:.1f}s"
            if self._proc is not None:
                tracking.kill_quietly(self._proc.pid)
            raise SandboxError(f"sandbox {self.id} stopped answering{self._log_tail()}") from None

    async def exec(
        self,
        cmd: Command,
        *,
        timeout: float | None = None,
        stdin: str | bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        end_all: bool = False,
    ) -> ExecResult:
        """`Sandbox.exec`; `end_all=True` (this backend only) also kills every other process
        of the sandbox the moment the command exits, and counts them in
        `ExecResult.left_running`, so nothing it started can act after its exit
        (`ExecResult.orphaned` counts those that outlived their parent but ended before)."""
        self._check_usable()
        argv = to_argv(cmd)
        limit = self._exec_limit(timeout)
        spec = self.spec
        argv, command_env = self._command(argv, self.base_env(env))
        request: dict[str, Any] = {
            "op": "exec",
            "argv": argv,
            "env": command_env,
            "cwd": self.resolve(cwd) if cwd else self.workdir,
            "timeout": float(limit),
            "stdin": to_bytes(stdin, "stdin"),
            "limit": spec.output_limit_bytes,
            "cpu_time": spec.cpu_time_s and max(1, round(spec.cpu_time_s)),
            "fsize": self._fsize_rlimit,
            "as_bytes": None if self._cgroups.has("memory") else spec.memory_bytes,
        }
        if end_all:
            request["end_all"] = True
        ooms = self._cgroups.oom_kills()
        reply = await self._request(request, float(limit) + _GRACE_S)
        try:
            out, out_cut = decode_capped(reply["out_head"], reply["out_tail"], reply["out_total"])
            err, err_cut = decode_capped(reply["err_head"], reply["err_tail"], reply["err_total"])
            return ExecResult(
                exit_code=int(reply["exit_code"]),
                stdout=out,
                stderr=err,
                timed_out=bool(reply["timed_out"]),
                truncated=out_cut or err_cut,
                duration_s=float(reply["duration"]),
                oom_killed=self._cgroups.oom_kills() > ooms,
                cancelled=bool(reply.get("cancelled")),
                stdout_bytes=int(reply["out_total"]),
                stderr_bytes=int(reply["err_total"]),
                left_running=_count(reply, "others") if end_all else None,
                orphaned=_count(reply, "orphans") if end_all else None,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            self._broken = f"its server sent a malformed exec reply ({type(e).__name__}: {e})"
            self._kill_server()
            raise SandboxError(f"sandbox {self.id} is broken: {self._broken}") from None

    async def read_file(self, path: str, *, max_bytes: int = DEFAULT_MAX_READ) -> bytes:
        reply = await self._request(
            {"op": "read", "path": self.resolve(path), "max_bytes": max_bytes},
            self.spec.timeout_s,
            data_cap=max_bytes + 1,
        )
        data: bytes = reply["data"]
        if len(data) > max_bytes:
            raise SandboxError(f"{path} is larger than max_bytes={max_bytes}")
        return data

    async def write_file(
        self, path: str, data: str | bytes, *, mode: int = 0o644, parents: bool = True
    ) -> None:
        payload = to_bytes(data, "data")
        request: dict[str, Any] = {
            "op": "write",
            "path": self.resolve(path),
            "data": payload,
            "mode": mode,
            "parents": parents,
        }
        await self._request(request, self.spec.timeout_s)

    def _archive_request(self, request: dict[str, Any]) -> dict[str, Any]:
        """The native server does not implement tar: it runs this helper (the Python
        server's own tar code, by the sandbox's interpreter) with the request on stdin."""
        if self._server_binary is not None:
            python = self._helper_python()
            request["helper"] = [python, "-I", "-S", "-c", SERVER_SOURCE, "--archive"]
            request["env"] = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
            # Inside the host's own wait for the reply, so a stuck helper gets an error reply.
            request["timeout"] = max(1.0, 0.9 * self.spec.timeout_s)
        return request

    async def _get_archive(self, path: str) -> bytes:
        reply = await self._request(
            self._archive_request({"op": "tar", "path": path, "max_bytes": self.max_archive_bytes}),
            self.spec.timeout_s,
            data_cap=self.max_archive_bytes,
        )
        return reply["data"]

    async def _put_archive(self, dest: str, data: bytes) -> None:
        await self._request(
            self._archive_request({"op": "untar", "dest": dest, "data": data}),
            self.spec.timeout_s,
        )


def _count(reply: dict[str, Any], key: str) -> int | None:
    """One of the server's process counts (`others`, `orphans`); None when it is not PID 1."""
    value = int(reply.get(key, -1))
    return None if value < 0 else value


@atexit.register
def _close_leftovers() -> None:
    for sandbox in list(_live):
        with contextlib.suppress(Exception):
            sandbox._teardown_now()
