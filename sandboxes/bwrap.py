"""The default backend: Linux namespaces through bubblewrap (`bwrap`).

Each sandbox gets its own user, PID, mount, network, IPC, UTS and cgroup namespaces.

Filesystem: without `spec.rootfs` the sandbox sees a *minimal* read-only system taken from
the host: `/usr`, `/bin`, `/lib*`, `/sbin` (on merged-/usr systems the symlinks stay
symlinks) and from `/etc` only what programs need (`passwd`, `group`, `nsswitch.conf`,
`ld.so.cache`, `ld.so.conf(.d)`, `alternatives`, `ssl`, `ca-certificates`, `localtime`,
`hosts`, `host.conf`, `gai.conf`, `mime.types`, `protocols`, `services`, `os-release`;
`resolv.conf` only with network). Nothing else of the host is there: not the project's
checkout or virtualenv, not `/root`, `/home`, `/var`, `/opt`, `/mnt`, `/srv`, `/media`, `/work`,
nor the caller's working directory. With `spec.rootfs` (an image's root) that directory's own
top-level entries are bound read-only instead. Either way the sandbox gets fresh, size-capped
tmpfs `/tmp` (`spec.disk_bytes`) and `/run`, its own `/proc` and `/dev`, the writable
workspace, and the caller's `spec.ro_binds` at their own paths.

Processes: started by root, the sandbox runs as the unprivileged user `nobody` (a real uid, so
root-owned host files stay out of reach even through /proc). The command server (the native
one, `_server.c`, bound read-only at /run/skyrl-server, unless it cannot be built here; see
`_native.py`) is the namespace's PID 1: when it exits, the kernel kills everything left inside. It makes itself
non-dumpable, so the commands it runs (same uid) cannot ptrace it or open `/proc/1/mem` or
its pipes to the host under `/proc/1/fd`; a seccomp filter (`seccomp.py`) refuses ptrace,
nested user namespaces, keyctl, bpf, perf_event_open, mounts, userfaultfd and kexec, and
bwrap >= 0.8 also disables user namespaces (`--disable-userns`).
"""

from __future__ import annotations

import os
import shutil
from functools import cache
from pathlib import Path

from skyrl_sdk.sandboxes import network, seccomp
from skyrl_sdk.sandboxes._native import INSIDE_PATH
from skyrl_sdk.sandboxes._process import SANDBOX_UID, ServerSandbox
from skyrl_sdk.sandboxes.network import NetworkMode
from skyrl_sdk.sandboxes.spec import BackendUnavailable, SandboxError

# With `spec.rootfs` (an image's root), every top-level entry is shown except these: the
# kernel filesystems and /tmp, /run are fresh, and per-user directories stay hidden.
_HIDDEN = {"proc", "dev", "tmp", "run", "root", "home", "lost+found", "sys"}

# Without `spec.rootfs`, the sandbox sees only this much of the host: the programs and their
# libraries...
_SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# ...and from /etc what programs need to start, resolve users, load libraries, verify TLS
# and tell the time. resolv.conf is added only when the sandbox has network.
_ETC_FILES = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "gai.conf",
    "group",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "protocols",
    "services",
    "ssl",
)
_ETC_NETWORK_FILES = ("resolv.conf",)
_RUN_TMPFS_BYTES = 64 << 20  # /run holds sockets and pid files, not data


@cache
def bwrap_path() -> str:
    """The bwrap binary, or `BackendUnavailable` saying how to install it."""
    found = shutil.which("bwrap")
    if not found:
        raise BackendUnavailable(
            "the bwrap backend needs bubblewrap: install the Debian package 'bubblewrap' "
            "(apt-get install bubblewrap; `make install` does it as root), or use backend='local' "
            "for trusted code"
        )
    return found


@cache
def bwrap_version() -> tuple[int, ...]:
    """The installed bwrap's version, e.g. (0, 8, 0); (0,) if it cannot be told."""
    import subprocess

    try:
        out = subprocess.run(
            [bwrap_path(), "--version"], capture_output=True, text=True, timeout=10
        ).stdout
        return tuple(int(x) for x in out.split()[-1].split("."))
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return (0,)


def _visible(path: str) -> bool:
    """True if an absolute host path lies inside what `_system_binds` shows."""
    parts = path.strip("/").split("/")
    if parts[0] in _SYSTEM_DIRS:
        return True
    return parts[0] == "etc" and len(parts) > 1 and parts[1] in _ETC_FILES


def _symlink_or_bind(host: str) -> list[str]:
    """Keep a symlink a symlink when its target is visible in the sandbox; otherwise bind the
    file it points to (e.g. /etc/resolv.conf -> /run/systemd/resolve/..., /run is fresh)."""
    if not os.path.islink(host):
        return ["--ro-bind", host, host]
    resolved = os.path.realpath(host)
    if _visible(resolved):
        return ["--symlink", os.readlink(host), host]
    return ["--ro-bind", resolved, host] if os.path.exists(resolved) else []


