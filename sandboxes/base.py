"""The `Sandbox` protocol every backend implements."""

from __future__ import annotations

import abc
import io
import os
import secrets
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import ClassVar

from skyrl_sdk.sandboxes.spec import (
    DEFAULT_PATH,
    ExecResult,
    GradingIsolation,
    SandboxError,
    SandboxSpec,
)

Command = str | Sequence[str]
"""A shell command line (run with `/bin/sh -c`) or an argv list (run directly)."""

DEFAULT_MAX_READ = 64 << 20


def new_sandbox_id() -> str:
    """A short unique id; it names the sandbox's state dir, cgroups and container."""
    return f"sbx-{secrets.token_hex(6)}"


def to_argv(cmd: Command) -> list[str]:
    """The argv for a command: a string runs through `/bin/sh -c`, a list runs as is."""
    if isinstance(cmd, str):
        return ["/bin/sh", "-c", cmd]
    if isinstance(cmd, bytes | bytearray):
        raise TypeError("exec() takes str or a list of str, not bytes; decode the command first")
    argv = list(cmd)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError(f"exec() needs a non-empty list of str as argv, got {cmd!r:.200}")
    return argv


def check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """Validate environment variables (str to str, no '=' or NUL in names)."""
    out: dict[str, str] = {}
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise ValueError(f"invalid environment variable name {key!r}")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"environment variable {key} must be a str without NUL bytes")
        out[key] = value
    return out


def to_bytes(data: str | bytes | None, what: str) -> bytes | None:
    if data is None:
        return None
    if isinstance(data, str):
        return data.encode("utf-8", "surrogateescape")
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"{what} must be str or bytes, got {type(data).__name__}")


