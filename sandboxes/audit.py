"""`skyrl sandbox audit`: escape probes against a sandbox backend, on this machine.

Each probe is one known way out of a sandbox (the vectors of issue 14), tried for real: a small
command runs inside a real sandbox of the backend, started with the default `SandboxSpec`
(plus what the probe is about, e.g. `network=True`), and the host checks what it could reach.
A probe ends in one of four verdicts:

- `contained`: the attack failed;
- `NOT contained`: it worked (the audit exits 1);
- `not enforced here`: the machine cannot give this cap (no writable cgroup controller, not
  root, no user-mode network tool), so nothing was tried; the detail says what is missing;
- `error`: the probe itself could not run (the audit exits 2 if nothing was NOT contained).

    from skyrl_sdk.sandboxes.audit import audit
    report = audit("bwrap")
    assert report.exit_code == 0, report.failures()

The whole audit takes a few seconds: probes run a few at a time, and the heavy ones (memory,
disk) stop at their cap, which is a fraction of a second when the cap holds.

To check the audit itself, `run_audit` also takes a `Sandbox` subclass instead of a backend
name (in-process only; the CLI takes names), e.g. a deliberately weakened one in a test.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import itertools
import json
import math
import os
import secrets
import selectors
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyrl_sdk.sandboxes.base import Sandbox
from skyrl_sdk.sandboxes.factory import sandbox_class
from skyrl_sdk.sandboxes.spec import BackendUnavailable, ExecResult, SandboxSpec

__all__ = [
    "PROBES",
    "AuditReport",
    "ProbeResult",
    "Verdict",
    "audit",
    "print_report",
    "run_audit",
]

MiB = 1 << 20
_PROBE_TIMEOUT_S = 30.0
"""Hard limit of one probe (a probe that hangs is an `error`, never a hung audit)."""
_OVERSHOOT = 32 * MiB
"""How far past a cap the memory and disk probes try to go."""
# Host directories a sandbox shows on purpose (the minimal read-only system).
_SYSTEM_TOPS = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc"}
_HOST_DIRS = ("/root", "/home", "/var", "/opt", "/srv", "/mnt", "/work")
_MARK = "SKYRL-AUDIT-HOOK:"


class Verdict(enum.StrEnum):
    """The outcome of one probe."""

    CONTAINED = "contained"
    """The attack failed: the sandbox held."""
    NOT_CONTAINED = "not_contained"
    """The attack worked: this is an escape (the audit exits 1)."""
    NOT_ENFORCED = "not_enforced"
    """This machine cannot give the protection (no cgroup controller, not root, no user-mode
    network tool), so it was not tried; the detail says what is missing."""
    ERROR = "error"
    """The probe itself failed to run (the audit exits 2 if nothing was NOT contained)."""

    @property
    def label(self) -> str:
        """How the verdict is printed in the table."""
        return _LABELS[self]


_LABELS = {
    Verdict.CONTAINED: "contained",
    Verdict.NOT_CONTAINED: "NOT contained",
    Verdict.NOT_ENFORCED: "not enforced here",
    Verdict.ERROR: "error",
}
_STYLES = {
    Verdict.CONTAINED: "green",
    Verdict.NOT_CONTAINED: "bold red",
    Verdict.NOT_ENFORCED: "yellow",
    Verdict.ERROR: "magenta",
}


@dataclass(frozen=True)
class ProbeResult:
    """What one probe found."""

    probe: str
    """The probe's id (a key of `PROBES`), e.g. `network-off`."""
    title: str
    """What it checks, in words."""
    vector: str
    """The issue-14 vector it stands for (its number)."""
    verdict: Verdict
    """contained / NOT contained / not enforced here / error."""
    detail: str
    """A short explanation: what was tried and what stopped it (or did not)."""
    duration_s: float = 0.0
    """Wall time of the probe."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "probe": self.probe,
            "title": self.title,
            "vector": self.vector,
            "verdict": self.verdict.value,
            "detail": self.detail,
            "duration_s": round(self.duration_s, 3),
        }


@dataclass(frozen=True)
class AuditReport:
    """Every probe's result for one backend."""

    backend: str
    """The backend audited (its name)."""
    results: tuple[ProbeResult, ...]
    """One result per probe, in `PROBES` order."""
    duration_s: float
    """Wall time of the whole audit."""

    @property
    def exit_code(self) -> int:
        """1 if anything is NOT contained, else 2 if a probe could not run, else 0."""
        verdicts = {r.verdict for r in self.results}
        if Verdict.NOT_CONTAINED in verdicts:
            return 1
        return 2 if Verdict.ERROR in verdicts else 0

    def result(self, probe: str) -> ProbeResult:
        """The result of one probe, by id."""
        for r in self.results:
            if r.probe == probe:
                return r
        raise KeyError(probe)

    def failures(self) -> list[ProbeResult]:
        """The results that are NOT contained or errors."""
        return [r for r in self.results if r.verdict in (Verdict.NOT_CONTAINED, Verdict.ERROR)]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (what `--json` prints on its last line)."""
        counts = {v.value: sum(r.verdict is v for r in self.results) for v in Verdict}
        return {
            "backend": self.backend,
            "exit_code": self.exit_code,
            "duration_s": round(self.duration_s, 3),
            "counts": counts,
            "probes": [r.to_json() for r in self.results],
        }


# ---- running probes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    """What every probe gets: how to make a sandbox, and the host-side targets."""

    make: Callable[[SandboxSpec], Sandbox]
    """The backend's class (or a test's subclass): `make(spec)` is a sandbox, not started."""
    backend: str
    """The backend's name (for child processes, which cannot take a class)."""
    spec: SandboxSpec
    """The default spec every probe starts from."""
    targets: _HostTargets | None
    """The host listeners of the network probes (None when none of them runs)."""


@contextlib.asynccontextmanager
async def _sandbox(ctx: _Context, **changes: Any) -> AsyncIterator[Sandbox]:
    spec = dataclasses.replace(ctx.spec, **changes) if changes else ctx.spec
    sandbox = ctx.make(spec)
    try:
        await sandbox.start()
        yield sandbox
    finally:
        await sandbox.close()


def _limits(sandbox: Sandbox) -> dict[str, str]:
    """How the sandbox says it enforces each cap (`Sandbox.limits`); {} if it does not say."""
    return dict(sandbox.limits or {})


_PY = ("python3", "-S", "-c")
"""How probe scripts run: the sandbox's own python3, no site (fast, and not what is probed)."""


async def _py(sandbox: Sandbox, source: str, *args: str, timeout: float = 10.0) -> ExecResult:
    return await sandbox.exec([*_PY, source, *args], timeout=timeout)


def _json_line(result: ExecResult) -> Any:
    """The JSON object a probe script printed last, or raise with what it printed instead."""
    for line in reversed(result.stdout.splitlines()):
        line = line.strip()
        if line.startswith(("{", "[", '"')):
            return json.loads(line)
    raise RuntimeError(
        f"probe script gave no result (exit {result.exit_code}): "
        f"{(result.stderr or result.stdout).strip()[-300:]}"
    )


Outcome = tuple[Verdict, str]


@dataclass(frozen=True)
class _Probe:
    """One escape probe."""

    title: str
    """What it checks, in words."""
    vector: str
    """The issue-14 vector it stands for."""
    run: Callable[[_Context], Awaitable[Outcome]]
    """The probe: a verdict and a short detail."""
    network: bool = False
    """True if it needs the host listeners."""


