"""`Workspace`: a host directory an env owns across several sandboxes, size-capped and reaped.

An env that runs an agent phase and then a grading phase in two sandboxes needs one directory
that outlives the first sandbox: that is a `Workspace`. It is passed to `SandboxSpec` as
`workspace_dir=ws.path` (or `workspace_dir=ws`).

- **Size cap.** Created by root, it is a tmpfs mounted with `size=disk_bytes`: a write past
  the cap fails with ENOSPC and the host's disk never grows. Its pages are memory: they are
  charged to the memory cgroup of the process that wrote them (a sandbox's, so they count
  against that sandbox's `memory_bytes` while it runs, and move to the parent cgroup when it is
  removed). Not root, it is a plain directory and `disk_cap` says `none`.
- **Reaping.** Its owner (PID and kernel start time) is recorded in the sandbox state root
  *before* the directory is made, so when the owner dies, even by SIGKILL, `skyrl sandbox reap`
  and the reap at the first sandbox start of any later process unmount and delete it.
"""

from __future__ import annotations

import contextlib
import enum
import os
import secrets
import shutil
import tempfile
import weakref
from pathlib import Path
from types import TracebackType

from skyrl_sdk.sandboxes import tracking
from skyrl_sdk.sandboxes.spec import DEFAULT_DISK_BYTES, SandboxError

__all__ = ["DEFAULT_DISK_BYTES", "DiskCap", "Workspace", "chown_tree"]

WORKSPACE_BACKEND = "workspace"
"""The `backend` of a workspace's record (`skyrl sandbox ls` shows it)."""


class DiskCap(enum.StrEnum):
    """How a workspace's size is capped."""

    TMPFS = "tmpfs"
    """A size-limited tmpfs: writes past the cap fail with ENOSPC."""
    NONE = "none"
    """No cap (not root: an ordinary directory)."""


class Workspace:
    """A host directory shared by the sandboxes of one episode (see the module docstring).

    Use `Workspace.create()`, then `close()` (idempotent; also a context manager). A
    workspace still open at interpreter exit is removed then.
    """

    def __init__(self, path: Path, disk_cap: DiskCap, record: tracking.SandboxRecord):
        self.path = path
        """The directory on the host."""
        self.disk_cap = disk_cap
        """How its size is capped: `tmpfs` or `none`."""
        self.record = record
        """Its reaping record (owner PID + start time)."""
        self._finalizer = weakref.finalize(self, tracking.release, record)

    @classmethod
    def create(
        cls,
        prefix: str = "skyrl-ws-",
        *,
        disk_bytes: int | None = DEFAULT_DISK_BYTES,
        owner_uid: int | None = None,
        parent: str | os.PathLike[str] | None = None,
    ) -> Workspace:
        """Record, then create, a new workspace directory.

        Args:
            prefix: Start of the directory's name (like `tempfile.mkdtemp`).
            disk_bytes: Size cap in bytes (as root: a tmpfs of this size); None: no cap.
            owner_uid: Host uid that owns the directory (e.g. the sandbox user 65534);
                None: the caller.
            parent: Directory to create it in (default: the system temp dir).
        """
        if disk_bytes is not None and (not isinstance(disk_bytes, int) or disk_bytes <= 0):
            raise ValueError(f"disk_bytes must be a positive int or None, got {disk_bytes!r}")
        if "/" in prefix or "\0" in prefix:
            raise ValueError(f"prefix {prefix!r} must be a plain name")
        base = Path(parent if parent is not None else tempfile.gettempdir()).resolve()
        token = secrets.token_hex(6)
        path = base / f"{prefix}{token}"
        tmpfs = disk_bytes is not None and os.geteuid() == 0
        record = tracking.SandboxRecord.for_current_process(
            f"ws-{token}",
            WORKSPACE_BACKEND,
            workspace=str(path),
            mounts=(str(path),) if tmpfs else (),
        )
        # Recorded before the directory exists: a SIGKILL from here on still gets reaped.
        tracking.save(record)
        try:
            path.mkdir(mode=0o700)
            if tmpfs:
                tracking.mount_tmpfs(path, disk_bytes, owner_uid)  # type: ignore[arg-type]
            elif owner_uid is not None and owner_uid != os.geteuid():
                os.chown(path, owner_uid, owner_uid)
        except BaseException:
            tracking.release(record)
            raise
        return cls(path, DiskCap.TMPFS if tmpfs else DiskCap.NONE, record)

    @property
    def closed(self) -> bool:
        """True once `close()` has run."""
        return not self._finalizer.alive

    def close(self) -> None:
        """Unmount and delete the directory, and drop its record. Idempotent."""
        if not self._finalizer.alive:
            return
        errors = self._finalizer()
        if errors:
            raise SandboxError(f"workspace {self.path}: " + "; ".join(errors))

    def clear(self) -> None:
        """Delete everything inside the directory (keeps the directory and its cap)."""
        if self.closed:
            raise SandboxError(f"workspace {self.path} is closed")
        for entry in list(self.path.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()

    def __fspath__(self) -> str:
        return str(self.path)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.disk_cap.value
        return f"<Workspace {self.path} {state}>"


def chown_tree(root: str | os.PathLike[str], uid: int) -> None:
    """Hand a host tree to `uid` (e.g. the sandbox user 65534), links themselves and never
    what they point to, so a link the agent made cannot hand over a host file."""
    root = Path(root)
    os.chown(root, uid, uid, follow_symlinks=False)
    if not root.is_dir() or root.is_symlink():
        return
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                os.chown(os.path.join(base, name), uid, uid, follow_symlinks=False)
