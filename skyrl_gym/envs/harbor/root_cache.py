"""The cache of built task roots: `$SKYRL_CACHE/harbor-roots/<key>/`, built once, size-capped.

A built root is what a task's Dockerfile adds on top of its base root (the layer a container
build makes). Its key hashes the Dockerfile, every file of its build context (path, mode and
content; a link by its target, never followed) and the base root's identity, so a changed
input builds anew and an unchanged one is reused by every later trial.

- **Once.** `RootCache.get` takes an exclusive `fcntl` lock on `<key>.lock` while it looks and
  builds, so four trials started together (`-n 4`) build once and the other three reuse it.
  The layer is built in a private staging directory and renamed into place, with a
  `.complete` marker last: a reader never sees a half-built layer, and a crashed build is
  built again.
- **In use.** A caller holds a shared lock on the key while a trial uses the layer; `prune`
  and the size cap skip any layer someone holds.
- **Size cap.** After a build, least recently used layers are removed until the cache is at
  most `max_bytes` (`DEFAULT_MAX_BYTES`, `$SKYRL_HARBOR_ROOTS_MAX_BYTES`).
- `prune()` removes every layer nobody holds (what `skyrl harbor cache prune` is to call).

Used by `task_root.build_task_root` (the bwrap backend's copy-on-write roots).
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from skyrl_gym.cache import cache_dir

DEFAULT_MAX_BYTES = 8 << 30
"""The cache's default size cap (8 GiB)."""

MAX_BYTES_ENV = "SKYRL_HARBOR_ROOTS_MAX_BYTES"
"""Environment variable overriding `DEFAULT_MAX_BYTES` (bytes)."""

_COMPLETE = ".complete"


class CacheOutcome(enum.StrEnum):
    """How `RootCache.get` found its layer."""

    HIT = "hit"
    """Already built: reused."""
    BUILT = "built"
    """Built by this call."""


@dataclass(frozen=True)
class CachedRoot:
    """A built layer in the cache."""

    key: str
    """Its key (`build_key`)."""
    path: Path
    """The layer's directory (read it; never write it)."""
    outcome: CacheOutcome
    """Reused or built by this call."""


def default_cache_dir() -> Path:
    """`$SKYRL_CACHE/harbor-roots`."""
    return cache_dir() / "harbor-roots"


def _hash_tree(digest: hashlib._Hash, root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(Path(dirpath, d))]):
            path = Path(dirpath, name)
            info = path.lstat()
            digest.update(f"\0{path.relative_to(root)}\0{stat.S_IMODE(info.st_mode):o}".encode())
            if stat.S_ISLNK(info.st_mode):
                digest.update(b"link:" + os.readlink(path).encode())
            elif stat.S_ISREG(info.st_mode):
                with path.open("rb") as f:  # in chunks: a context file may be large
                    while chunk := f.read(1 << 20):
                        digest.update(chunk)


def build_key(dockerfile: Path, context: Path, base_root: str | None) -> str:
    """The key of a task's built root: a hash of the Dockerfile, its build context and the base
    root (`base_root`: an image root's path, None for the host's minimal system, identified
    by the host's os-release)."""
    digest = hashlib.sha256(b"skyrl-harbor-root-v1\0")
    digest.update(dockerfile.read_bytes())
    _hash_tree(digest, context)
    if base_root is None:
        release = Path("/etc/os-release")
        digest.update(b"\0host:" + (release.read_bytes() if release.is_file() else b""))
    else:
        info = os.stat(base_root)
        digest.update(f"\0root:{os.path.realpath(base_root)}:{info.st_ino}".encode())
        digest.update(f":{info.st_mtime_ns}".encode())
    return digest.hexdigest()[:32]


def _size(path: Path) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(path, followlinks=False):
        for name in filenames:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


