"""The default backend: Linux namespaces through bubblewrap (`bwrap`).

Each sandbox gets its own user, PID, mount, network, IPC and UTS namespaces. The root
filesystem (the host's, or `spec.rootfs`) is mounted read-only, with a fresh `/tmp`, `/run`,
`/proc` and `/dev`; the workspace is the only writable host directory. Started by root, the
sandbox runs as the unprivileged user `nobody` (a real uid, so root-owned host files stay out
of reach even through /proc). The command server is the namespace's PID 1: when it exits,
the kernel kills everything left inside.
"""

from __future__ import annotations

import os
import shutil
from functools import cache
from pathlib import Path

from skyrl_sdk.sandboxes._process import SANDBOX_UID, ServerSandbox
from skyrl_sdk.sandboxes.spec import BackendUnavailable, SandboxError

# Host paths never exposed: credentials and per-user files, and the sockets under /run.
_HIDDEN = {"proc", "dev", "tmp", "run", "root", "home", "lost+found", "sys"}


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
def _root_binds(root: str, skip_top: str) -> tuple[str, ...]:
    """Read-only binds of each top-level entry of `root` (so new mount points can be made)."""
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

    def _interpreter_key(self) -> tuple[str, ...]:
        return (self.backend, self.spec.rootfs or "/", self.spec.python)

    def _server_argv(self, workspace: Path, python_args: list[str]) -> list[str]:
        spec = self.spec
        root = spec.rootfs or "/"
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
        args = [
            bwrap_path(),
            "--unshare-all",
            *(["--share-net"] if spec.network else []),
            "--new-session",
            "--as-pid-1",
            "--hostname",
            "sandbox",
            *_root_binds(root, top),
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
            "--tmpfs",
            "/run",
            *(arg for path in spec.ro_binds for arg in ("--ro-bind", path, path)),
            "--bind",
            str(workspace),
            self.workdir,
            "--chdir",
            self.workdir,
            "--",
            spec.python,
            *python_args,
        ]
        return prefix + args