# ---- host files -------------------------------------------------------------------------------

_STAT_SCRIPT = r"""
import json, os, sys
out = {}
for p in json.loads(sys.argv[1]):
    try:
        st = os.stat(p)
        out[p] = [st.st_dev, st.st_ino]
    except OSError as e:
        out[p] = e.strerror or type(e).__name__
print(json.dumps(out))
"""


def _canary(directory: Path, limit: int = 400) -> Path | None:
    """A regular file under `directory` (breadth-first, shallow), to look for from inside."""
    queue, seen = [directory], 0
    while queue and seen < limit:
        current = queue.pop(0)
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                if entry.is_file(follow_symlinks=False) and entry.stat().st_size > 0:
                    return Path(entry.path)
                if entry.is_dir(follow_symlinks=False) and len(entry.path.split("/")) < 8:
                    queue.append(Path(entry.path))
            except OSError:
                continue
    return None


def _host_paths() -> dict[str, str]:
    """Host directories no sandbox may show -> why they matter."""
    import skyrl_sdk

    checkout = Path(skyrl_sdk.__file__).resolve().parent.parent
    wanted = [
        (str(checkout), f"project checkout {checkout}"),
        (sys.prefix, f"sys.prefix {sys.prefix}"),
        (os.getcwd(), f"caller's cwd {os.getcwd()}"),
        *((d, d) for d in _HOST_DIRS),
    ]
    found: dict[str, str] = {}
    for path, why in wanted:
        real = os.path.realpath(path)
        top = real.strip("/").split("/")[0]
        if real == "/" or top in _SYSTEM_TOPS or real in found:
            continue  # the minimal system is shown by design
        found[real] = why
    return found


async def _probe_host_files(ctx: _Context) -> Outcome:
    return await _host_files_outcome(lambda: _sandbox(ctx))


async def _host_files_outcome(
    opener: Callable[[], contextlib.AbstractAsyncContextManager[Sandbox]],
) -> Outcome:
    """Whether a sandbox from `opener` sees any host directory it must not (by identity)."""
    checked: dict[str, tuple[str, list[int]]] = {}  # in-sandbox path -> (what, host identity)
    absent = []
    for path, why in _host_paths().items():
        if not os.path.isdir(path):
            absent.append(path)
            continue
        for target in (path, _canary(Path(path))):
            if target is None:
                continue
            try:
                st = os.stat(target)
            except OSError:
                continue
            checked[str(target)] = (why, [st.st_dev, st.st_ino])
    async with opener() as sandbox:
        seen = _json_line(await _py(sandbox, _STAT_SCRIPT, json.dumps(sorted(checked))))
    visible = sorted(
        {why for path, (why, identity) in checked.items() if seen.get(path) == identity}
    )
    if visible:
        return Verdict.NOT_CONTAINED, "visible inside: " + ", ".join(visible)
    tops = sorted({w for w, _ in checked.values()})
    detail = f"hidden: {', '.join(tops)}"
    if absent:
        detail += f"; not on this host: {', '.join(absent)}"
    return Verdict.CONTAINED, detail


# ---- network ----------------------------------------------------------------------------------

_NET_SCRIPT = r"""
import json, socket, sys
cfg = json.loads(sys.argv[1])
token = cfg["token"].encode()
out = {}
route = None
def attempt(label, family, address):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(address)
        data = b""
        while len(data) < len(token):
            chunk = s.recv(256)
            if not chunk:
                break
            data += chunk
        out[label] = "REACHED" if token in data else "connected to something else"
    except OSError as e:
        out[label] = e.strerror or type(e).__name__
    finally:
        s.close()
for label, host, port in cfg["tcp"]:
    attempt(label, socket.AF_INET6 if ":" in host else socket.AF_INET, (host, port))
# User-mode network tools map the default gateway to the host's loopback unless told not to.
try:
    for line in open("/proc/net/route").read().splitlines()[1:]:
        f = line.split()
        if len(f) > 2 and f[1] == "00000000" and f[2] != "00000000":
            gw = socket.inet_ntoa(bytes.fromhex(f[2])[::-1])
            route = gw
            attempt("gateway %s -> host loopback port" % gw, socket.AF_INET, (gw, cfg["gw_port"]))
            break
except OSError:
    pass
try:
    for line in open("/proc/net/ipv6_route").read().splitlines():
        f = line.split()
        if cfg.get("gw6_port") and len(f) > 9 and f[1] == "00" and set(f[4]) != {"0"}:
            gw = socket.inet_ntop(socket.AF_INET6, bytes.fromhex(f[4]))
            scope = socket.if_nametoindex(f[9]) if gw.startswith("fe80") else 0
            attempt("gateway %s -> host ::1 port" % gw, socket.AF_INET6, (gw, cfg["gw6_port"], 0, scope))
            break
except OSError:
    pass
attempt("host abstract unix socket", socket.AF_UNIX, "\0" + cfg["unix"])
print(json.dumps({"targets": out, "route": route}))
"""


def _host_address6() -> str | None:
    """An IPv6 address of one of this host's own interfaces (not loopback or link-local)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        s.connect(("2001:db8::1", 9))  # documentation prefix: only a route is chosen
        addr = s.getsockname()[0]
        if addr not in ("::", "::1") and not addr.startswith("fe80"):
            return addr
    return None


def _host_address() -> str | None:
    """An IPv4 address of one of this host's own non-loopback interfaces, if any."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent, only a route is chosen
        addr = s.getsockname()[0]
        if not addr.startswith(("127.", "0.")):
            return addr
    # No default route: take any local address from the kernel's table.
    with contextlib.suppress(OSError):
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
        for before, line in itertools.pairwise(lines):
            if "/32 host LOCAL" in line:
                addr = before.split()[-1]
                if not addr.startswith("127."):
                    return addr
    return None