@cache
def _system_binds(network: bool) -> tuple[str, ...]:
    """The minimal read-only system taken from the host root (see `_SYSTEM_DIRS`)."""
    args: list[str] = []
    for name in _SYSTEM_DIRS:
        path = f"/{name}"
        if os.path.islink(path):
            # Merged /usr: /bin -> usr/bin stays a symlink, as on the host.
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--perms", "0755", "--dir", "/etc"]
    names = _ETC_FILES + (_ETC_NETWORK_FILES if network else ())
    for name in sorted(names):
        path = f"/etc/{name}"
        if os.path.lexists(path):
            args += _symlink_or_bind(path)
    return tuple(args)


@cache
def _root_binds(root: str, skip_top: str) -> tuple[str, ...]:
    """Read-only binds of each top-level entry of an image root (so mount points can be made)."""
    args: list[str] = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if entry.name in _HIDDEN or entry.name == skip_top:
            continue
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry.path), f"/{entry.name}"]
        elif entry.is_dir():
            args += ["--ro-bind", entry.path, f"/{entry.name}"]
    if os.path.isdir(os.path.join(root, "sys")):
        args += ["--ro-bind", os.path.join(root, "sys"), "/sys"]
    return tuple(args)


class BwrapSandbox(ServerSandbox):
    """A bubblewrap sandbox (see the module docstring)."""

    backend = "bwrap"

    @property
    def workdir(self) -> str:
        return self.spec.workdir.rstrip("/")

    @property
    def _run_as(self) -> int | None:
        return SANDBOX_UID if os.geteuid() == 0 else None

    async def _launch(self) -> None:
        await super()._launch()
        if self._proc is not None:  # networked: pasta configures the namespace meanwhile
            try:
                await network.wait_ready(self.spec, self._proc.pid)
            except SandboxError as e:
                raise SandboxError(f"{e}{self._log_tail()}") from None

    def _interpreter_key(self) -> tuple[str, ...]:
        return (self.backend, self.spec.rootfs or "/", self.spec.python)

    def _server_needs_static(self) -> bool:
        # An image root need not carry the host's libc.
        return bool(self.spec.rootfs)

    def _server_argv(self, workspace: Path, python_args: list[str]) -> list[str]:
        spec = self.spec
        if spec.rootfs and not os.path.isdir(spec.rootfs):
            raise BackendUnavailable(f"SandboxSpec.rootfs {spec.rootfs!r} is not a directory")
        for path in spec.ro_binds:
            if not os.path.isdir(path):
                raise SandboxError(f"SandboxSpec.ro_binds: {path!r} is not a directory on the host")
        prefix: list[str] = []
        if os.geteuid() == 0:
            setpriv = shutil.which("setpriv")
            if setpriv is None:
                raise BackendUnavailable(
                    "running as root, the bwrap backend drops to uid 65534 with setpriv "
                    "(package util-linux), which is missing"
                )
            prefix = [setpriv, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups"]
        top = self.workdir.strip("/").split("/")[0]
        system = _root_binds(spec.rootfs, top) if spec.rootfs else _system_binds(spec.network)
        seccomp_fd = seccomp.filter_fd() if seccomp.supported() else None
        if seccomp_fd is not None:
            self._pass_fds = (seccomp_fd,)  # closed by the caller once the server is spawned
        self._seccomp_loaded = seccomp_fd is not None
        self._userns_disabled = bool(_userns_args())
        args = [
            bwrap_path(),
            "--unshare-all",
            # Networked: keep the namespace `network.wrap_launcher` made (never the host's).
            *(["--share-net"] if network.network_mode(spec) is not NetworkMode.NONE else []),
            *_userns_args(),
            "--new-session",
            "--as-pid-1",
            "--hostname",
            "sandbox",
            *system,
            *network.bwrap_binds(spec),
            "--proc",
            "/proc",
            # Grading: no process may open a /proc file for writing (e.g. /proc/PID/mem of
            # the verifier's shell, to rewrite its code).
            *(["--remount-ro", "/proc"] if spec.grading else []),
            "--dev",
            "/dev",
            *_sized(spec.disk_bytes),
            "--tmpfs",
            "/tmp",
            *_sized(min(spec.disk_bytes or _RUN_TMPFS_BYTES, _RUN_TMPFS_BYTES)),
            "--tmpfs",
            "/run",
            # The native command server, read-only, on the fresh /run (after its tmpfs).
            *(["--ro-bind", self._server_binary, INSIDE_PATH] if self._server_binary else []),
            *(arg for path in spec.ro_binds for arg in ("--ro-bind", path, path)),
            "--bind",
            str(workspace),
            self.workdir,
            "--chdir",
            self.workdir,
            *([] if seccomp_fd is None else ["--seccomp", str(seccomp_fd)]),
            "--",
            *([INSIDE_PATH] if self._server_binary else [spec.python, *python_args]),
        ]
        return network.wrap_launcher(spec, prefix + args, keep_fds=self._pass_fds)

    def _tmp_cap(self) -> str:
        return "tmpfs" if self.spec.disk_bytes else "none"


def _sized(size: int | None) -> list[str]:
    """`--size N` for the next `--tmpfs` (bwrap >= 0.5), or nothing."""
    return ["--size", str(size)] if size else []


@cache
def _userns_args() -> tuple[str, ...]:
    """No nested user namespaces (bwrap >= 0.8); the seccomp filter refuses them as well."""
    return ("--unshare-user", "--disable-userns") if bwrap_version() >= (0, 8) else ()
