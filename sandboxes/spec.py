"""What a sandbox is asked to be (`SandboxSpec`) and what one command gave back (`ExecResult`)."""

from __future__ import annotations

import enum
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

MiB = 1 << 20
GiB = 1 << 30

DEFAULT_DISK_BYTES = 1 * GiB
"""Default size cap of a sandbox's workspace, of a `Workspace` and of a sandbox's `/tmp`."""
DEFAULT_CPUS = 1.0
"""Default CPU bandwidth of a sandbox, in cores."""
DEFAULT_CPU_TIME_S = 600.0
"""Default CPU-time cap of one command, in seconds."""

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

AGENT_UID = 65534
"""The agent's uid (`nobody`), inside a sandbox and on the host: bwrap as root runs agent
commands as this uid, and a grading sandbox runs the programs it execs from agent-writable
paths as this uid too (see `GradingIsolation.TWO_UID`)."""


def _pick_verifier_uid(passwd: str = "/etc/passwd", group: str = "/etc/group") -> int:
    """The first of 65533, 65532, ... that names no user or group of this host."""
    used: set[int] = set()
    for path in (passwd, group):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    fields = line.split(":")
                    if len(fields) > 2 and fields[2].strip().isdigit():
                        used.add(int(fields[2]))
        except OSError:
            continue
    uid = 65533
    while uid in used and uid > 60000:
        uid -= 1
    return uid


VERIFIER_HOST_UID = _pick_verifier_uid()
"""The host uid (and gid) that a two-uid grading sandbox's verifier runs as: its uid 0 inside
(the command server and every command `exec` starts) maps to this uid on the host, never to
host root. Files the verifier writes (e.g. a reward file) are owned by it on the host. 65533
unless this host's /etc/passwd or /etc/group uses it (then the next free uid below)."""


class GradingIsolation(enum.Enum):
    """Which isolation a sandbox gives the programs its grading commands run
    (`Sandbox.grading_isolation`)."""

    TWO_UID = "two_uid"
    """`SandboxSpec(grading=True)` with a second uid: the verifier (every command `exec`
    starts) is uid 0 in a user namespace of its own, host uid `VERIFIER_HOST_UID`, with a few
    capabilities (to write the agent's files, as root in Docker); every program it execs
    from an agent-writable path, an interpreter given such a script, git and make in an
    agent-writable tree, run as `AGENT_UID` with no capabilities: they cannot write the
    verifier's files, signal or trace it, read its environment or write its memory. /proc
    is read-only."""
    SINGLE_UID = "single_uid"
    """`SandboxSpec(grading=True)` where no second uid is available (not root, no C
    compiler for the exec shim, another backend): /proc is read-only where the backend can
    do it, but agent programs run with the verifier's uid. One warning is logged per
    process; callers add a `single_uid` note to each trial."""
    NOT_GRADING = "not_grading"
    """The spec does not ask for grading (`SandboxSpec.grading` is False)."""


class SandboxError(RuntimeError):
    """A sandbox could not be started, answered nonsense, or was used after `close()`."""


class BackendUnavailable(SandboxError):
    """The requested backend cannot run here (missing binary, SDK or engine); says how to fix it."""


def _pairs(value: Any, what: str) -> tuple[tuple[str, Any], ...]:
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    try:
        pairs = tuple(sorted((str(k), v) for k, v in items))
    except (TypeError, ValueError) as e:
        raise TypeError(f"SandboxSpec.{what} must be a mapping or (key, value) pairs: {e}") from e
    return pairs