class _HostTargets:
    """Listeners on the host that a sandbox must not reach: 127.0.0.1, ::1, a non-loopback
    address of the host, and an abstract unix socket. Each answers with a secret token, so a
    connection that gets the token reached *this* host process, not something in the sandbox."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(16)
        self.unix_name = f"skyrl-audit-{secrets.token_hex(8)}"
        self.tcp: list[tuple[str, str, int]] = []
        self._listeners: list[socket.socket] = []
        self._stop = threading.Event()
        self._selector = selectors.DefaultSelector()
        self.loopback_port = self._listen_tcp("host 127.0.0.1", socket.AF_INET, "127.0.0.1")
        self.loopback6_port: int | None = None
        with contextlib.suppress(OSError):
            self.loopback6_port = self._listen_tcp("host ::1", socket.AF_INET6, "::1")
        address = _host_address()
        self.address = address
        if address is not None:
            self._listen_tcp(f"host address {address}", socket.AF_INET, address)
        address6 = _host_address6()
        if address6 is not None:
            with contextlib.suppress(OSError):
                self._listen_tcp(f"host address {address6}", socket.AF_INET6, address6)
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind("\0" + self.unix_name)
        self._add(unix)
        self._thread = threading.Thread(target=self._serve, name="skyrl-audit-targets", daemon=True)
        self._thread.start()

    def _listen_tcp(self, label: str, family: int, host: str) -> int:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((host, 0))
        except OSError:
            sock.close()
            raise
        port = sock.getsockname()[1]
        self._add(sock)
        self.tcp.append((label, host, port))
        return port

    def _add(self, sock: socket.socket) -> None:
        sock.listen(64)
        sock.setblocking(False)
        self._listeners.append(sock)
        self._selector.register(sock, selectors.EVENT_READ)

    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(0.1):
                with contextlib.suppress(OSError):
                    conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
                    with conn:
                        conn.setblocking(True)
                        conn.settimeout(1.0)
                        conn.sendall(self.token.encode())

    def config(self) -> str:
        return json.dumps(
            {
                "token": self.token,
                "tcp": self.tcp,
                "unix": self.unix_name,
                "gw_port": self.loopback_port,
                "gw6_port": self.loopback6_port,
            }
        )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for sock in self._listeners:
            sock.close()
        self._selector.close()


async def _network_outcome(ctx: _Context, network: bool) -> Outcome:
    assert ctx.targets is not None
    try:
        async with _sandbox(ctx, network=network) as sandbox:
            seen = _json_line(await _py(sandbox, _NET_SCRIPT, ctx.targets.config(), timeout=20))
    except BackendUnavailable as e:
        if not network:
            raise
        return Verdict.NOT_ENFORCED, f"network=True cannot start here: {e}"
    targets = seen["targets"]
    reached = sorted(label for label, what in targets.items() if what == "REACHED")
    if reached:
        return Verdict.NOT_CONTAINED, "reached: " + ", ".join(reached)
    route = f"default route via {seen['route']}" if seen["route"] else "no default route"
    missing = "; this host has no non-loopback address" if not ctx.targets.address else ""
    return Verdict.CONTAINED, f"{len(targets)} host targets unreachable ({route}{missing})"


async def _probe_network_off(ctx: _Context) -> Outcome:
    return await _network_outcome(ctx, network=False)


async def _probe_network_on(ctx: _Context) -> Outcome:
    return await _network_outcome(ctx, network=True)


# ---- the command server -----------------------------------------------------------------------

_PTRACE_SCRIPT = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
pid = os.getppid()  # the command server spawned this command
out = {"pid": pid}
if pid > 0:
    # PTRACE_SEIZE does not stop the server; exiting detaches.
    r = libc.ptrace(0x4206, pid, None, None)
    out["attach"] = "ATTACHED" if r == 0 else os.strerror(ctypes.get_errno())
    try:
        with open("/proc/%d/maps" % pid) as m:
            start = int(m.readline().split("-")[0], 16)
        with open("/proc/%d/mem" % pid, "rb", buffering=0) as f:
            f.seek(start)
            f.read(16)
        out["mem"] = "READ"
    except OSError as e:
        out["mem"] = e.strerror or type(e).__name__
# ptrace itself is allowed as in Docker: the refusal above must be the server's own
# (non-dumpable), so show what PTRACE_TRACEME does in a child.
child = os.fork()
if child == 0:
    os._exit(0 if libc.ptrace(0, 0, None, None) == 0 else 1)
out["traceme"] = "allowed" if os.waitpid(child, 0)[1] == 0 else "refused"
print(json.dumps(out))
"""


async def _probe_ptrace(ctx: _Context) -> Outcome:
    async with _sandbox(ctx) as sandbox:
        seen = _json_line(await _py(sandbox, _PTRACE_SCRIPT))
    if seen["pid"] <= 0:
        return Verdict.CONTAINED, "the command has no parent process to trace"
    broke = [k for k in ("attach", "mem") if seen.get(k) in ("ATTACHED", "READ")]
    detail = (
        f"ptrace: {seen['attach']}; /proc/{seen['pid']}/mem: {seen['mem']}; "
        f"PTRACE_TRACEME in a child: {seen.get('traceme')}"
    )
    return (Verdict.NOT_CONTAINED if broke else Verdict.CONTAINED), detail


_USERNS_SCRIPT = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.unshare(0x10000000)  # CLONE_NEWUSER
print(json.dumps("CREATED" if r == 0 else os.strerror(ctypes.get_errno())))
"""


async def _probe_userns(ctx: _Context) -> Outcome:
    async with _sandbox(ctx) as sandbox:
        seen = _json_line(await _py(sandbox, _USERNS_SCRIPT))
    if seen == "CREATED":
        return Verdict.NOT_CONTAINED, "unshare(CLONE_NEWUSER) succeeded"
    return Verdict.CONTAINED, f"unshare(CLONE_NEWUSER): {seen}"


_SYSCALL_SCRIPT = r"""
import ctypes, json, os, platform, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long
NR = {"x86_64": {"keyctl": 250, "bpf": 321, "perf_event_open": 298},
      "aarch64": {"keyctl": 219, "bpf": 280, "perf_event_open": 241}}.get(platform.machine(), {})
out = {}
def record(name, r):
    out[name] = [int(r), 0 if r >= 0 else ctypes.get_errno()]
    if r >= 0 and name != "keyctl" and name != "mount":
        os.close(r)
if "keyctl" in NR:  # KEYCTL_GET_KEYRING_ID of the session keyring
    record("keyctl", libc.syscall(L(NR["keyctl"]), L(0), L(-3), L(0)))
if "bpf" in NR:  # BPF_MAP_CREATE: a 1-entry array map
    attr = ctypes.create_string_buffer(struct.pack("IIII", 2, 4, 4, 1) + bytes(56), 72)
    record("bpf", libc.syscall(L(NR["bpf"]), L(0), attr, L(72)))
if "perf_event_open" in NR:  # a user-only software counter of this process
    attr = ctypes.create_string_buffer(struct.pack("IIQQQQQ", 1, 112, 1, 0, 0, 0, 97) + bytes(64), 112)
    record("perf_event_open", libc.syscall(L(NR["perf_event_open"]), attr, L(0), L(-1), L(-1), L(0)))
target = os.path.join(os.getcwd(), ".skyrl-audit-mnt")
os.makedirs(target, exist_ok=True)
r = libc.mount(b"none", target.encode(), b"tmpfs", L(0), None)
record("mount", r)
if r == 0:
    libc.umount2(target.encode(), 2)
os.rmdir(target)
print(json.dumps(out))
"""
_BLOCKED_ERRNOS = {1, 13, 38}  # EPERM, EACCES, ENOSYS: stopped before the kernel acted


async def _probe_syscalls(ctx: _Context) -> Outcome:
    async with _sandbox(ctx) as sandbox:
        seen = _json_line(await _py(sandbox, _SYSCALL_SCRIPT))
    reached, blocked = [], []
    for name, (ret, err) in sorted(seen.items()):
        if ret >= 0 or err not in _BLOCKED_ERRNOS:
            reached.append(f"{name} ({'allowed' if ret >= 0 else os.strerror(err)})")
        else:
            blocked.append(f"{name} {os.strerror(err)}")
    if reached:
        return Verdict.NOT_CONTAINED, "reach the kernel: " + ", ".join(reached)
    return Verdict.CONTAINED, "refused: " + ", ".join(blocked)


# ---- caps -------------------------------------------------------------------------------------

_ALLOC_SCRIPT = r"""
import sys
b = b"x" * int(sys.argv[1])
print("ALLOCATED %d" % len(b))
"""


def _how_stopped(result: ExecResult) -> str:
    if result.oom_killed:
        return "OOM-killed by the memory cgroup"
    if result.exit_code < 0:
        return f"killed by signal {-result.exit_code}"
    tail = (result.stderr.strip().splitlines() or [""])[-1]
    return tail[:120] or f"exit {result.exit_code}"


async def _probe_memory(ctx: _Context) -> Outcome:
    cap = ctx.spec.memory_bytes
    if cap is None:
        return Verdict.NOT_CONTAINED, "the default spec sets no memory cap"
    want = cap + _OVERSHOOT * 2
    async with _sandbox(ctx) as sandbox:
        how = _limits(sandbox).get("memory", "unreported")
        result = await _py(sandbox, _ALLOC_SCRIPT, str(want), timeout=20)
    if "ALLOCATED" in result.stdout:
        if how == "none":
            return Verdict.NOT_ENFORCED, f"allocated {want // MiB} MiB: no memory cap here"
        return Verdict.NOT_CONTAINED, f"allocated {want // MiB} MiB past the {cap // MiB} MiB cap"
    return Verdict.CONTAINED, f"{cap // MiB} MiB ({how}): {_how_stopped(result)}"


_FORK_SCRIPT = r"""
import json, os, sys
n, r, w = int(sys.argv[1]), *os.pipe()
forked, error = 0, None
for _ in range(n):
    try:
        pid = os.fork()
    except OSError as e:
        error = e.strerror
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    forked += 1
os.close(w)
for _ in range(forked):
    os.wait()
