"""Every sandbox (and every `Workspace`) is recorded on disk with its owner; `reap()` removes
those whose owner died.

A record is written *before* anything is started, so even a sandbox whose owner is killed
with SIGKILL in the middle of `start()` is found. The owner is identified by PID **and** the
kernel's start time of that PID, so a recycled PID never keeps a dead owner's sandbox alive.
Docker containers also carry the owner in labels, so they are found even without a record.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from skyrl_sdk.sandboxes.cgroups import CgroupSet
from skyrl_sdk.sandboxes.spec import SandboxError

RECORD = "record.json"
MNT_DETACH = 2
MS_NOSUID = 2
MS_NODEV = 4


def state_root() -> Path:
    """Where records and owned workspaces live: `$SKYRL_SANDBOX_STATE`, else a dir in /tmp."""
    env = os.environ.get("SKYRL_SANDBOX_STATE")
    return Path(env) if env else Path("/tmp") / f"skyrl-sandboxes-{os.geteuid()}"


def process_start_time(pid: int) -> int | None:
    """The kernel start time (clock ticks since boot) of a live PID, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        # fields[0] is the state (field 3 of stat); starttime is field 22.
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (IndexError, ValueError):
        return None


def owner_alive(pid: int, start_time: int | None) -> bool:
    """True if `pid` still runs and is the same process that created the sandbox."""
    now = process_start_time(pid)
    return now is not None and (start_time is None or now == start_time)


@dataclass(frozen=True)
class SandboxRecord:
    """What the reaper needs to clean up one sandbox."""

    id: str
    """The sandbox id (also its state directory's name)."""
    backend: str
    """Backend that created it."""
    owner_pid: int
    """PID of the process that owns it."""
    owner_start: int | None
    """Kernel start time of the owner, to tell a recycled PID apart."""
    created: float
    """Unix time of creation."""
    workspace: str | None = None
    """A workspace directory the sandbox owns (deleted on reap), if any."""
    mounts: tuple[str, ...] = ()
    """Mount points to detach before deleting the workspace."""
    cgroups: tuple[str, ...] = ()
    """Its cgroup directories; processes still in them are killed."""
    container_id: str | None = None
    """Docker container id, for the docker backend."""
    docker_host: str | None = None
    """Docker engine URL the container lives on."""
    extra_dirs: tuple[str, ...] = field(default_factory=tuple)
    """Other host paths it owns."""

    @classmethod
    def for_current_process(cls, sandbox_id: str, backend: str, **kwargs: object) -> SandboxRecord:
        pid = os.getpid()
        return cls(sandbox_id, backend, pid, process_start_time(pid), time.time(), **kwargs)  # type: ignore[arg-type]

    def state_dir(self, root: Path | None = None) -> Path:
        return (root or state_root()) / self.id


def ensure_state_root(root: Path | None = None) -> Path:
    root = root or state_root()
    # 0o711: a sandbox that runs as an unprivileged user must traverse it to its workspace.
    root.mkdir(parents=True, exist_ok=True, mode=0o711)
    return root


def save(record: SandboxRecord, root: Path | None = None) -> Path:
    """Write (or rewrite) a record atomically; returns the sandbox's state directory."""
    directory = record.state_dir(ensure_state_root(root))
    directory.mkdir(exist_ok=True, mode=0o711)
    tmp = directory / f".{RECORD}.tmp"
    tmp.write_text(json.dumps(asdict(record)))
    os.replace(tmp, directory / RECORD)
    return directory


def load(path: Path) -> SandboxRecord | None:
    try:
        data = json.loads(path.read_text())
        for key in ("mounts", "cgroups", "extra_dirs"):
            data[key] = tuple(data.get(key) or ())
        return SandboxRecord(**data)
    except (OSError, ValueError, TypeError):
        return None


def records(root: Path | None = None) -> list[SandboxRecord]:
    """Every recorded sandbox (live or not)."""
    root = root or state_root()
    found = []
    with contextlib.suppress(FileNotFoundError):
        for entry in root.iterdir():
            record = load(entry / RECORD)
            if record is not None:
                found.append(record)
    return found


