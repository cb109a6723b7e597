"""What a Harbor task folder may cost the host: size clamps, charged copies, log copies.

A task folder is untrusted input (a 36 KB folder once filled the host's memory), so:

- `HostMaxima` clamps the task's `memory_mb`, `storage_mb` and `cpus` to host-sized maxima,
  and `clamp_task_sizes` says so in a note naming the task's value and the clamp;
- `charged_copy` applies a Dockerfile COPY (and the oracle's /solution) in a child process
  that first joins the started sandbox's cgroups, so the workspace pages it writes are
  charged to the sandbox's caps, and keeps sparse files sparse (see `_copier.py`);
- `copy_untrusted_tree` copies /logs out of a finished trial by directory descriptors
  without recursion, following nothing, with caps on depth, entries and bytes; whatever it
  does not copy gets a note naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import stat
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from skyrl_gym.envs.harbor.task import EnvironmentSettings
from skyrl_sdk.sandboxes.cgroups import controller_bases
from skyrl_sdk.sandboxes.spec import DEFAULT_PATH

COPIER = Path(__file__).with_name("_copier.py")
"""The standalone script `charged_copy` runs (standard library only)."""
MiB = 1 << 20
MEMORY_FRACTION = 0.5
"""A task's memory cap is at most this fraction of the host's memory."""
TMPFS_DISK_FRACTION = 0.25
"""As root the workspace is a tmpfs (its pages are memory): at most this fraction of the
host's memory."""
DIR_DISK_FRACTION = 0.5
"""Not root, the workspace is a plain directory: at most this fraction of its disk's free
space."""
LOG_MAX_DEPTH = 64
"""`copy_untrusted_tree` copies directories this deep at most (deeper ones get a note)."""
LOG_MAX_ENTRIES = 100_000
"""`copy_untrusted_tree` copies at most this many entries in all (the rest get a note)."""
_NOTE_PATH_CHARS = 240


def host_memory_bytes() -> int:
    """The memory this process may use: the machine's, or its own memory cgroup's limit when
    that is lower (a container)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    base = controller_bases().get("memory")
    if base is not None:
        with contextlib.suppress(OSError, ValueError):
            total = min(total, int((base / "memory.limit_in_bytes").read_text()))
    return total


@dataclass(frozen=True)
class HostMaxima:
    """The most one trial may ask of this host."""

    memory_bytes: int
    """Memory cap: `MEMORY_FRACTION` of the host's memory (`host_memory_bytes`)."""
    disk_bytes: int
    """Workspace size: `TMPFS_DISK_FRACTION` of the host's memory for a tmpfs workspace,
    else `DIR_DISK_FRACTION` of the free space where workspaces are made."""
    cpus: float
    """CPU cores: the host's."""
    disk_reason: str
    """How `disk_bytes` was chosen, for the note."""

    @classmethod
    def detect(cls, *, tmpfs_workspace: bool | None = None) -> HostMaxima:
        """Measure this host (`tmpfs_workspace` defaults to: running as root)."""
        total = host_memory_bytes()
        tmpfs = os.geteuid() == 0 if tmpfs_workspace is None else tmpfs_workspace
        if tmpfs:
            disk = int(total * TMPFS_DISK_FRACTION)
            reason = "a quarter of the host's memory: the workspace is a tmpfs"
        else:
            free = shutil.disk_usage(tempfile.gettempdir()).free
            disk = int(free * DIR_DISK_FRACTION)
            reason = "half the free disk space where workspaces are made"
        return cls(
            memory_bytes=int(total * MEMORY_FRACTION),
            disk_bytes=max(disk, 64 * MiB),
            cpus=float(os.cpu_count() or 1),
            disk_reason=reason,
        )


@dataclass(frozen=True)
class ClampedSizes:
    """A task's sizes after `clamp_task_sizes`."""

    memory_mb: int | None
    """Memory cap in MiB (None: the task sets none)."""
    storage_mb: int | None
    """Workspace size in MiB (None: the task sets none)."""
    cpus: float | None
    """CPU cores (None: the task sets none)."""
    notes: tuple[str, ...]
    """One line per value clamped, naming the task's value and the clamp."""