class Sandbox(abc.ABC):
    """An isolated place to run commands, with a writable workspace.

    Use it as an async context manager (`async with create_sandbox(spec) as sb:`), or call
    `close()` yourself: `close()` kills every process left inside and removes what the sandbox
    owns (its temp workspace, cgroups, container). It is idempotent.
    """

    backend: ClassVar[str]
    """Backend name: `bwrap`, `local` or `docker`."""

    def __init__(self, spec: SandboxSpec | None = None):
        self.spec = spec if spec is not None else SandboxSpec()
        self.id = new_sandbox_id()
        self._started = False
        self._closed = False

    # ---- lifecycle --------------------------------------------------------------------------

    @abc.abstractmethod
    async def start(self) -> None:
        """Start the sandbox; it is ready for `exec` when this returns."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Kill everything inside and release what the sandbox owns. Idempotent."""

    @property
    def closed(self) -> bool:
        """True once `close()` has been called."""
        return self._closed

    async def __aenter__(self) -> Sandbox:
        if not self._started:
            await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _check_usable(self) -> None:
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed")
        if not self._started:
            raise SandboxError(f"sandbox {self.id} was never started: await sandbox.start() first")

    def _exec_limit(self, timeout: float | None) -> float:
        """The wall-clock limit of one exec: `timeout`, else the spec's default."""
        limit = self.spec.timeout_s if timeout is None else timeout
        if not isinstance(limit, int | float) or limit <= 0:
            raise ValueError(
                f"exec() timeout must be a positive number of seconds, got {timeout!r}"
            )
        return float(limit)

    # ---- commands and files -----------------------------------------------------------------

    @property
    @abc.abstractmethod
    def workdir(self) -> str:
        """The workspace path as commands see it (their default cwd)."""

    @property
    def limits(self) -> dict[str, str]:
        """How each cap is enforced on this machine, by name.

        Keys: `memory`, `pids`, `cpus`, `cpu_time`, `disk` (the workspace), `tmp` (its
        `/tmp`), `wall_time`, `output`. Values: `cgroup`, `rlimit`, `tmpfs`, `timeout`,
        `truncate`, a backend-specific mechanism, or `none` (not enforced here, e.g. no
        writable cgroup controller, or the cap is off in the spec).
        """
        return {}

    @property
    def host_workspace(self) -> Path | None:
        """The workspace's directory on the host, where the backend has one."""
        return None

    @property
    def grading_isolation(self) -> GradingIsolation:
        """How a grading sandbox keeps agent programs from the verifier's powers
        (`GradingIsolation`): `NOT_GRADING` unless `spec.grading`; backends that can run
        agent programs under a uid of their own say `TWO_UID` once started."""
        return GradingIsolation.SINGLE_UID if self.spec.grading else GradingIsolation.NOT_GRADING

    @abc.abstractmethod
    async def exec(
        self,
        cmd: Command,
        *,
        timeout: float | None = None,
        stdin: str | bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run a command and wait for it.

        Args:
            cmd: A shell command line (`/bin/sh -c`) or an argv list.
            timeout: Wall-clock limit in seconds (default: the spec's `timeout_s`); the
                command's process group is killed when it passes.
            stdin: Data fed to the command's standard input (default: /dev/null).
            env: Extra environment variables for this command.
            cwd: Working directory, absolute or relative to the workspace.
        """

    @abc.abstractmethod
    async def read_file(self, path: str, *, max_bytes: int = DEFAULT_MAX_READ) -> bytes:
        """The content of a file in the sandbox (relative paths are in the workspace)."""

    @abc.abstractmethod
    async def write_file(
        self, path: str, data: str | bytes, *, mode: int = 0o644, parents: bool = True
    ) -> None:
        """Create or replace a file in the sandbox, creating parent directories if asked."""

    @abc.abstractmethod
    async def _get_archive(self, path: str) -> bytes:
        """A tar archive of `path` inside the sandbox (its base name at the archive root)."""

    @abc.abstractmethod
    async def _put_archive(self, dest: str, data: bytes) -> None:
        """Extract a tar archive into directory `dest` inside the sandbox."""

    async def upload(self, local_dir: str | os.PathLike[str], dest: str | None = None) -> None:
        """Copy the contents of a host directory into `dest` (default: the workspace)."""
        self._check_usable()
        source = Path(local_dir)
        if not source.is_dir():
            raise NotADirectoryError(f"upload() needs a host directory, got {source}")
        await self._put_archive(self.resolve(dest or "."), _tar_dir(source))

    async def download(self, path: str, local_dest: str | os.PathLike[str]) -> Path:
        """Copy a file or directory out of the sandbox into host directory `local_dest`.

        Returns the host path of the copy (`local_dest / basename(path)`).
        """
        self._check_usable()
        target = Path(local_dest)
        target.mkdir(parents=True, exist_ok=True)
        inside = self.resolve(path)
        data = await self._get_archive(inside)
        _untar_safely(data, target)
        return target / (PurePosixPath(inside).name or ".")

    def resolve(self, path: str) -> str:
        """An absolute in-sandbox path; relative paths are taken from the workspace."""
        if not isinstance(path, str) or not path or "\0" in path:
            raise ValueError(f"invalid sandbox path {path!r}")
        if path.startswith("/"):
            return path
        return str(PurePosixPath(self.workdir) / path)

    def base_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment of a command: PATH, HOME, LANG, then the spec's env, then `extra`."""
        env = {"PATH": DEFAULT_PATH, "HOME": self.workdir, "LANG": "C.UTF-8", "TERM": "dumb"}
        env.update(self.spec.env)
        env.update(check_env(extra))
        return env

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._started else "new")
        return f"<{type(self).__name__} {self.id} {state}>"


def _tar_dir(source: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:") as tar:
        for entry in sorted(source.iterdir()):
            tar.add(entry, arcname=entry.name)
    return buf.getvalue()


def _untar_safely(data: bytes, target: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(target, filter="data")
            return
        for member in tar.getmembers():  # older Pythons: refuse what the data filter would
            name = os.path.normpath(member.name)
            if name.startswith("..") or os.path.isabs(name) or member.issym() or member.islnk():
                raise SandboxError(f"refusing unsafe archive member {member.name!r}")
        tar.extractall(target)