def release(record: SandboxRecord, root: Path | None = None) -> list[str]:
    """Undo everything a record lists: processes, mounts, cgroups, dirs, container.

    Used by `close()` and by the reaper. Returns the errors met (it never raises).
    """
    errors: list[str] = []
    cgroups = CgroupSet({_controller_of(Path(p)): Path(p) for p in record.cgroups})
    if not cgroups.kill_all():
        errors.append(f"{record.id}: processes survived SIGKILL in {record.cgroups}")
    cgroups.remove()
    for mount in record.mounts:
        if os.path.ismount(mount) and _umount(mount) != 0:
            errors.append(f"{record.id}: cannot unmount {mount}")
    if record.container_id:
        problem = _remove_container(record)
        if problem:
            errors.append(f"{record.id}: {problem}")
            return errors  # keep the record so a later reap retries
    for path in (record.workspace, *record.extra_dirs):
        if path:
            shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(record.state_dir(root), ignore_errors=True)
    return errors


def _controller_of(path: Path) -> str:
    for controller in ("memory", "pids", "cpu"):
        if f"/{controller}/" in str(path):
            return controller
    return str(path)


def mount_tmpfs(path: Path, size: int, uid: int | None) -> None:
    """Mount a tmpfs of `size` bytes on `path` (root only), owned by `uid` if given."""
    libc = ctypes.CDLL(None, use_errno=True)
    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    options = f"size={size},mode=0755{owner}".encode()
    if libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
        err = ctypes.get_errno()
        raise SandboxError(f"cannot mount a {size}-byte tmpfs on {path}: {os.strerror(err)}")


def tmpfs_size(path: str | Path) -> int | None:
    """The size cap of the tmpfs mounted exactly at `path`, or None if it is not one."""
    target = os.path.realpath(path)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    found: int | None = None
    for line in lines:
        fields = line.split()
        if len(fields) < 10 or fields[4].replace("\\040", " ") != target:
            continue
        sep = fields.index("-")
        fstype, options = fields[sep + 1], fields[sep + 3]
        found = None  # the last mount on a path is the visible one
        if fstype == "tmpfs":
            for option in options.split(","):
                if option.startswith("size="):
                    found = _parse_size(option[5:])
    return found


def _parse_size(text: str) -> int | None:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    try:
        if text and text[-1].lower() in units:
            return int(text[:-1]) * units[text[-1].lower()]
        return int(text)
    except ValueError:
        return None


def _umount(path: str) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.umount2(path.encode(), MNT_DETACH)


def _remove_container(record: SandboxRecord) -> str | None:
    try:
        import docker
        import docker.errors
    except ImportError:
        return "docker SDK missing: cannot remove its container (pip install 'skyrl-sdk[docker]')"
    try:
        client = docker.DockerClient(base_url=record.docker_host, timeout=20)
        try:
            client.api.remove_container(record.container_id, force=True, v=True)
        finally:
            client.close()
    except docker.errors.NotFound:
        return None
    except Exception as e:  # engine down or unreachable: retry on a later reap
        return f"cannot remove container {record.container_id}: {type(e).__name__}: {e}"
    return None


@dataclass(frozen=True)
class ReapReport:
    """What one `reap()` did."""

    reaped: list[str]
    """Ids of sandboxes removed because their owner was dead."""
    alive: int
    """Sandboxes left alone because their owner still runs."""
    errors: list[str]
    """Problems met (the affected records are kept for a later reap)."""


def reap(root: Path | None = None) -> ReapReport:
    """Remove every recorded sandbox whose owner process is dead. Safe to run concurrently."""
    reaped, errors, alive = [], [], 0
    root = root or state_root()
    for record in records(root):
        if owner_alive(record.owner_pid, record.owner_start):
            alive += 1
            continue
        directory = record.state_dir(root)
        claim = directory / f"{RECORD}.reaping-{os.getpid()}"
        try:  # whoever renames the record first reaps it
            os.rename(directory / RECORD, claim)
        except OSError:
            continue
        problems = release(record, root)
        if problems and directory.exists():
            with contextlib.suppress(OSError):
                os.rename(claim, directory / RECORD)
        errors.extend(problems)
        if not problems:
            reaped.append(record.id)
    return ReapReport(reaped, alive, errors)


_reaped_once = threading.Event()


def reap_at_startup() -> None:
    """Run `reap()` once per process (the first time a sandbox starts)."""
    if _reaped_once.is_set():
        return
    _reaped_once.set()
    with contextlib.suppress(Exception):
        reap()


def kill_quietly(pid: int | None) -> None:
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