print(json.dumps({"forked": forked, "error": error}))
"""


async def _probe_pids(ctx: _Context) -> Outcome:
    cap = ctx.spec.pids
    if cap is None:
        return Verdict.NOT_CONTAINED, "the default spec sets no pids cap"
    async with _sandbox(ctx) as sandbox:
        how = _limits(sandbox).get("pids", "unreported")
        if how == "none":
            return Verdict.NOT_ENFORCED, "no writable pids cgroup controller here"
        seen = _json_line(await _py(sandbox, _FORK_SCRIPT, str(cap + 64), timeout=20))
    if seen["forked"] >= cap:
        return Verdict.NOT_CONTAINED, f"forked {seen['forked']} processes past the cap of {cap}"
    return (
        Verdict.CONTAINED,
        f"cap {cap} ({how}): fork failed after {seen['forked']} ({seen['error']})",
    )


_FILL_SCRIPT = r"""
import json, os, sys
directory, total = sys.argv[1], int(sys.argv[2])
chunk = b"x" * (4 << 20)
written, error, i = 0, None, 0
try:
    while written < total:  # several files: a per-file limit is not a disk cap
        with open(os.path.join(directory, ".skyrl-audit-fill-%d" % i), "wb", buffering=0) as f:
            for _ in range(64):
                if written >= total:
                    break
                written += f.write(chunk)
        i += 1
except OSError as e:
    error = e.strerror
print(json.dumps({"written": written, "error": error}))
"""


async def _fill(sandbox: Sandbox, directory: str, total: int) -> tuple[bool, str]:
    """Write `total` bytes under `directory`; (True, how) if it got through, else (False, why)."""
    result = await _py(sandbox, _FILL_SCRIPT, directory, str(total), timeout=30)
    try:
        seen = _json_line(result)
    except RuntimeError:
        return False, _how_stopped(result)
    if seen["error"] is None and seen["written"] >= total:
        return True, f"wrote {seen['written'] // MiB} MiB"
    return False, f"{seen['error'] or 'stopped'} after {seen['written'] // MiB} MiB"


async def _probe_disk(ctx: _Context) -> Outcome:
    cap = ctx.spec.disk_bytes
    if cap is None:
        return Verdict.NOT_CONTAINED, "the default spec sets no disk cap"
    total = cap + _OVERSHOOT
    parts: list[str] = []
    verdicts: list[Verdict] = []
    # The workspace. Each target gets its own sandbox: a fill stopped by the memory cgroup
    # leaves the sandbox at its memory cap.
    async with _sandbox(ctx) as sandbox:
        how = _limits(sandbox).get("disk", "unreported")
        if how in ("none", "rlimit"):
            verdicts.append(Verdict.NOT_ENFORCED)
            parts.append(f"workspace: {how} (a size-capped tmpfs needs root)")
        else:
            escaped, what = await _fill(sandbox, sandbox.workdir, total)
            verdicts.append(Verdict.NOT_CONTAINED if escaped else Verdict.CONTAINED)
            parts.append(f"workspace ({how}): {what}")
    # /tmp: first, is it the host's own /tmp? Then a fill would write to the host; don't.
    async with _sandbox(ctx) as sandbox:
        host = os.stat("/tmp")
        inside = _json_line(await _py(sandbox, _STAT_SCRIPT, json.dumps(["/tmp"])))["/tmp"]
        if inside == [host.st_dev, host.st_ino]:
            verdicts.append(Verdict.NOT_CONTAINED)
            parts.append("/tmp is the host's /tmp")
        else:
            escaped, what = await _fill(sandbox, "/tmp", total)
            verdicts.append(Verdict.NOT_CONTAINED if escaped else Verdict.CONTAINED)
            parts.append(f"/tmp ({_limits(sandbox).get('tmp', 'unreported')}): {what}")
    return _worst(verdicts), f"cap {cap // MiB} MiB; " + "; ".join(parts)


def _worst(verdicts: Iterable[Verdict]) -> Verdict:
    order = [Verdict.NOT_CONTAINED, Verdict.ERROR, Verdict.NOT_ENFORCED, Verdict.CONTAINED]
    found = set(verdicts)
    return next(v for v in order if v in found)


_CPU_SCRIPT = r"""
import json, os, resource, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
n, burn = int(sys.argv[1]), float(sys.argv[2])
t0 = time.monotonic()
pids = []
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        end = time.monotonic() + burn
        while time.monotonic() < end:
            pass
        os._exit(0)
    pids.append(pid)
cpu = 0.0
for pid in pids:
    ru = os.wait4(pid, 0)[2]
    cpu += ru.ru_utime + ru.ru_stime