@dataclass(frozen=True)
class SandboxSpec:
    """How to build a sandbox. Frozen and hashable, so it can key a pool of warm sandboxes.

    Sizes are in bytes and times in seconds; `None` means "no limit" for a cap.
    """

    image: str | None = None
    """Docker image to run (docker backend only; required there)."""
    rootfs: str | None = None
    """Host directory mounted read-only as the sandbox's `/` (bwrap): an image's root shows
    itself. None: a minimal read-only system from the host (`/usr`, `/bin`, `/lib*`, `/sbin` and
    from `/etc` only what programs need); nothing else of the host is visible: not the
    project's checkout or venv, not `/root`, `/home`, `/var`, `/opt`, `/mnt`, `/srv`."""
    workdir: str = "/workspace"
    """Absolute path of the writable workspace inside the sandbox; the default cwd of `exec`.
    (The local backend has no mount namespace: there it is the host temp dir instead.)"""
    workspace_dir: str | None = None
    """Host directory to use as the workspace; it is kept at `close()`. None: a fresh temporary
    directory that `close()` deletes. A `Workspace` (or any path-like) is accepted: its own
    size cap then applies, not `disk_bytes`."""
    files: tuple[tuple[str, bytes], ...] = ()
    """Files written into the workspace before the sandbox starts, as (relative path, content);
    a dict {path: str | bytes} is accepted and normalised."""
    network: bool = False
    """Allow network access. Off by default: the sandbox gets its own empty network namespace
    (only a loopback that is not the host's). True: a namespace of its own with user-mode
    outbound networking (pasta, root only) and no route to the host: not its loopback, not
    its interfaces' addresses, not its abstract sockets (see `sandboxes/network.py`)."""
    memory_bytes: int | None = 512 * MiB
    """Memory cap for everything in the sandbox (cgroup v1 `memory.limit_in_bytes`; falls back
    to RLIMIT_AS per command where cgroups are unavailable)."""
    pids: int | None = 256
    """Cap on live processes and threads (cgroup `pids.max`), so a fork bomb is contained."""
    cpus: float | None = DEFAULT_CPUS
    """CPU bandwidth in cores (cgroup `cpu.cfs_quota_us`); e.g. 0.5 is half a core. Where the
    cpu controller is not writable it is not enforced (`Sandbox.limits` says so)."""
    cpu_time_s: float | None = DEFAULT_CPU_TIME_S
    """CPU-time cap per command (RLIMIT_CPU): the command is killed (SIGKILL after SIGXCPU)
    after this much CPU time."""
    disk_bytes: int | None = DEFAULT_DISK_BYTES
    """Size cap of the sandbox's own workspace and of its `/tmp`. As root the workspace is a
    size-limited tmpfs (writes beyond fail with ENOSPC); otherwise RLIMIT_FSIZE per file.
    `/tmp` is a tmpfs of this size for every user (bwrap `--size`). Both are memory: tmpfs
    pages count against `memory_bytes` (the memory cgroup charges them to the sandbox that
    wrote them, and they stay charged after the writer died), so with the defaults the memory
    cap (512 MiB) stops a runaway write first: the writer is OOM-killed, and when the files
    left behind keep the cgroup full, the command server may be killed next, after which
    `exec` raises `SandboxError` and the sandbox must be replaced. The disk cap is what
    stops the write (ENOSPC) when `memory_bytes` is above it. Size `memory_bytes` for the
    processes *plus* the files a task keeps in /tmp and the workspace. Ignored for a
    caller's `workspace_dir`, which carries its own cap (see `Workspace`)."""
    timeout_s: float = 30.0
    """Default wall-clock limit of one `exec`; the command's process group is killed after it."""
    start_timeout_s: float = 20.0
    """How long starting the sandbox may take before it is abandoned."""
    output_limit_bytes: int = 256 * 1024
    """Bytes kept per stream (stdout, stderr) of one `exec`: the first three quarters and the
    last quarter; the middle is dropped and replaced by a marker."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables of every command (on top of PATH, HOME, LANG); a dict is accepted."""
    python: str = "python3"
    """Interpreter that runs the in-sandbox command server (bwrap backend; must exist in the
    root filesystem, Python >= 3.6)."""
    ro_binds: tuple[str, ...] = ()
    """Host directories mounted read-only at the same path inside the sandbox, on top of the
    minimal system: e.g. data a task needs, or a small virtualenv built for sandboxes (never
    the project's own venv: its packages and the checkout it points to would be readable).
    The local backend needs none; docker adds them as read-only volumes."""
    grading: bool = False
    """A grading (verifier) sandbox: its commands are the verifier, the workspace the agent's
    work. /proc is read-only, and on bwrap as root the verifier gets a uid of its own and
    programs it runs from agent-writable paths run as the agent (`GradingIsolation`; the
    started sandbox's `grading_isolation` says which one it got)."""
    forward_ports: tuple[int, ...] = ()
    """TCP ports of the host's loopback reachable inside at 127.0.0.1:PORT (and [::1]:PORT),
    with or without `network`; nothing else of the host is. For an agent inside a sandbox
    that calls the SDK's own model server. bwrap and docker, root only (pasta `-T`)."""

    def __post_init__(self) -> None:
        if self.workspace_dir is not None and not isinstance(self.workspace_dir, str):
            object.__setattr__(self, "workspace_dir", os.fspath(self.workspace_dir))
        binds = (self.ro_binds,) if isinstance(self.ro_binds, str) else tuple(self.ro_binds)
        for path in binds:
            if not isinstance(path, str) or not path.startswith("/") or path.rstrip("/") == "":
                raise ValueError(
                    f"SandboxSpec.ro_binds: {path!r} must be an absolute path other than /"
                )
        object.__setattr__(self, "ro_binds", tuple(os.path.normpath(p) for p in binds))
        ports = tuple(self.forward_ports)
        if any(not isinstance(p, int) or isinstance(p, bool) or not 0 < p < 65536 for p in ports):
            raise ValueError(f"SandboxSpec.forward_ports must be TCP ports 1-65535, got {ports!r}")
        object.__setattr__(self, "forward_ports", ports)
        object.__setattr__(self, "env", tuple((k, str(v)) for k, v in _pairs(self.env, "env")))
        files = []
        for path, content in _pairs(self.files, "files"):
            if isinstance(content, str):
                content = content.encode()
            if not isinstance(content, bytes | bytearray):
                raise TypeError(
                    f"SandboxSpec.files[{path!r}] must be str or bytes, got {type(content).__name__}"
                )
            rel = PurePosixPath(path)
            if rel.is_absolute() or ".." in rel.parts or not rel.parts:
                raise ValueError(
                    f"SandboxSpec.files: {path!r} must be a relative path inside the workspace"
                )
            files.append((str(rel), bytes(content)))
        object.__setattr__(self, "files", tuple(files))
        if not self.workdir.startswith("/") or self.workdir.rstrip("/") in ("", "/proc", "/dev"):
            raise ValueError(
                f"SandboxSpec.workdir must be an absolute path other than /, /proc, /dev; got {self.workdir!r}"
            )
        for name in ("memory_bytes", "pids", "disk_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ValueError(
                    f"SandboxSpec.{name} must be a positive int or None, got {value!r}"
                )
        if self.memory_bytes is not None and self.memory_bytes < 16 * MiB:
            raise ValueError(
                f"SandboxSpec.memory_bytes={self.memory_bytes} is below 16 MiB; the command server alone needs ~10 MiB"
            )
        if self.pids is not None and self.pids < 4:
            raise ValueError(f"SandboxSpec.pids={self.pids} is too small (at least 4)")
        for name in ("cpus", "cpu_time_s"):
            value = getattr(self, name)
            if value is not None and (not _finite(value) or value <= 0):
                raise ValueError(
                    f"SandboxSpec.{name} must be a positive number or None, got {value!r}"
                )
        for name in ("timeout_s", "start_timeout_s"):
            value = getattr(self, name)
            if not _finite(value) or value <= 0:
                raise ValueError(f"SandboxSpec.{name} must be a positive number, got {value!r}")
        if not isinstance(self.output_limit_bytes, int) or self.output_limit_bytes < 64:
            raise ValueError(
                f"SandboxSpec.output_limit_bytes must be an int >= 64, got {self.output_limit_bytes!r}"
            )


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class ExecStatus(enum.Enum):
    """How a command ended."""

    OK = "ok"
    """Exited with status 0."""
    FAILED = "failed"
    """Exited with a non-zero status."""
    TIMEOUT = "timeout"
    """Killed at its wall-clock timeout."""
    KILLED = "killed"
    """Killed by a signal: the memory cap (see `oom_killed`), the CPU-time cap, or itself."""
    CANCELLED = "cancelled"
    """The caller cancelled the `exec` (its asyncio task was cancelled)."""