@dataclass(frozen=True)
class RootCache:
    """Built task roots under `directory` (see the module docstring)."""

    directory: Path
    """Where the layers live (`default_cache_dir()`)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    """Size cap: least recently used layers nobody holds are removed past it."""

    @classmethod
    def default(cls) -> RootCache:
        """The cache at `$SKYRL_CACHE/harbor-roots`, capped at `$SKYRL_HARBOR_ROOTS_MAX_BYTES`."""
        raw = os.environ.get(MAX_BYTES_ENV)
        try:
            cap = int(raw) if raw else DEFAULT_MAX_BYTES
        except ValueError:
            raise ValueError(f"${MAX_BYTES_ENV} must be a number of bytes, got {raw!r}") from None
        return cls(default_cache_dir(), cap)

    def _lock_path(self, key: str) -> Path:
        return self.directory / f"{key}.lock"

    @contextlib.contextmanager
    def _locked(self, key: str, mode: int) -> Iterator[int]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # built roots are root's alone on the host
            self.directory.chmod(0o700)
        fd = os.open(self._lock_path(key), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, mode)
            yield fd
        finally:
            os.close(fd)  # releases the lock

    def get(self, key: str, build: Callable[[Path], None]) -> CachedRoot:
        """The layer of `key`, built first with `build(staging_dir)` if it is not complete.

        `build` fills the empty directory it is given; if it raises, nothing is cached."""
        if not key or "/" in key or key.startswith("."):
            raise ValueError(f"not a cache key: {key!r}")
        target = self.directory / key
        # Found under a shared lock: trials holding the layer (shared too) do not block it.
        with self._locked(key, fcntl.LOCK_SH):
            if (target / _COMPLETE).is_file():
                with contextlib.suppress(OSError):
                    os.utime(target / _COMPLETE)  # most recently used
                return CachedRoot(key, target, CacheOutcome.HIT)
        with self._locked(key, fcntl.LOCK_EX):
            if (target / _COMPLETE).is_file():
                os.utime(target / _COMPLETE)  # most recently used
                return CachedRoot(key, target, CacheOutcome.HIT)
            shutil.rmtree(target, ignore_errors=True)  # a crashed build's leftovers
            staging = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=self.directory))
            try:
                build(staging)
                (staging / _COMPLETE).touch()
                os.replace(staging, target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        self._enforce_cap(keep=key)
        return CachedRoot(key, target, CacheOutcome.BUILT)

    @contextlib.contextmanager
    def hold(self, key: str) -> Iterator[Path]:
        """Hold `key`'s layer for a trial (a shared lock): `prune` and the cap leave it.

        Call `get` first: a `get` of the same key while holding it waits for the hold."""
        with self._locked(key, fcntl.LOCK_SH):
            yield self.directory / key

    def entries(self) -> list[tuple[str, int, float]]:
        """(key, bytes, last used) of each complete layer, least recently used first."""
        out = []
        if not self.directory.is_dir():
            return out
        for entry in self.directory.iterdir():
            marker = entry / _COMPLETE
            if entry.name.startswith(".") or not marker.is_file():
                continue
            out.append((entry.name, _size(entry), marker.stat().st_mtime))
        return sorted(out, key=lambda e: e[2])

    def _remove_unheld(self, key: str) -> bool:
        """Remove `key`'s layer unless someone holds it; True when removed."""
        fd = os.open(self._lock_path(key), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            # The lock file stays: unlinking it could let a later locker lock a new file
            # while an earlier one still holds the old.
            shutil.rmtree(self.directory / key, ignore_errors=True)
            return True
        finally:
            os.close(fd)

    def _enforce_cap(self, keep: str) -> list[str]:
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        removed = []
        for key, size, _ in entries:
            if total <= self.max_bytes:
                break
            if key != keep and self._remove_unheld(key):
                removed.append(key)
                total -= size
        return removed

    def prune(self) -> list[str]:
        """Remove every layer nobody holds (and stale staging directories); the keys removed."""
        removed = [key for key, _, _ in self.entries() if self._remove_unheld(key)]
        if self.directory.is_dir():
            for entry in self.directory.glob(".build-*"):
                key = entry.name.split("-")[1]
                # Only a crashed build's: a running build holds its key's lock.
                if self._remove_unheld(key):
                    shutil.rmtree(entry, ignore_errors=True)
        return removed