print(json.dumps({"soft": soft, "cpu": cpu, "wall": time.monotonic() - t0}))
"""


async def _probe_cpu(ctx: _Context) -> Outcome:
    cpus, cpu_time = ctx.spec.cpus, ctx.spec.cpu_time_s
    missing = [
        what for what, value in (("CPU quota", cpus), ("CPU-time cap", cpu_time)) if value is None
    ]
    if missing:
        return Verdict.NOT_CONTAINED, f"the default spec sets no {' and no '.join(missing)}"
    assert cpus is not None and cpu_time is not None
    cores = len(os.sched_getaffinity(0))
    busy = min(cores, math.ceil(cpus) + 1)
    async with _sandbox(ctx) as sandbox:
        how = _limits(sandbox).get("cpus", "unreported")
        seen = _json_line(await _py(sandbox, _CPU_SCRIPT, str(busy), "0.5", timeout=20))
    used = seen["cpu"] / max(seen["wall"], 1e-6)
    soft = seen["soft"]
    if soft < 0 or abs(soft - round(cpu_time)) > 1:
        return Verdict.NOT_CONTAINED, f"RLIMIT_CPU inside is {soft}, not {round(cpu_time)} s"
    measured = f"{busy} busy processes used {used:.2f} cores"
    if busy > cpus and used > cpus + 0.35:
        return Verdict.NOT_CONTAINED, f"quota {cpus:g} core(s) ({how}), but {measured}"
    if how == "none":
        return (
            Verdict.NOT_ENFORCED,
            f"no writable cpu cgroup controller here ({measured}); RLIMIT_CPU {soft} s holds",
        )
    return Verdict.CONTAINED, f"quota {cpus:g} core(s) ({how}; {measured}); RLIMIT_CPU {soft} s"


_FIND_SCRIPT = r"""
import json, os, sys
found = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if b"sleep\0" + sys.argv[1].encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
print(json.dumps([p for p in found if p != os.getpid()]))
"""


async def _probe_timeout(ctx: _Context) -> Outcome:
    marker = f"{30 + secrets.randbelow(10_000) / 10_000:.4f}"
    limit = 0.5
    async with _sandbox(ctx) as sandbox:
        t0 = time.monotonic()
        result = await sandbox.exec(f"sleep {marker} & sleep {marker}", timeout=limit)
        took = time.monotonic() - t0
        left = _json_line(await _py(sandbox, _FIND_SCRIPT, marker))
    if not result.timed_out or took > limit + 5:
        return Verdict.NOT_CONTAINED, f"a {limit}s timeout returned after {took:.1f}s"
    if left:
        return Verdict.NOT_CONTAINED, f"{len(left)} process(es) outlived the timeout"
    return Verdict.CONTAINED, f"killed at {limit}s (returned after {took:.2f}s), none left"


_FLOOD_SCRIPT = r"""
import os, sys
n, chunk = int(sys.argv[1]), b"x" * 65536
for _ in range(n // 65536):
    os.write(1, chunk)
"""


async def _probe_output(ctx: _Context) -> Outcome:
    cap = ctx.spec.output_limit_bytes
    flood = max(8 * MiB, 32 * cap)
    async with _sandbox(ctx) as sandbox:
        result = await _py(sandbox, _FLOOD_SCRIPT, str(flood), timeout=20)
    kept = len(result.stdout.encode("utf-8", "replace"))
    if kept > cap + 256 or not result.truncated:
        return Verdict.NOT_CONTAINED, f"kept {kept} of {flood} bytes (cap {cap})"
    return (
        Verdict.CONTAINED,
        f"kept {kept} of {flood} bytes (cap {cap // 1024} KiB), marked truncated",
    )


# ---- grading ----------------------------------------------------------------------------------

_USERSITE_SCRIPT = r"""
import json, os, sys
print(json.dumps("%s/.local/lib/python%d.%d/site-packages" % (os.environ["HOME"], *sys.version_info[:2])))
"""
_HOOKED_CHECK = "try:\n    import skyrl_audit_shadow\nexcept ImportError:\n    pass\n"


async def _probe_startup_hooks(ctx: _Context) -> Outcome:
    from skyrl_sdk.sandboxes.grading import grading_env

    async with _sandbox(ctx) as sandbox:
        # The agent's HOME is its workspace: it plants start-up hooks there.
        site = _json_line(await sandbox.exec(["python3", "-S", "-c", _USERSITE_SCRIPT]))
        await sandbox.write_file(
            f"{site}/usercustomize.py", f"print({_MARK + 'usercustomize'!r})\n"
        )
        await sandbox.write_file(
            f"{site}/skyrl-audit.pth", f"import sys; print({_MARK + 'pth'!r})\n"
        )
        await sandbox.write_file("skyrl_audit_shadow.py", f"print({_MARK + 'cwd-module'!r})\n")
        check = ["python3", "-c", _HOOKED_CHECK]
        control = await sandbox.exec(check, cwd=sandbox.workdir)
        graded = await sandbox.exec(check, cwd=sandbox.workdir, env=grading_env())

    def hooks(result: ExecResult) -> list[str]:
        return sorted(
            {line.split(":", 1)[1] for line in result.output.splitlines() if line.startswith(_MARK)}
        )

    fired, planted = hooks(graded), hooks(control)
    if fired:
        return Verdict.NOT_CONTAINED, f"ran in a grading_env() command: {', '.join(fired)}"
    control_note = (
        f"without it: {', '.join(planted)} ran" if planted else "none ran even without it"
    )
    return Verdict.CONTAINED, f"grading_env(): no hook ran ({control_note})"


# ---- grading: agent programs the verifier runs ------------------------------------------------

# The agent's program (x.py in the workspace, owned by the agent's uid where the host can
# chown it). The verifier's command makes its result dir, then runs it (not as its last
# command, so the shell stays its parent): it attacks the verifier.
_GRADING_ATTACK = r"""
import ctypes, json, os
out = {}
try:
    with open("/tmp/skyrl-audit-verifier/reward.txt", "w") as f:
        f.write("1")
    out["write"] = "WROTE"
except OSError as e:
    out["write"] = e.strerror
verifier = os.getppid()
out["verifier"] = verifier
try:
    os.kill(verifier, 0)
    out["signal"] = "SIGNALLED"
except OSError as e:
    out["signal"] = e.strerror
try:
    os.close(os.open(f"/proc/{verifier}/mem", os.O_RDWR))
    out["mem"] = "OPENED"
except OSError as e:
    out["mem"] = e.strerror
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, verifier, None, None) == 0:  # PTRACE_ATTACH
    out["trace"] = "ATTACHED"
    libc.ptrace(17, verifier, None, None)  # PTRACE_DETACH
else:
    out["trace"] = os.strerror(ctypes.get_errno())
try:
    with open(f"/proc/{verifier}/cmdline", "rb") as f:
        out["cmdline"] = "READ" if f.read() else "empty"
except OSError as e:
    out["cmdline"] = e.strerror
try:
    os.close(os.open("/proc/self/comm", os.O_WRONLY))
    out["proc"] = "OPENED"
except OSError as e:
    out["proc"] = e.strerror
print(json.dumps(out))
"""
_GRADING_VERIFIER = (
    "mkdir -p -m 0755 /tmp/skyrl-audit-verifier && python3 -S {program}; "
    "echo 0 > /tmp/skyrl-audit-verifier/verdict"
)


@dataclass(frozen=True)
class _GradingRun:
    """What the agent's program could do to the verifier in one grading sandbox."""

    seen: dict[str, Any]
    """The attack's results by key (`write`, `signal`, `mem`, `trace`, `cmdline`, `proc`)."""
    isolation: str
    """The sandbox's `GradingIsolation` value."""
    bwrap: bool
    """The backend is bwrap (which gives read-only /proc, and two uids as root)."""


async def _grading_attack(ctx: _Context) -> _GradingRun:
    """Run the attack as the agent's program in a grading sandbox."""
    async with _sandbox(ctx, grading=True, files={"x.py": _GRADING_ATTACK}) as sandbox:
        host = sandbox.host_workspace
        if host is not None and os.geteuid() == 0:
            for path in (host / "x.py", host):  # the agent phase's files are the agent's
                os.chown(path, 65534, 65534)
        command = _GRADING_VERIFIER.format(program=f"{sandbox.workdir}/x.py")
        seen = _json_line(await sandbox.exec(["/bin/sh", "-c", command]))
        return _GradingRun(seen, sandbox.grading_isolation.value, ctx.backend == "bwrap")


def _grading_outcome(run: _GradingRun, key: str, broke: str, *, needs_root: bool) -> Outcome:
    """CONTAINED if the attack failed; else NOT_CONTAINED where the backend could have
    stopped it (bwrap: /proc always, two uids as root; any backend claiming two uids),
    NOT_ENFORCED where it cannot."""
    got = run.seen.get(key)
    if got != broke:
        return Verdict.CONTAINED, f"{key}: {got} ({run.isolation})"
    could = run.isolation == "two_uid" or (run.bwrap and (os.geteuid() == 0 or not needs_root))
    if could:
        return Verdict.NOT_CONTAINED, f"the agent's program: {key} {broke} ({run.isolation})"
    why = "not root" if run.bwrap else "this backend grades with one uid and a writable /proc"
    return Verdict.NOT_ENFORCED, f"{key} {broke}: {why}"


