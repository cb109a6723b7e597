"""Sandboxes driven by the in-sandbox command server: the `bwrap` and `local` backends.

Start = create cgroups, spawn the server (inside bwrap or as a plain subprocess) and wait for
its hello. Every `exec` is then one request/response over the server's stdin/stdout.
"""

from __future__ import annotations

import abc
import asyncio
import atexit
import contextlib
import ctypes
import importlib.util
import marshal
import os
import shlex
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skyrl_sdk.sandboxes import tracking
from skyrl_sdk.sandboxes.base import DEFAULT_MAX_READ, Command, Sandbox, to_argv, to_bytes
from skyrl_sdk.sandboxes.cgroups import CgroupSet, controller_bases
from skyrl_sdk.sandboxes.spec import DEFAULT_PATH, ExecResult, SandboxError, decode_capped

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


class ServerSandbox(Sandbox):
    """Shared client side of the command server; subclasses say how to launch it."""

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

    # ---- what subclasses provide --------------------------------------------------------------

    @abc.abstractmethod
    def _server_argv(self, workspace: Path, python_args: list[str]) -> list[str]:
        """The command that starts the server's interpreter with `python_args`."""

    @abc.abstractmethod
    def _interpreter_key(self) -> tuple[str, ...]:
        """Identifies the interpreter that runs the server (for the bytecode cache)."""

    def _server_cwd(self, workspace: Path) -> str | None:
        return None

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
        """How each cap is enforced here: `cgroup`, `rlimit` or `none`."""
        spec = self.spec
        return {
            "memory": "cgroup"
            if self._cgroups.has("memory")
            else ("rlimit" if spec.memory_bytes else "none"),
            "pids": "cgroup" if self._cgroups.has("pids") and spec.pids else "none",
            "cpus": "cgroup" if self._cgroups.has("cpu") else "none",
            "cpu_time": "rlimit" if spec.cpu_time_s else "none",
            "disk": ("tmpfs" if self._fsize_rlimit is None else "rlimit")
            if spec.disk_bytes
            else "none",
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
        if spec.disk_bytes and not owned:
            raise SandboxError(
                "SandboxSpec.disk_bytes needs a workspace the sandbox owns (workspace_dir=None)"
            )
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
            _mount_tmpfs(workspace, spec.disk_bytes, self._run_as)  # type: ignore[arg-type]
        elif spec.disk_bytes:
            self._fsize_rlimit = spec.disk_bytes
        self._workspace = workspace
        for rel, content in spec.files:
            target = workspace / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        if self._run_as is not None:
            _chown_tree(workspace, self._run_as)
        with contextlib.suppress(OSError):
            self._cgroups = CgroupSet.create(self.id, spec)
        key = self._interpreter_key()
        use_bytecode = _bytecode_ok.get(key, False)
        boot = _BOOT.format(size=len(_SERVER_CODE)) if use_bytecode else SERVER_SOURCE
        argv = self._server_argv(workspace, ["-I", "-S", "-c", boot])
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
            )
        finally:
            log.close()
        if use_bytecode:
            assert self._proc.stdin is not None
            self._proc.stdin.write(_SERVER_CODE)
        self._frames = asyncio.Queue()
        self._reader = asyncio.get_running_loop().create_task(self._read_frames())
        hello = await self._frames.get()
        if not hello or not hello.get("ready"):
            raise SandboxError(f"{self.backend} sandbox server did not start{self._log_tail()}")
        _bytecode_ok[key] = hello.get("magic") == importlib.util.MAGIC_NUMBER

    async def _read_frames(self) -> None:
        """Move whole frames from the server's stdout into a queue (cancellation-safe reads)."""
        assert self._proc is not None and self._proc.stdout is not None and self._frames
        try:
            while True:
                size = int.from_bytes(await self._proc.stdout.readexactly(4), "big")
                payload = await self._proc.stdout.readexactly(size)
                self._frames.put_nowait(marshal.loads(payload))
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, EOFError):
            self._frames.put_nowait(None)

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

    async def _request(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
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
        if reply is None:
            self._broken = "its server exited"
            raise SandboxError(f"sandbox {self.id}: its server exited{self._log_tail()}")
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
    ) -> ExecResult:
        self._check_usable()
        argv = to_argv(cmd)
        limit = self._exec_limit(timeout)
        spec = self.spec
        request: dict[str, Any] = {
            "op": "exec",
            "argv": argv,
            "env": self.base_env(env),
            "cwd": self.resolve(cwd) if cwd else self.workdir,
            "timeout": float(limit),
            "stdin": to_bytes(stdin, "stdin"),
            "limit": spec.output_limit_bytes,
            "cpu_time": spec.cpu_time_s and max(1, round(spec.cpu_time_s)),
            "fsize": self._fsize_rlimit,
            "as_bytes": None if self._cgroups.has("memory") else spec.memory_bytes,
        }
        ooms = self._cgroups.oom_kills()
        reply = await self._request(request, float(limit) + _GRACE_S)
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
        )

    async def read_file(self, path: str, *, max_bytes: int = DEFAULT_MAX_READ) -> bytes:
        reply = await self._request(
            {"op": "read", "path": self.resolve(path), "max_bytes": max_bytes}, self.spec.timeout_s
        )
        data: bytes = reply["data"]
        if len(data) > max_bytes:
            raise SandboxError(f"{path} is larger than max_bytes={max_bytes}")
        return data

    async def write_file(
        self, path: str, data: str | bytes, *, mode: int = 0o644, parents: bool = True
    ) -> None:
        payload = to_bytes(data, "data")
        await self._request(
            {
                "op": "write",
                "path": self.resolve(path),
                "data": payload,
                "mode": mode,
                "parents": parents,
            },
            self.spec.timeout_s,
        )

    async def _get_archive(self, path: str) -> bytes:
        reply = await self._request({"op": "tar", "path": path}, self.spec.timeout_s)
        return reply["data"]

    async def _put_archive(self, dest: str, data: bytes) -> None:
        await self._request({"op": "untar", "dest": dest, "data": data}, self.spec.timeout_s)


def _chown_tree(root: Path, uid: int) -> None:
    os.chown(root, uid, uid)
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                os.chown(os.path.join(base, name), uid, uid, follow_symlinks=False)


def _mount_tmpfs(path: Path, size: int, uid: int | None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    options = f"size={size},mode=0755{owner}".encode()
    if libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", 0, options) != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"cannot mount a {size}-byte tmpfs workspace: {os.strerror(err)}")


@atexit.register
def _close_leftovers() -> None:
    for sandbox in list(_live):
        with contextlib.suppress(Exception):
            sandbox._teardown_now()