def clamp_task_sizes(settings: EnvironmentSettings, maxima: HostMaxima) -> ClampedSizes:
    """Clamp `[environment].memory_mb`, `storage_mb` and `cpus` to `maxima`, with notes."""
    notes: list[str] = []
    memory, storage, cpus = settings.memory_mb, settings.storage_mb, settings.cpus
    memory_max, disk_max = maxima.memory_bytes // MiB, maxima.disk_bytes // MiB
    if memory is not None and memory > memory_max:
        notes.append(
            f"[environment].memory_mb={memory} clamped to {memory_max} MiB (half the host's memory)"
        )
        memory = memory_max
    if storage is not None and storage > disk_max:
        notes.append(
            f"[environment].storage_mb={storage} clamped to {disk_max} MiB ({maxima.disk_reason})"
        )
        storage = disk_max
    if cpus is not None and cpus > maxima.cpus:
        notes.append(f"[environment].cpus={cpus:g} clamped to {maxima.cpus:g} (the host's CPUs)")
        cpus = maxima.cpus
    return ClampedSizes(memory, storage, cpus, tuple(notes))


class CopyError(RuntimeError):
    """A charged copy failed (out of memory, out of space, a link in the way, ...)."""


@dataclass(frozen=True)
class CopyJob:
    """One source of a charged copy."""

    src: Path
    """A host file, or a host directory whose contents are copied (`tree`)."""
    dest: str
    """Where it goes, relative to the copy's destination root."""
    tree: bool
    """True: copy the directory's contents into `dest`; False: copy the file to `dest`."""


async def charged_copy(
    jobs: Sequence[CopyJob],
    dest_root: Path,
    *,
    cgroup_procs: Sequence[Path] = (),
    owner: int | None = None,
    budget_bytes: int,
    timeout_s: float,
    memory_bytes: int | None = None,
) -> list[str]:
    """Copy `jobs` under `dest_root` in a child process that joins `cgroup_procs` first.

    The child writes the destination's pages, so they are charged to those cgroups (the
    sandbox's: its memory cap covers them); sparse files stay sparse; no link in the
    destination is followed; at most `budget_bytes` of data are written. Returns what was
    skipped, one line each. Raises `CopyError` (with the reason: out of memory names the
    cap) or `TimeoutError`.
    """
    if not jobs:
        return []
    argv = [sys.executable, "-I", "-S", str(COPIER)]
    if cgroup_procs:
        # Joined before the interpreter starts: every page it ever touches is charged.
        joins = " && ".join(f"echo $$ > {shlex.quote(str(p))}" for p in cgroup_procs)
        argv = ["/bin/sh", "-c", f'{joins} && exec "$@"', "sh", *argv]
    request = {
        "dest_root": str(dest_root),
        "jobs": [{"src": str(j.src), "dest": j.dest, "tree": j.tree} for j in jobs],
        "owner": owner,
        "budget": budget_bytes,
    }
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(request).encode()), timeout_s)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    notes: list[str] = []
    error: str | None = None
    for line in out.decode("utf-8", "replace").splitlines()[:200]:
        try:
            reply = json.loads(line)
        except ValueError:
            continue
        if not isinstance(reply, dict):
            continue
        if "note" in reply:
            notes.append(str(reply["note"])[:500])
        if "error" in reply:
            error = str(reply["error"])[:500]
    if proc.returncode == 0:
        return notes
    if proc.returncode is not None and proc.returncode < 0:
        cap = f" of {memory_bytes // MiB} MiB" if memory_bytes else ""
        raise CopyError(
            f"the copy was killed (signal {-proc.returncode}): out of memory? It is charged to "
            f"the sandbox's memory cap{cap} (the workspace is memory)"
        )
    raise CopyError(error or err.decode("utf-8", "replace").strip()[-300:] or "the copy failed")


def _short(path: str) -> str:
    if len(path) <= _NOTE_PATH_CHARS:
        return path
    return f"{path[: _NOTE_PATH_CHARS // 2]}...{path[-_NOTE_PATH_CHARS // 3 :]}"


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_pair(src: Path, dest: Path, shown: str, notes: list[str]) -> tuple[int, int] | None:
    """`src` and `dest` (made if missing) opened as directories with O_NOFOLLOW, or None
    with a note in `notes` when either cannot be."""
    try:
        src_fd = os.open(src, _DIR_FLAGS)
    except OSError as e:
        notes.append(f"{shown}: not copied ({e.strerror})")
        return None
    try:
        dest.mkdir(parents=True, exist_ok=True)
        dst_fd = os.open(dest, _DIR_FLAGS)
    except OSError as e:
        os.close(src_fd)
        notes.append(f"{shown}: not copied ({e.strerror})")
        return None
    return src_fd, dst_fd