async def _probe_grading_result_dir(ctx: _Context) -> Outcome:
    return _grading_outcome(await _grading_attack(ctx), "write", "WROTE", needs_root=True)


async def _probe_grading_signal(ctx: _Context) -> Outcome:
    return _grading_outcome(await _grading_attack(ctx), "signal", "SIGNALLED", needs_root=True)


async def _probe_grading_memory(ctx: _Context) -> Outcome:
    run = await _grading_attack(ctx)
    mem = _grading_outcome(run, "mem", "OPENED", needs_root=False)
    trace = _grading_outcome(run, "trace", "ATTACHED", needs_root=False)
    detail = f"/proc/PID/mem: {run.seen.get('mem')}; ptrace: {run.seen.get('trace')}"
    return _worst([mem[0], trace[0]]), f"{detail} ({run.isolation})"


async def _probe_grading_cmdline(ctx: _Context) -> Outcome:
    return _grading_outcome(await _grading_attack(ctx), "cmdline", "READ", needs_root=True)


async def _probe_grading_proc(ctx: _Context) -> Outcome:
    return _grading_outcome(await _grading_attack(ctx), "proc", "OPENED", needs_root=False)


async def _probe_cmdline(ctx: _Context) -> Outcome:
    try:
        host = Path("/proc/cmdline").read_bytes().strip()
    except OSError:
        host = b""
    async with _sandbox(ctx) as sandbox:
        inside = (await sandbox.exec(["cat", "/proc/cmdline"])).stdout.encode().strip()
    if not host:
        return Verdict.CONTAINED, "the host's kernel command line is empty"
    if inside != host:
        return (
            Verdict.CONTAINED,
            f"/proc/cmdline shows {len(inside)} bytes (the host's: {len(host)})",
        )
    if ctx.backend != "bwrap":
        return Verdict.NOT_ENFORCED, f"the {ctx.backend} backend shows the host's /proc/cmdline"
    return Verdict.NOT_CONTAINED, "the host's kernel command line is readable in /proc/cmdline"


# ---- reaping ----------------------------------------------------------------------------------

_OWNER_SCRIPT = r"""
import asyncio, json, sys
from skyrl_sdk.sandboxes import SandboxSpec, Workspace, create_sandbox
backend, kwargs = sys.argv[1], json.loads(sys.argv[2])
ws = Workspace.create(prefix="skyrl-audit-ws-")
async def main():
    sb = await create_sandbox(SandboxSpec(**kwargs), backend)
    ids = [ws.record.id, sb.id]
    paths = [str(ws.path), str(sb.host_workspace) if sb.host_workspace else None]
    print(json.dumps({"ids": ids, "paths": paths}), flush=True)
    await asyncio.sleep(120)
asyncio.run(main())
"""


async def _probe_reaping(ctx: _Context) -> Outcome:
    from skyrl_sdk.sandboxes.tracking import reap, records

    kwargs = {"image": ctx.spec.image} if ctx.spec.image else {}
    owner = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _OWNER_SCRIPT,
        ctx.backend,
        json.dumps(kwargs),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert owner.stdout is not None
        line = await asyncio.wait_for(owner.stdout.readline(), 25)
    finally:
        with contextlib.suppress(ProcessLookupError):
            owner.send_signal(signal.SIGKILL)
        _, err = await owner.communicate()
    if not line:
        raise RuntimeError(f"the owner process failed: {err.decode(errors='replace')[-300:]}")
    made = json.loads(line)
    report = await asyncio.to_thread(reap)
    left_ids = {r.id for r in records()} & set(made["ids"])
    left_paths = [p for p in made["paths"] if p and (os.path.lexists(p) or os.path.ismount(p))]
    if left_ids or left_paths:
        what = ", ".join([*sorted(left_ids), *left_paths])
        errors = "; ".join(report.errors)[:200]
        return Verdict.NOT_CONTAINED, f"left after the owner's SIGKILL: {what} {errors}".strip()
    return Verdict.CONTAINED, "a SIGKILLed owner's Workspace and sandbox were reaped"


# ---- Harbor's copy-on-write task root and build sandbox (issue 25) ----------------------------

# Capability numbers of `_bwrap_argv.BUILD_CAPS` (linux/capability.h).
_CAP_NUMBERS = {
    "CAP_CHOWN": 0,
    "CAP_DAC_OVERRIDE": 1,
    "CAP_FOWNER": 3,
    "CAP_KILL": 5,
    "CAP_SETGID": 6,
    "CAP_SETUID": 7,
}
_ROOT_DISK_BYTES = 64 * MiB
"""The disk cap of the audit's copy-on-write roots (their upper layer's sized tmpfs)."""


class _NoCowRoot(Exception):
    """This backend or machine has no copy-on-write root (the probe is not enforced here)."""


@contextlib.asynccontextmanager
async def _cow_sandbox(
    ctx: _Context, *, build: bool = False, victim: Callable[[Path], None] | None = None
) -> AsyncIterator[tuple[Sandbox, Any]]:
    """A sandbox of the backend on a fresh copy-on-write root over the host's minimal system,
    as a Harbor trial has (`build`: as its build sandbox, uid 0 with `BUILD_CAPS`), every
    layer in a `_ROOT_DISK_BYTES` workspace. `victim(etc_lower)` may plant a file in the
    lowest `/etc` layer first. Yields the sandbox and its `CowRoot`."""
    from skyrl_sdk.sandboxes import cow_root
    from skyrl_sdk.sandboxes._bwrap_argv import _ETC_FILES
    from skyrl_sdk.sandboxes._process import SANDBOX_UID
    from skyrl_sdk.sandboxes.bwrap import BwrapSandbox
    from skyrl_sdk.sandboxes.workspace import Workspace

    why = cow_root.supported()
    if why is not None:
        raise _NoCowRoot(why)
    with Workspace.create("skyrl-audit-root-", disk_bytes=_ROOT_DISK_BYTES) as scratch:
        base = cow_root.host_base(scratch.path / "base", _ETC_FILES)
        if victim is not None:
            victim(base.etc)
        cow = cow_root.layout(
            upper=scratch.path / "up",
            work=scratch.path / "work",
            mountpoint=scratch.path / "merged",
            layer=None,
            host=base,
        )
        workspace = cow.upper_of(ctx.spec.workdir)
        workspace.mkdir(parents=True)
        os.chown(workspace, SANDBOX_UID, SANDBOX_UID)
        spec = dataclasses.replace(ctx.spec, workspace_dir=str(workspace))
        sandbox = ctx.make(spec)
        if not isinstance(sandbox, BwrapSandbox):
            raise _NoCowRoot(f"the {ctx.backend} backend has no copy-on-write root (bwrap only)")
        sandbox.cow_root = cow
        sandbox.build_as_root = build
        try:
            await sandbox.start()
            yield sandbox, cow
        finally:
            await sandbox.close()


def _root_probe(
    run: Callable[[_Context], Awaitable[Outcome]],
) -> Callable[[_Context], Awaitable[Outcome]]:
    """`run`, with a machine or backend without copy-on-write roots `not enforced here`."""

    async def probe(ctx: _Context) -> Outcome:
        try:
            return await run(ctx)
        except _NoCowRoot as e:
            return Verdict.NOT_ENFORCED, str(e)

    return probe