@dataclass(frozen=True)
class ExecResult:
    """What one `exec` returned. Output is text: invalid UTF-8 is replaced, never raised on."""

    exit_code: int
    """The exit status; negative -N when a signal N killed the command (as in `subprocess`)."""
    stdout: str
    """Standard output, capped at the spec's `output_limit_bytes` (see `truncated`)."""
    stderr: str
    """Standard error, capped likewise."""
    timed_out: bool = False
    """True when the wall-clock timeout killed the command."""
    truncated: bool = False
    """True when stdout or stderr exceeded the cap; the text then carries a
    `[... N bytes truncated ...]` marker where bytes were dropped."""
    duration_s: float = 0.0
    """Wall time of the command inside the sandbox."""
    oom_killed: bool = False
    """True when the memory cgroup's OOM killer fired during the command."""
    cancelled: bool = False
    """True when the caller cancelled the command."""
    stdout_bytes: int = 0
    """Bytes the command wrote to stdout, before truncation."""
    stderr_bytes: int = 0
    """Bytes the command wrote to stderr, before truncation."""
    left_running: int | None = None
    """With `exec(..., end_all=True)`: how many other processes of the sandbox were still
    running when the command exited (all of them were killed at that moment); None when not
    asked, or where the command server is not the sandbox's PID 1 (then nothing is killed)."""
    orphaned: int | None = None
    """With `exec(..., end_all=True)`: how many processes the command started outlived their
    parent and ended while it ran (re-parented to the server, PID 1, which reaped them); None
    like `left_running`."""

    @property
    def status(self) -> ExecStatus:
        """The outcome as an enum."""
        if self.cancelled:
            return ExecStatus.CANCELLED
        if self.timed_out:
            return ExecStatus.TIMEOUT
        if self.exit_code < 0 or self.oom_killed:
            return ExecStatus.KILLED
        return ExecStatus.OK if self.exit_code == 0 else ExecStatus.FAILED

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0."""
        return self.status is ExecStatus.OK

    @property
    def output(self) -> str:
        """stdout followed by stderr, for showing to a model."""
        if not self.stderr:
            return self.stdout
        if not self.stdout:
            return self.stderr
        sep = "" if self.stdout.endswith("\n") else "\n"
        return f"{self.stdout}{sep}{self.stderr}"


def decode_capped(head: bytes, tail: bytes, total: int) -> tuple[str, bool]:
    """Text of a captured stream: head + marker + tail when bytes were dropped in between.

    Bytes are decoded as UTF-8 with replacement, so a cut in the middle of a character or
    binary output yields U+FFFD characters, never an exception.
    """
    dropped = total - len(head) - len(tail)
    text = head.decode("utf-8", "replace")
    if dropped <= 0:
        return text + tail.decode("utf-8", "replace"), False
    marker = f"\n[... {dropped} bytes truncated ...]\n"
    return text + marker + tail.decode("utf-8", "replace"), True
