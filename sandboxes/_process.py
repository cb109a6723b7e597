"""Sandboxes driven by the in-sandbox command server: the `bwrap` and `local` backends.

Start = create cgroups, spawn the server (inside bwrap or as a plain subprocess) and wait for
its hello. Every `exec` is then one request/response over the server's stdin/stdout, through
a `ServerChannel` (`_channel.py`), which treats the server's replies as untrusted (bounded
frames, a bounded decoder).
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
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skyrl_sdk.sandboxes import _native, tracking
from skyrl_sdk.sandboxes._channel import (  # noqa: F401 - _safe_loads: importable from here
    _GRACE_S,
    ServerChannel,
    _frame,
    _safe_loads,
)
from skyrl_sdk.sandboxes.base import DEFAULT_MAX_READ, Command, Sandbox, to_argv, to_bytes
from skyrl_sdk.sandboxes.cgroups import CgroupSet, controller_bases
from skyrl_sdk.sandboxes.spec import DEFAULT_PATH, ExecResult, SandboxError, SandboxSpec
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
_LOG_TAIL = 2000
_live: weakref.WeakSet[ServerSandbox] = weakref.WeakSet()


class ServerSandbox(Sandbox):
    """Shared client side of the command server; subclasses say how to launch it."""

    max_archive_bytes: int = DEFAULT_MAX_READ
    """The largest tar archive `download()` accepts from the server."""

    def __init__(self, spec=None):
        super().__init__(spec)
        self._server: ServerProcess | None = None
        # Requests and replies, once the server runs.
        self._channel: ServerChannel | None = None
        self._record: tracking.SandboxRecord | None = None
        self._cgroups = CgroupSet({})
        self._workspace: Path | None = None
        self._state_dir: Path | None = None
        self._fsize_rlimit: int | None = None
        self._disk = "none"  # how the workspace's size is capped: tmpfs, rlimit or none
        # Descriptors `_server_argv` opened for the launcher to inherit (bwrap's seccomp
        # program); closed here once the server is spawned.
        self._pass_fds: tuple[int, ...] = ()
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
        return _enforcement(self.spec, self._cgroups, self._disk, self._tmp_cap())

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

    @property
    def _proc(self) -> asyncio.subprocess.Process | None:
        """The command server's process (None until spawned)."""
        return None if self._server is None else self._server.proc

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
        tmpfs_disk = bool(spec.disk_bytes) and owned and os.geteuid() == 0
        # Recorded before anything exists, so a SIGKILL from here on still gets reaped.
        self._record = _record(self.id, self.backend, workspace, owned, tmpfs_disk)
        self._state_dir = tracking.save(self._record, root)
        workspace.mkdir(parents=True, exist_ok=True)
        self._disk, self._fsize_rlimit = _cap_disk(spec, workspace, owned, tmpfs_disk, self._run_as)
        self._workspace = workspace
        _seed(workspace, spec.files, self._run_as)
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
            self._server = await ServerProcess.spawn(
                argv, self._cgroups, state, self._server_cwd(workspace), self._pass_fds
            )
        finally:
            for fd in self._pass_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._pass_fds = ()
        proc = self._server.proc
        if use_bytecode:
            assert proc.stdin is not None
            proc.stdin.write(_SERVER_CODE)
        self._channel = ServerChannel(
            self.id, proc, self.spec.output_limit_bytes, self._kill_server, self._log_tail
        )
        hello = await self._channel.frames.get()
        if not hello or not hello.get("ready"):
            raise SandboxError(f"{self.backend} sandbox server did not start{self._log_tail()}")
        if not native:
            _bytecode_ok[key] = hello.get("magic") == importlib.util.MAGIC_NUMBER
        self._server_kind = "native" if hello.get("server") == "native" else "python"
        self._server_hardened = bool(hello.get("nondumpable"))

    def _kill_server(self) -> None:
        """Kill the server and everything in the sandbox now (it is no longer trusted)."""
        if self._server is not None:
            self._server.kill()
        self._cgroups.kill_all(0.5)

    def _log_tail(self) -> str:
        return _log_tail(self._state_dir)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _live.discard(self)
        if self._server is not None:
            await self._server.stop(ask=self._channel is None or self._channel.idle)
        if self._channel is not None:
            await self._channel.stop()
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
        """Send one request and wait for its reply (`ServerChannel.request`)."""
        self._check_usable()
        assert self._channel is not None
        return await self._channel.request(request, timeout, data_cap)

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
        assert self._channel is not None
        oom_killed = self._cgroups.oom_kills() > ooms
        return self._channel.exec_result(reply, end_all=end_all, oom_killed=oom_killed)

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
            _add_archive_helper(request, self._helper_python(), self.spec.timeout_s)
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