@_root_probe
async def _probe_task_root_host(ctx: _Context) -> Outcome:
    async def opener() -> AsyncIterator[Sandbox]:
        async with _cow_sandbox(ctx) as (sandbox, _):
            yield sandbox

    return await _host_files_outcome(contextlib.asynccontextmanager(opener))


@_root_probe
async def _probe_build_host(ctx: _Context) -> Outcome:
    async def opener() -> AsyncIterator[Sandbox]:
        async with _cow_sandbox(ctx, build=True) as (sandbox, _):
            yield sandbox

    return await _host_files_outcome(contextlib.asynccontextmanager(opener))


_WRITE_SCRIPT = r"""
import json, os, sys
cfg = json.loads(sys.argv[1])
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as e:
        out[name] = e.strerror or type(e).__name__
def overwrite(path):
    with open(path, "w") as f:
        f.write("changed by the sandbox")
attempt("overwrite " + cfg["victim"], lambda: overwrite(cfg["victim"]))
attempt("chmod " + cfg["victim"], lambda: os.chmod(cfg["victim"], 0o4777))
attempt("overwrite " + cfg["etc_victim"], lambda: overwrite(cfg["etc_victim"]))
for path in cfg["new"]:
    attempt("create " + path, lambda: overwrite(path))
attempt("unlink " + cfg["victim"], lambda: os.unlink(cfg["victim"]))
print(json.dumps(out))
"""


def _fingerprint(path: Path) -> tuple[int, int, bytes] | None:
    """A host file's mode, owner and content (None: it does not exist); never follows a link."""
    try:
        info = os.lstat(path)
        with open(path, "rb") as f:
            return info.st_mode, info.st_uid, f.read(4096)
    except OSError:
        return None


async def _writes_outcome(ctx: _Context, *, build: bool) -> Outcome:
    """Writes into the root's system directories, its /etc and its own /, /tmp: afterwards
    the host's files (a victim planted in /usr/lib and in the lowest /etc layer) are as they
    were and no new file reached the host; the writes that worked are in the upper layer."""
    token = secrets.token_hex(6)
    victim = Path(f"/usr/lib/skyrl-audit-victim-{token}")
    etc_name = f"skyrl-audit-victim-{token}"
    new = [f"/usr/bin/skyrl-audit-{token}", f"/tmp/skyrl-audit-{token}", f"/skyrl-audit-{token}"]
    victim.write_text("host file")
    victim.chmod(0o644)
    etc_victim: list[Path] = []

    def plant(etc: Path) -> None:
        (etc / etc_name).write_text("host file")
        etc_victim.append(etc / etc_name)

    try:
        before = _fingerprint(victim)
        cfg = {"victim": str(victim), "etc_victim": f"/etc/{etc_name}", "new": new}
        async with _cow_sandbox(ctx, build=build, victim=plant) as (sandbox, cow):
            etc_before = _fingerprint(etc_victim[0])
            done = _json_line(await _py(sandbox, _WRITE_SCRIPT, json.dumps(cfg)))
            changed = [str(victim)] if _fingerprint(victim) != before else []
            changed += [p for p in new if os.path.lexists(p)]
            if etc_victim and _fingerprint(etc_victim[0]) != etc_before:
                changed.append(f"the lower /etc layer's {etc_name}")
            layered = [p for p in new if os.path.lexists(cow.upper_of(p))]
    finally:
        for path in [victim, *(Path(p) for p in new)]:
            with contextlib.suppress(OSError):
                if not path.is_dir():
                    path.unlink()
    if changed:
        return Verdict.NOT_CONTAINED, "host changed: " + ", ".join(changed)
    worked = sorted(k for k, v in done.items() if v == "ok")
    refused = sorted(f"{k} ({v})" for k, v in done.items() if v != "ok")
    detail = f"host unchanged; in the layer: {', '.join(layered) or 'nothing'}"
    if refused:
        detail += f"; refused: {', '.join(refused)}"
    if build and (len(worked) < len(done) or len(layered) < len(new)):
        # uid 0 of a build writes the root's system files (into its layer): if it cannot,
        # Dockerfile RUN steps cannot install anything. Not an escape, but the probe is void.
        return Verdict.ERROR, "the build's uid 0 could not write its root: " + detail
    if not build and any(v == "ok" for k, v in done.items() if str(victim) in k):
        return Verdict.NOT_CONTAINED, "the agent could change a system file: " + detail
    return Verdict.CONTAINED, detail


@_root_probe
async def _probe_task_root_writes(ctx: _Context) -> Outcome:
    return await _writes_outcome(ctx, build=False)


@_root_probe
async def _probe_build_writes(ctx: _Context) -> Outcome:
    return await _writes_outcome(ctx, build=True)


async def _root_caps_parts(
    sandbox: Sandbox, fill: Sequence[str]
) -> tuple[list[Verdict], list[str]]:
    """The memory and pids caps as the sandbox enforces them, and a fill of each `fill`
    directory past the root's disk cap."""
    verdicts: list[Verdict] = []
    parts: list[str] = []
    limits = _limits(sandbox)
    for cap in ("memory", "pids"):
        how = limits.get(cap, "unreported")
        verdicts.append(Verdict.NOT_ENFORCED if how == "none" else Verdict.CONTAINED)
        parts.append(f"{cap} {how}")
    for directory in fill:
        escaped, what = await _fill(sandbox, directory, _ROOT_DISK_BYTES + _OVERSHOOT)
        verdicts.append(Verdict.NOT_CONTAINED if escaped else Verdict.CONTAINED)
        parts.append(f"{directory}: {what}")
        # One cap for the whole root: the next directory's fill starts from empty again.
        await sandbox.exec(["sh", "-c", f"rm -f {directory.rstrip('/')}/.skyrl-audit-fill-*"])
    return verdicts, parts


@_root_probe
async def _probe_task_root_caps(ctx: _Context) -> Outcome:
    async with _cow_sandbox(ctx) as (sandbox, _):
        verdicts, parts = await _root_caps_parts(sandbox, [sandbox.workdir, "/tmp"])
    return _worst(verdicts), f"disk cap {_ROOT_DISK_BYTES // MiB} MiB; " + "; ".join(parts)


_BUILD_CAPS_SCRIPT = r"""
import ctypes, json, os, socket
status = open("/proc/self/status").read().splitlines()
capeff = int(next(l.split()[1] for l in status if l.startswith("CapEff:")), 16)
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs("/skyrl-audit-mnt", exist_ok=True)
mounted = libc.mount(b"none", b"/skyrl-audit-mnt", b"tmpfs", 0, None) == 0
mount_error = os.strerror(ctypes.get_errno())
try:
    s = socket.create_connection(("1.1.1.1", 53), timeout=2)
    s.close()
    net = "connected"
except OSError as e:
    net = e.strerror or type(e).__name__
names = [n for _, n in socket.if_nameindex()]
print(json.dumps({"uid": os.getuid(), "capeff": capeff, "mounted": mounted,
                  "mount_error": mount_error, "net": net, "ifaces": names}))
"""