def _copy_listing(
    listing: list[os.DirEntry[str]],
    here: tuple[int, int, str, int],
    stack: list[tuple[int, int, str, int]],
    entries: int,
    *,
    budget: list[int],
    file_max_bytes: int,
    notes: list[str],
    max_depth: int,
    max_entries: int,
) -> int:
    """Copy one directory's entries (`here`: its source and destination descriptors, shown
    name and depth; subdirectories are pushed on `stack`); returns the entries counted so far
    in the whole tree. Past `max_entries` nothing more is copied, with one note."""
    sfd, dfd, where, depth = here
    for entry in listing:
        rel = f"{where}/{entry.name}"
        if entries > max_entries:  # the tree is full: a note was written when it filled
            break
        entries += 1
        if entries > max_entries:
            notes.append(
                f"{_short(where)}: more than {max_entries} log entries; the rest were not copied"
            )
            break
        try:
            _copy_entry(
                entry, sfd, dfd, rel, depth, stack, budget, file_max_bytes, notes, max_depth
            )
        except OSError as e:
            notes.append(f"{_short(rel)}: skipped ({type(e).__name__}: {e.strerror or e})")
    return entries


def copy_untrusted_tree(
    src: Path,
    dest: Path,
    shown: str,
    *,
    budget: list[int],
    file_max_bytes: int,
    notes: list[str],
    max_depth: int = LOG_MAX_DEPTH,
    max_entries: int = LOG_MAX_ENTRIES,
) -> None:
    """Copy a directory tree written by sandboxed code into `dest`, following nothing.

    Directories are opened by descriptor with O_NOFOLLOW from their parent's (no path is
    resolved twice, none grows past PATH_MAX, and there is no recursion: depth is bounded by
    `max_depth`, not by Python's stack). Links are recreated as links; FIFOs, sockets and
    devices are skipped; each file is read as a regular file, cut at `file_max_bytes`, with
    `budget[0]` bytes left in all. Existing entries in `dest` are replaced, never written
    through. Everything not copied gets a line in `notes` naming it. Never raises.
    """
    pair = _open_pair(src, dest, shown, notes)
    if pair is None:
        return
    src_fd, dst_fd = pair
    stack = [(src_fd, dst_fd, shown, 0)]
    entries = 0
    try:
        while stack:
            sfd, dfd, where, depth = stack.pop()
            try:
                try:
                    listing = sorted(os.scandir(sfd), key=lambda e: e.name)
                except OSError as e:
                    notes.append(f"{_short(where)}: not copied ({e.strerror})")
                    continue
                entries = _copy_listing(
                    listing,
                    (sfd, dfd, where, depth),
                    stack,
                    entries,
                    budget=budget,
                    file_max_bytes=file_max_bytes,
                    notes=notes,
                    max_depth=max_depth,
                    max_entries=max_entries,
                )
            finally:
                os.close(sfd)
                os.close(dfd)
    except Exception as e:  # never lose the rest of a trial's record to one odd tree
        notes.append(f"{shown}: copy stopped ({type(e).__name__}: {e})")
    finally:
        for sfd, dfd, _, _ in stack:
            with contextlib.suppress(OSError):
                os.close(sfd)
            with contextlib.suppress(OSError):
                os.close(dfd)


def _clear(name: str, dfd: int) -> None:
    """Remove a file or link at `name` in `dfd` (a directory stays)."""
    try:
        info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=dfd)


def _copy_entry(
    entry: os.DirEntry[str],
    sfd: int,
    dfd: int,
    rel: str,
    depth: int,
    stack: list[tuple[int, int, str, int]],
    budget: list[int],
    file_max_bytes: int,
    notes: list[str],
    max_depth: int,
) -> None:
    name = entry.name
    info = os.stat(name, dir_fd=sfd, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        _clear(name, dfd)
        os.symlink(os.readlink(name, dir_fd=sfd), name, dir_fd=dfd)  # kept as a link
    elif stat.S_ISDIR(info.st_mode):
        if depth + 1 >= max_depth:
            notes.append(f"{_short(rel)}: deeper than {max_depth} levels; not copied")
            return
        child_src = os.open(name, _DIR_FLAGS, dir_fd=sfd)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=dfd)
            child_dst = os.open(name, _DIR_FLAGS, dir_fd=dfd)
        except BaseException:
            os.close(child_src)
            raise
        stack.append((child_src, child_dst, rel, depth + 1))
    elif stat.S_ISREG(info.st_mode):
        cap = max(0, min(file_max_bytes, budget[0]))
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=sfd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                notes.append(f"{_short(rel)}: not a regular file; skipped")
                return
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read(cap + 1)
        finally:
            os.close(fd)
        if len(data) > cap:
            data = data[:cap]
            notes.append(f"{_short(rel)}: cut at {cap} bytes")
        budget[0] -= len(data)
        _clear(name, dfd)
        out = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
            dir_fd=dfd,
        )
        with os.fdopen(out, "wb") as f:
            f.write(data)
    else:
        notes.append(f"{_short(rel)}: not a regular file, directory or symlink; skipped")