class ServerProcess:
    """The command server's process on the host: spawned inside the sandbox's cgroups with
    its stderr in the state directory's `server.log`, asked to exit, or killed."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def spawn(
        cls,
        argv: list[str],
        cgroups: CgroupSet,
        state: Path,
        cwd: str | None,
        pass_fds: tuple[int, ...],
    ) -> ServerProcess:
        """Start `argv` (the launcher of the server) with pipes to its stdin and stdout."""
        if cgroups.paths:
            # Join the cgroups before exec'ing the launcher, so every process it ever forks
            # is inside them from its first instruction.
            joins = " && ".join(f"echo $$ > {shlex.quote(str(p))}" for p in cgroups.procs_files())
            argv = ["/bin/sh", "-c", f'{joins} && exec "$@"', "sh", *argv]
        log = open(state / "server.log", "wb")  # noqa: SIM115 - handed to the child
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                cwd=cwd,
                # The sandbox's own PATH: `spec.python` must resolve inside it, not to a venv.
                env={"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"},
                limit=1 << 20,
                pass_fds=pass_fds,
            )
        finally:
            log.close()
        return cls(proc)

    def kill(self) -> None:
        """SIGKILL the server (PID 1 of its sandbox under bwrap) and close its stdin."""
        tracking.kill_quietly(self.proc.pid)
        if self.proc.stdin is not None:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()

    async def stop(self, *, ask: bool) -> None:
        """End the server: an `exit` request if `ask` (nothing in flight, still trusted),
        then EOF, then SIGKILL if it has not exited within a second."""
        proc = self.proc
        if proc.returncode is not None:
            return
        if ask and proc.stdin is not None:
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


def _record(
    sandbox_id: str, backend: str, workspace: Path, owned: bool, tmpfs_disk: bool
) -> tracking.SandboxRecord:
    """The sandbox's record for the reaper: its owned workspace, mounts and planned cgroups."""
    mounts: tuple[str, ...] = ()
    if tmpfs_disk:
        mounts = (str(workspace),)
    bases = controller_bases()
    planned = [str(bases[c] / sandbox_id) for c in ("memory", "pids", "cpu") if c in bases]
    return tracking.SandboxRecord.for_current_process(
        sandbox_id,
        backend,
        workspace=str(workspace) if owned else None,
        mounts=mounts,
        cgroups=tuple(planned),
    )


def _cap_disk(
    spec: SandboxSpec, workspace: Path, owned: bool, tmpfs_disk: bool, run_as: int | None
) -> tuple[str, int | None]:
    """Cap the workspace's size; returns how (tmpfs, rlimit or none) and the RLIMIT_FSIZE
    each command gets (None: none)."""
    if tmpfs_disk:
        tracking.mount_tmpfs(workspace, spec.disk_bytes, run_as)  # type: ignore[arg-type]
        return "tmpfs", None
    if not owned:
        # A caller's workspace carries its own cap (a `Workspace` is a sized tmpfs).
        return ("tmpfs" if tracking.tmpfs_size(workspace) else "none"), None
    if spec.disk_bytes:
        return "rlimit", spec.disk_bytes
    return "none", None


def _seed(workspace: Path, files: tuple[tuple[str, bytes], ...], run_as: int | None) -> None:
    """Write the spec's files into the workspace and hand it to the sandbox's uid."""
    for rel, content in files:
        target = workspace / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    if run_as is not None:
        chown_tree(workspace, run_as)


def _enforcement(spec: SandboxSpec, cgroups: CgroupSet, disk: str, tmp: str) -> dict[str, str]:
    """How each cap is enforced (see `Sandbox.limits`)."""
    memory = "cgroup" if cgroups.has("memory") else "rlimit"
    return {
        "memory": memory if spec.memory_bytes else "none",
        "pids": "cgroup" if cgroups.has("pids") and spec.pids else "none",
        "cpus": "cgroup" if cgroups.has("cpu") and spec.cpus else "none",
        "cpu_time": "rlimit" if spec.cpu_time_s else "none",
        "disk": disk,
        "tmp": tmp,
        "wall_time": "timeout",
        "output": "truncate",
    }


def _log_tail(state_dir: Path | None) -> str:
    """The end of the server's log, for error messages ("" when there is none)."""
    if state_dir is None:
        return ""
    try:
        text = (state_dir / "server.log").read_bytes()[-_LOG_TAIL:]
    except OSError:
        return ""
    text_s = text.decode("utf-8", "replace").strip()
    return f"\n--- sandbox log ---\n{text_s}" if text_s else ""


def _add_archive_helper(request: dict[str, Any], python: str, timeout_s: float) -> None:
    """Have the native server run the Python server's archive code for `request`."""
    request["helper"] = [python, "-I", "-S", "-c", SERVER_SOURCE, "--archive"]
    request["env"] = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
    # Inside the host's own wait for the reply, so a stuck helper gets an error reply.
    request["timeout"] = max(1.0, 0.9 * timeout_s)


@atexit.register
def _close_leftovers() -> None:
    for sandbox in list(_live):
        with contextlib.suppress(Exception):
            sandbox._teardown_now()
