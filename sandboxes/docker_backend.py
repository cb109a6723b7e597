"""The `docker` backend: a container per sandbox, through the docker SDK (imported lazily).

Same guarantees as bwrap:
- network: always `network_mode="none"`, never the host's network and never a bridge (our
  engines run with `--bridge=none --iptables=false`). With `network=True` (or
  `forward_ports`), pasta is attached to the container's own namespace with the same firewall
  as bwrap's (`network.py`): outbound user-mode networking, no route to the host. That needs
  root and a local engine; otherwise the start is refused with `SandboxError` saying why;
- no Docker socket inside: `ro_binds` (and a caller's workspace) that would show the engine's
  socket are refused;
- a non-root user (uid 65534 when we are root, else our own uid) with every capability
  dropped and `no-new-privileges`;
- a read-only root filesystem, the workspace bind-mounted read-write at the working
  directory or above it (`mount_at`; as root, a tmpfs of `disk_bytes` on the host, like
  bwrap's), the caller's other writable directories (`binds`), and size-capped tmpfs `/tmp`
  (`disk_bytes`) and `/run`;
- memory (swap included), pids and CPU caps from the engine;
- `SHELL` set as bwrap sets it (/bin/bash where the image has it, else /bin/sh).

The engine is found through `DOCKER_HOST` (or the
default socket). Each `exec` is a `docker exec` (~80 ms) whose output is read from the raw
attach socket, so caps and timeouts hold even against a flood. Images come from `spec.image`;
build them locally (`docker build` or `docker import`), since nothing can be pulled here.
Containers carry their owner in labels: `reap_containers()` removes those of dead owners.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from skyrl_sdk.sandboxes import _docker_exec, network, tracking
from skyrl_sdk.sandboxes._server import _Capture
from skyrl_sdk.sandboxes.base import DEFAULT_MAX_READ, Command, Sandbox, to_argv, to_bytes
from skyrl_sdk.sandboxes.spec import BackendUnavailable, ExecResult, SandboxError, decode_capped
from skyrl_sdk.sandboxes.workspace import chown_tree

LABEL = "skyrl.sandbox"
SANDBOX_UID = 65534  # nobody: the container's user when we are root
_RUN_TMPFS_BYTES = 64 << 20  # /run holds sockets and pid files, not data
# Where engines usually listen; with DOCKER_HOST's own socket, never shown to a sandbox.
_ENGINE_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")
_KEEPALIVE = ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600; done"]
_PROBE = "command -v timeout >/dev/null && echo timeout; [ -x /bin/bash ] && echo bash; true"
_reaped_engines: set[str] = set()


def docker_client() -> Any:
    """A client for the engine in `DOCKER_HOST`, or `BackendUnavailable` saying what is wrong."""
    try:
        import docker
    except ImportError:
        raise BackendUnavailable(
            "the docker backend needs the docker SDK: pip install 'skyrl-sdk[docker]'"
        ) from None
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as e:
        where = os.environ.get("DOCKER_HOST", "the default socket")
        raise BackendUnavailable(
            f"no Docker engine answers at {where} ({type(e).__name__}: {e}); start dockerd "
            "or set DOCKER_HOST"
        ) from None
    return client


def reap_containers(client: Any) -> list[str]:
    """Remove sandbox containers whose owner process is dead; returns their names."""
    removed = []
    for info in client.api.containers(all=True, filters={"label": LABEL}):
        labels = info.get("Labels") or {}
        try:
            pid = int(labels.get("skyrl.owner_pid", "0"))
            start = labels.get("skyrl.owner_start")
            start_time = int(start) if start and start != "None" else None
        except ValueError:
            continue
        if pid and tracking.owner_alive(pid, start_time):
            continue
        with contextlib.suppress(Exception):
            client.api.remove_container(info["Id"], force=True, v=True)
            removed.append(labels.get(LABEL, info["Id"]))
    return removed


class DockerSandbox(Sandbox):
    """A sandbox in a Docker container (see the module docstring)."""

    backend = "docker"

    def __init__(
        self,
        spec=None,
        *,
        mount_at: str | None = None,
        binds: Mapping[str, Path] | None = None,
    ):
        """`mount_at`: where the workspace is mounted when it is not `spec.workdir` itself
        (a directory above it: a container's `/app` for `WORKDIR /app/sub`). `binds`: other
        host directories mounted read-write at their inside paths (a Dockerfile's COPY
        targets outside the working directory), owned by the sandbox's user like the
        workspace. Neither may show the engine's socket."""
        super().__init__(spec)
        self.mount_at = (mount_at or "").rstrip("/") or None
        self.binds = {inside: Path(host) for inside, host in (binds or {}).items()}
        if self.mount_at and not (
            self.workdir == self.mount_at or self.workdir.startswith(self.mount_at + "/")
        ):
            raise ValueError(f"mount_at={mount_at!r} must be the working directory or above it")
        self._client: Any = None
        self._container: str | None = None
        self._record: tracking.SandboxRecord | None = None
        self._workspace: Path | None = None
        self._has_timeout = False
        self._container_pid: int | None = None
        self._network: network.UserModeNetwork | None = None
        self._shell = "/bin/sh"

    @property
    def shell(self) -> str:
        """`$SHELL` of its commands, as in a container (and as bwrap gives it): /bin/bash
        where the image has it, else /bin/sh. A tmux or screen pane starts it (an image's
        `nobody` often has /usr/sbin/nologin as login shell, which ends a pane at once)."""
        return self._shell

    def base_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The common environment, plus `SHELL` (`shell`) unless the image or caller sets it."""
        env = super().base_env(extra)
        env.setdefault("SHELL", self.shell)
        return env

    @property
    def workdir(self) -> str:
        return self.spec.workdir.rstrip("/")

    @property
    def host_workspace(self) -> Path | None:
        return self._workspace

    async def start(self) -> None:
        if self._started:
            return
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed")
        if not self.spec.image:
            raise ValueError("the docker backend needs SandboxSpec(image=...)")
        self._started = True
        try:
            await asyncio.wait_for(self._start(), self.spec.start_timeout_s)
        except BaseException as e:
            await self.close()
            if isinstance(e, SandboxError | asyncio.CancelledError | ValueError):
                raise
            raise SandboxError(f"docker sandbox failed to start: {type(e).__name__}: {e}") from e

    async def _start(self) -> None:
        mode = network.network_mode(self.spec)
        if mode is not network.NetworkMode.NONE:
            network.tools()  # root, pasta and nft, or a clear BackendUnavailable, before anything
        await asyncio.to_thread(self._launch)
        if mode is not network.NetworkMode.NONE:
            assert self._container_pid is not None
            # From the event loop's thread: pasta's parent-death signal follows this thread.
            log = tracking.state_root() / self.id / "pasta.log"
            self._network = await network.attach(self._container_pid, self.spec, log)

    def _launch(self) -> None:
        spec = self.spec
        client = self._client = docker_client()
        _check_engine(spec, client, tuple(map(str, self.binds.values())))
        tracking.reap_at_startup()
        workspace, uid = self._prepare_workspace()
        record = self._record
        assert record is not None
        kwargs = _container_options(
            spec,
            record,
            name=self.id,
            uid=uid,
            volumes={
                str(workspace): {"bind": self.mount_at or self.workdir, "mode": "rw"},
                **{str(host): {"bind": path, "mode": "rw"} for path, host in self.binds.items()},
                **{path: {"bind": path, "mode": "ro"} for path in self.spec.ro_binds},
            },
            workdir=self.workdir,
            environment=self.base_env(),
        )
        container = _run_container(client, spec.image, kwargs)  # type: ignore[arg-type]
        self._container = container.id
        self._container_pid = int(client.api.inspect_container(container.id)["State"]["Pid"])
        # One probe: is `timeout` there (to bound each exec), and which shell is SHELL.
        probe = self._exec_blocking(["sh", "-c", _PROBE], None, {}, None, 10, 4096)
        found = bytes(probe[1].head).decode("utf-8", "replace").split()
        self._has_timeout = "timeout" in found
        self._shell = "/bin/bash" if "bash" in found else "/bin/sh"

    def _prepare_workspace(self) -> tuple[Path, int]:
        """Record the sandbox, make its workspace (as root, a tmpfs of `disk_bytes`) with the
        spec's files, owned by the container's user; returns the workspace and that uid."""
        spec = self.spec
        owned = spec.workspace_dir is None
        root = tracking.ensure_state_root()
        workspace = root / self.id / "ws" if owned else Path(spec.workspace_dir).resolve()  # type: ignore[arg-type]
        as_root = os.geteuid() == 0
        tmpfs_disk = bool(spec.disk_bytes) and owned and as_root
        self._record = tracking.SandboxRecord.for_current_process(
            self.id,
            self.backend,
            workspace=str(workspace) if owned else None,
            mounts=(str(workspace),) if tmpfs_disk else (),
            container_id=self.id,
            docker_host=os.environ.get("DOCKER_HOST") or None,
        )
        tracking.save(self._record, root)
        workspace.mkdir(parents=True, exist_ok=True)
        uid = SANDBOX_UID if as_root else os.geteuid()
        if tmpfs_disk:
            tracking.mount_tmpfs(workspace, spec.disk_bytes, uid)  # type: ignore[arg-type]
        self._workspace = workspace
        for rel, content in spec.files:
            target = workspace / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        if as_root:  # like bwrap: the sandbox's user owns its workspace (a caller's too)
            chown_tree(workspace, uid)
            for host in self.binds.values():
                chown_tree(host, uid)
        return workspace, uid

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._network is not None:
            await self._network.close()
        if self._record is not None:
            errors = await asyncio.to_thread(tracking.release, self._record)
            if errors:
                raise SandboxError("; ".join(errors))
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()

    # ---- exec over the raw attach socket -----------------------------------------------------

    def _exec_blocking(
        self,
        argv: list[str],
        stdin: bytes | None,
        env: dict[str, str],
        cwd: str | None,
        timeout: float,
        limit: int,
    ) -> tuple[int, _Capture, _Capture, bool, float]:
        return _docker_exec.exec_blocking(
            self._client.api,
            self._container,
            self._has_timeout,
            argv,
            stdin,
            env,
            cwd,
            timeout,
            limit,
        )

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
        code, out, err, timed_out, duration = await asyncio.to_thread(
            self._exec_blocking,
            argv,
            to_bytes(stdin, "stdin"),
            self.base_env(env),
            self.resolve(cwd) if cwd else self.workdir,
            float(limit),
            self.spec.output_limit_bytes,
        )
        stdout, out_cut = decode_capped(bytes(out.head), bytes(out.tail), out.total)
        stderr, err_cut = decode_capped(bytes(err.head), bytes(err.tail), err.total)
        return ExecResult(
            exit_code=code,
            stdout=stdout,
            stderr=stderr,
            timed_out=timed_out,
            truncated=out_cut or err_cut,
            duration_s=duration,
            stdout_bytes=out.total,
            stderr_bytes=err.total,
        )

    async def _raw(self, argv: list[str], stdin: bytes | None, max_bytes: int) -> bytes:
        """Run a helper command and return its complete stdout (errors become exceptions)."""
        self._check_usable()
        code, out, err, timed_out, _ = await asyncio.to_thread(
            self._exec_blocking,
            argv,
            stdin,
            self.base_env(),
            None,
            self.spec.timeout_s,
            max_bytes + 1,
        )
        message = bytes(err.head).decode("utf-8", "replace").strip()
        if code != 0 or timed_out:
            if "No such file" in message or "can't open" in message or "not found" in message:
                raise FileNotFoundError(message or f"{argv} failed")
            if "Is a directory" in message:
                raise IsADirectoryError(message)
            if "denied" in message or "Read-only" in message:
                raise PermissionError(message)
            raise SandboxError(f"{argv[0]} failed in the container (exit {code}): {message}")
        if out.total > max_bytes:
            raise SandboxError(f"output larger than max_bytes={max_bytes}")
        return bytes(out.head) + bytes(out.tail)

    async def read_file(self, path: str, *, max_bytes: int = DEFAULT_MAX_READ) -> bytes:
        return await self._raw(["cat", self.resolve(path)], None, max_bytes)

    async def write_file(
        self, path: str, data: str | bytes, *, mode: int = 0o644, parents: bool = True
    ) -> None:
        script = 'cat > "$1" && chmod "$2" "$1"'
        if parents:
            script = 'mkdir -p "$(dirname "$1")" && ' + script
        await self._raw(
            ["sh", "-c", script, "sh", self.resolve(path), f"{mode:o}"],
            to_bytes(data, "data"),
            1 << 20,
        )

    async def _get_archive(self, path: str) -> bytes:
        pure = PurePosixPath(path)
        return await self._raw(
            ["tar", "-c", "-C", str(pure.parent), pure.name or "."], None, DEFAULT_MAX_READ
        )

    async def _put_archive(self, dest: str, data: bytes) -> None:
        await self._raw(["sh", "-c", 'mkdir -p "$1" && tar -x -C "$1"', "sh", dest], data, 1 << 20)


def _check_engine(spec: Any, client: Any, binds: tuple[str, ...]) -> None:
    """Refuse an engine this sandbox cannot be safe on; reap its dead owners' containers,
    once per engine and process."""
    _refuse_engine_socket(spec, client.api.base_url, binds)
    if network.network_mode(spec) is not network.NetworkMode.NONE and not str(
        client.api.base_url
    ).startswith("http+docker://"):
        raise SandboxError(
            "docker sandbox: network=True (and forward_ports) attach user-mode networking "
            "to the container's own namespace from this host, so the engine must be local "
            f"(a unix socket), not {client.api.base_url}; the host's network or a bridge "
            "is never used instead"
        )
    base_url = client.api.base_url
    if base_url not in _reaped_engines:
        _reaped_engines.add(base_url)
        reap_containers(client)


def _container_options(
    spec: Any,
    record: tracking.SandboxRecord,
    *,
    name: str,
    uid: int,
    volumes: dict[str, dict[str, str]],
    workdir: str,
    environment: dict[str, str],
) -> dict[str, Any]:
    """The keyword arguments of `containers.run` for the sandbox's container."""
    labels = {
        LABEL: name,
        "skyrl.owner_pid": str(record.owner_pid),
        "skyrl.owner_start": str(record.owner_start),
    }
    kwargs: dict[str, Any] = {
        "name": name,
        "detach": True,
        "labels": labels,
        # Never the host's network, never a bridge: with network=True, pasta is attached
        # to this empty namespace once the container runs (see `DockerSandbox._start`).
        "network_mode": "none",
        "user": f"{uid}:{uid}",
        "working_dir": workdir,
        "volumes": volumes,
        "read_only": True,
        "tmpfs": {
            "/tmp": _tmpfs_options(spec.disk_bytes, "1777"),
            "/run": _tmpfs_options(
                min(spec.disk_bytes or _RUN_TMPFS_BYTES, _RUN_TMPFS_BYTES), "1777"
            ),
        },
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "environment": environment,
    }
    if spec.memory_bytes:
        kwargs["mem_limit"] = spec.memory_bytes
        kwargs["memswap_limit"] = spec.memory_bytes
    if spec.pids:
        kwargs["pids_limit"] = spec.pids
    if spec.cpus:
        kwargs["nano_cpus"] = int(spec.cpus * 1e9)
    if spec.disk_bytes:
        kwargs["ulimits"] = [_ulimit("fsize", spec.disk_bytes)]
    return kwargs


def _run_container(client: Any, image: str, kwargs: dict[str, Any]) -> Any:
    """Start the keep-alive container from a local image (nothing is pulled)."""
    import docker.errors

    try:  # checked first: `run` would try to pull, which cannot work offline
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise SandboxError(
            f"docker image {image!r} not found on the engine; build it locally "
            "(docker build / docker import)"
        ) from None
    return client.containers.run(image, _KEEPALIVE, **kwargs)


def _tmpfs_options(size: int | None, mode: str) -> str:
    """Docker tmpfs options: writable, executable (like bwrap's), size-capped."""
    return f"rw,nosuid,nodev,exec,mode={mode}" + (f",size={size}" if size else "")


def _engine_sockets(base_url: str) -> set[str]:
    found = set(_ENGINE_SOCKETS)
    for url in (base_url, os.environ.get("DOCKER_HOST", "")):
        for prefix in ("unix://", "http+unix://"):
            if url.startswith(prefix):
                found.add(url[len(prefix) :])
    return {os.path.realpath(p) for p in found}


def _refuse_engine_socket(spec: Any, base_url: str, extra: tuple[str, ...] = ()) -> None:
    """No Docker socket inside: a bind that shows the engine's socket would hand the sandbox
    the engine (root on the host)."""
    sockets = _engine_sockets(base_url)
    shown = [*spec.ro_binds, *([spec.workspace_dir] if spec.workspace_dir else []), *extra]
    for path in shown:
        real = os.path.realpath(path)
        for sock in sockets:
            if sock == real or sock.startswith(real.rstrip("/") + "/"):
                raise SandboxError(
                    f"docker sandbox: {path!r} would show the Docker engine's socket {sock} "
                    "inside the sandbox (that is root on the host); bind something narrower"
                )


def _ulimit(name: str, value: int) -> Any:
    import docker.types

    return docker.types.Ulimit(name=name, soft=value, hard=value)