@_root_probe
async def _probe_build_caps(ctx: _Context) -> Outcome:
    from skyrl_sdk.sandboxes._bwrap_argv import BUILD_CAPS

    allowed = sum(1 << _CAP_NUMBERS[c] for c in BUILD_CAPS)
    async with _cow_sandbox(ctx, build=True) as (sandbox, _):
        seen = _json_line(await _py(sandbox, _BUILD_CAPS_SCRIPT))
        verdicts, parts = await _root_caps_parts(sandbox, ["/"])
    bad = []
    if seen["capeff"] & ~allowed:
        bad.append(f"capabilities {seen['capeff'] & ~allowed:#x} beyond the build's")
    if seen["mounted"]:
        bad.append("mounted a tmpfs")
    if seen["net"] == "connected" or set(seen["ifaces"]) - {"lo"}:
        bad.append(f"network: {seen['net']}, interfaces {seen['ifaces']}")
    if bad:
        return Verdict.NOT_CONTAINED, "; ".join(bad)
    detail = (
        f"uid {seen['uid']} with {seen['capeff']:#x} (build caps only); mount: "
        f"{seen['mount_error']}; network: {seen['net']}; disk cap {_ROOT_DISK_BYTES // MiB} MiB; "
    )
    return _worst(verdicts), detail + "; ".join(parts)


# ---- the probe table --------------------------------------------------------------------------

PROBES: dict[str, _Probe] = {
    "host-files": _Probe(
        "host files invisible (checkout, venv, cwd, /root, /home, /var, /opt, /srv, /mnt, /work)",
        "2",
        _probe_host_files,
    ),
    "network-off": _Probe(
        "no network by default: host loopback, host address, abstract socket",
        "4",
        _probe_network_off,
        network=True,
    ),
    "network-on": _Probe(
        "network=True has no route to the host", "4", _probe_network_on, network=True
    ),
    "ptrace": _Probe(
        "command server untraceable (ptrace, /proc/PID/mem; own children traceable)",
        "5",
        _probe_ptrace,
    ),
    "nested-userns": _Probe("nested user namespace", "5", _probe_userns),
    "syscalls": _Probe("keyctl, bpf, perf_event_open, mount", "5", _probe_syscalls),
    "memory": _Probe("memory cap (allocate past it)", "6", _probe_memory),
    "pids": _Probe("pids cap (fork bomb)", "6", _probe_pids),
    "disk": _Probe("disk cap (fill the workspace and /tmp)", "6", _probe_disk),
    "cpu": _Probe("CPU quota and CPU-time cap", "6", _probe_cpu),
    "wall-timeout": _Probe("wall-clock timeout kills the command", "6", _probe_timeout),
    "output": _Probe("output cap (flood stdout)", "6", _probe_output),
    "startup-hooks": _Probe(
        "start-up hooks skipped under grading_env()", "1", _probe_startup_hooks
    ),
    "reaping": _Probe("leftovers of a SIGKILLed owner are reaped", "7", _probe_reaping),
    "grading-result-dir": _Probe(
        "grading: an agent program the verifier runs cannot write its result dir",
        "23.1",
        _probe_grading_result_dir,
    ),
    "grading-signal": _Probe(
        "grading: an agent program cannot signal the verifier", "23.1", _probe_grading_signal
    ),
    "grading-memory": _Probe(
        "grading: an agent program cannot trace the verifier or write its memory",
        "23.1",
        _probe_grading_memory,
    ),
    "grading-cmdline": _Probe(
        "grading: an agent program cannot read the verifier's command line (hidepid)",
        "23.1",
        _probe_grading_cmdline,
    ),
    "grading-proc": _Probe("grading: /proc is read-only", "23.1", _probe_grading_proc),
    "proc-cmdline": _Probe("the host's kernel command line is hidden", "23.8", _probe_cmdline),
    "task-root-host": _Probe(
        "Harbor task root (copy-on-write): host files invisible", "25", _probe_task_root_host
    ),
    "task-root-writes": _Probe(
        "Harbor task root: writes anywhere leave the host unchanged; system dirs not the agent's",
        "25",
        _probe_task_root_writes,
    ),
    "task-root-caps": _Probe(
        "Harbor task root: memory, pids and disk caps (fill the workspace and /tmp)",
        "25",
        _probe_task_root_caps,
    ),
    "build-host": _Probe(
        "Harbor build sandbox (Dockerfile RUN): host files invisible", "25", _probe_build_host
    ),
    "build-writes": _Probe(
        "Harbor build sandbox: uid 0's writes to /usr and /etc land in its layer, host unchanged",
        "25",
        _probe_build_writes,
    ),
    "build-caps": _Probe(
        "Harbor build sandbox: only the build capabilities, no mount, no network, caps on",
        "25",
        _probe_build_caps,
    ),
}
"""Every probe, by id, in the order the report lists them."""


async def run_audit(
    backend: str | type[Sandbox] = "bwrap",
    *,
    image: str | None = None,
    probes: Sequence[str] | None = None,
    concurrency: int = 3,
) -> AuditReport:
    """Run the escape probes against a backend and return every result.

    Args:
        backend: A backend name (`bwrap`, `local`, `docker`), or a `Sandbox` subclass (used as
            is; this is how a test audits a deliberately weakened backend).
        image: The image for the docker backend (it needs `python3` inside).
        probes: Ids of the probes to run (default: all of `PROBES`).
        concurrency: Probes run at once.
    """
    wanted = set(PROBES) if probes is None else set(probes)
    unknown = sorted(wanted - set(PROBES))
    if unknown:
        raise ValueError(f"unknown probes {unknown}; choose from {', '.join(PROBES)}")
    names = [n for n in PROBES if n in wanted]
    if isinstance(backend, str):
        cls = sandbox_class(backend)
        label = backend
    elif isinstance(backend, type) and issubclass(backend, Sandbox):
        cls = backend
        label = f"{backend.backend} ({backend.__name__})"
    else:
        raise TypeError(f"backend must be a name or a Sandbox subclass, got {backend!r}")
    spec = SandboxSpec(image=image)
    targets = _HostTargets() if any(PROBES[n].network for n in names) else None
    ctx = _Context(cls, getattr(cls, "backend", label), spec, targets)
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(name: str) -> ProbeResult:
        probe = PROBES[name]
        async with gate:
            t0 = time.monotonic()
            try:
                verdict, detail = await asyncio.wait_for(probe.run(ctx), _PROBE_TIMEOUT_S)
            except Exception as e:  # a probe that cannot run is reported, never raised
                verdict, detail = Verdict.ERROR, f"{type(e).__name__}: {e}"[:300]
            took = time.monotonic() - t0
        return ProbeResult(name, probe.title, probe.vector, verdict, detail, took)

    t0 = time.monotonic()
    try:
        results = await asyncio.gather(*(one(n) for n in names))
    finally:
        if targets is not None:
            targets.close()
    return AuditReport(label, tuple(results), time.monotonic() - t0)


def audit(
    backend: str | type[Sandbox] = "bwrap",
    *,
    image: str | None = None,
    probes: Sequence[str] | None = None,
) -> AuditReport:
    """`run_audit` from synchronous code."""
    return asyncio.run(run_audit(backend, image=image, probes=probes))


def print_report(report: AuditReport, *, json_line: bool = False) -> None:
    """The table (rich), a summary line, and with `json_line` one JSON object last."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"skyrl sandbox audit: {report.backend}", show_lines=False)
    table.add_column("probe")
    table.add_column("vector", justify="center")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for r in report.results:
        style = _STYLES[r.verdict]
        table.add_row(r.probe, r.vector, f"[{style}]{r.verdict.label}[/{style}]", r.detail)
    console.print(table)
    counts = report.to_json()["counts"]
    summary = ", ".join(f"{counts[v.value]} {v.label}" for v in Verdict if counts[v.value])
    console.print(f"{summary} in {report.duration_s:.1f}s (exit {report.exit_code})")
    if json_line:
        print(json.dumps(report.to_json()))
