"""Builds and locates the native command server (`_server.c`).

A sandbox's start is mostly its command server's start: the Python server spends 10-20 ms in
the interpreter's own start-up, the native one well under a millisecond. The C source ships
with the package and is compiled here with the system C compiler, once per source hash (built
in a staging folder and renamed into place, so concurrent processes never see half a binary),
statically linked when the C library allows it, so that the binary also runs inside image
roots (`SandboxSpec.rootfs`) that lack the host's libc.

Where: bwrap as root runs as uid 65534, which must reach the binary by path to bind it, and
cannot reach the usual build cache under `/root` (0700); nor may the binary sit in the sandbox
state root (the reaper leaves that empty). So it lives in `/tmp/skyrl-server-<euid>/`, which is
used only if it is a real directory owned by this user and writable by no one else (/tmp's
sticky bit then keeps others from swapping it).

`SKYRL_SANDBOX_SERVER` chooses the server: `auto` (default: native when it can be built, else
the Python server with one logged warning), `native` (required: starting fails if it cannot be
built), or `python`.

A fresh Debian machine needs the packages `gcc` and `libc6-dev` (libc6-dev carries `libc.a`
for the static link).
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import logging
import os
import platform
import shutil
import stat
import struct
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from skyrl_sdk.sandboxes.spec import BackendUnavailable

SERVER_ENV = "SKYRL_SANDBOX_SERVER"
"""Environment variable choosing the command server (see `ServerChoice`)."""
SOURCE = Path(__file__).with_name("_server.c")
INSIDE_PATH = "/run/skyrl-server"
"""Where bwrap binds the binary inside a sandbox (`/run` is a fresh tmpfs)."""
_FLAGS = ("-O2", "-std=gnu11", "-Wall")
_COMPILE_TIMEOUT_S = 120.0
_log = logging.getLogger(__name__)


class ServerChoice(enum.Enum):
    """Which in-sandbox command server to start (`$SKYRL_SANDBOX_SERVER`)."""

    AUTO = "auto"
    """Native when it can be built here, else Python (with one logged warning)."""
    NATIVE = "native"
    """Native or nothing: a sandbox fails to start if the server cannot be built."""
    PYTHON = "python"
    """The Python server (`_server.py`), run by the sandbox's `python3`."""


@dataclass(frozen=True)
class NativeServer:
    """A built native command server."""

    path: Path
    """The binary in the build cache (readable by the calling user)."""
    static: bool
    """Statically linked: it runs inside any Linux root of the same architecture."""


def server_choice() -> ServerChoice:
    """The choice from `$SKYRL_SANDBOX_SERVER` (unset or empty: `auto`)."""
    raw = os.environ.get(SERVER_ENV, "").strip().lower() or ServerChoice.AUTO.value
    try:
        return ServerChoice(raw)
    except ValueError:
        raise BackendUnavailable(
            f"${SERVER_ENV}={raw!r}: expected one of " + ", ".join(c.value for c in ServerChoice)
        ) from None


def binary_dir() -> Path:
    """`/tmp/skyrl-server-<euid>`, created 0755; refused unless it is a directory (not a
    symlink) owned by this user that no one else can write to."""
    path = Path("/tmp") / f"skyrl-server-{os.geteuid()}"
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o755)
        path.chmod(0o755)  # whatever the umask: the sandbox user must traverse it
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise RuntimeError(f"{path} is not a directory of this user, writable only by it")
    return path


def build_once(target: Path, build: Callable[[Path], object]) -> Path:
    """`target`, first built by `build(staging_path)` and renamed into place in one step if it
    does not exist (two racing processes: the loser's identical copy is dropped)."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        build(staging / target.name)
        os.replace(staging / target.name, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def compiler() -> str | None:
    """The system C compiler (`$CC`, else cc, gcc or clang), or None."""
    for name in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        found = shutil.which(name) if name else None
        if found:
            return found
    return None


def _source_hash() -> str:
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(repr((_FLAGS, platform.machine())).encode())
    return digest.hexdigest()[:16]


def _is_static(path: Path) -> bool:
    """True if an ELF file has no program interpreter (PT_INTERP), i.e. it is static."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only (x86_64, aarch64)
            return False
        order = "<" if head[5] == 1 else ">"
        phoff, phentsize, phnum = (
            struct.unpack_from(order + "Q", head, 32)[0],
            struct.unpack_from(order + "H", head, 54)[0],
            struct.unpack_from(order + "H", head, 56)[0],
        )
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    return all(
        struct.unpack_from(order + "I", table, i * phentsize)[0] != 3  # PT_INTERP
        for i in range(phnum)
    )


def _compile(cc: str, out: Path) -> None:
    """Static if the C library allows it (libc6-dev's libc.a), else dynamic."""
    errors = []
    for extra in (("-static",), ()):
        cmd = [cc, *_FLAGS, *extra, "-o", str(out), str(SOURCE)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_COMPILE_TIMEOUT_S)
        if done.returncode == 0:
            out.chmod(0o755)
            return
        errors.append(f"$ {' '.join(cmd)}\n{done.stderr.strip()[-2000:]}")
    raise RuntimeError("cannot compile the native command server:\n" + "\n".join(errors))


def _smoke_test(path: Path) -> None:
    """Run the binary once (EOF at once: it says hello and exits), so that a /tmp mounted
    noexec, or a binary this kernel cannot run, means the Python server, not failed starts."""
    done = subprocess.run([str(path)], input=b"", capture_output=True, timeout=30)
    if done.returncode != 0 or b"ready" not in done.stdout[:64]:
        raise RuntimeError(
            f"{path} does not run here (exit {done.returncode}): {done.stderr[-500:]!r}"
        )


_lock = threading.Lock()
_built: NativeServer | None = None
_failure: str | None = None


def build() -> NativeServer:
    """The native server, compiled on first use (once per source hash, shared by processes).

    Raises `BackendUnavailable` if there is no C compiler or the build fails (the reason is
    kept: later calls in this process fail at once).
    """
    global _built, _failure
    with _lock:
        if _built is not None:
            return _built
        if _failure is not None:
            raise BackendUnavailable(_failure)
        cc = compiler()
        try:
            if cc is None:
                raise RuntimeError("no C compiler (install the Debian packages gcc and libc6-dev)")
            target = binary_dir() / f"skyrl-server-{_source_hash()}"
            path = build_once(target, lambda out: _compile(cc, out))
            _smoke_test(path)
            _built = NativeServer(path, _is_static(path))
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            _failure = f"the native command server is unavailable: {e}"
            raise BackendUnavailable(_failure) from None
        return _built


def settled() -> bool:
    """True when `choose` answers without compiling (so it may run on the event loop)."""
    return _built is not None or _failure is not None or server_choice() is ServerChoice.PYTHON


def unavailable_reason() -> str | None:
    """Why this process could not build the native server (None: built, or never tried).

    `skyrl sandbox exec --json` reports it as `server_note` when the Python server ran.
    """
    with _lock:
        return _failure


_warned = False


def choose(*, need_static: bool) -> NativeServer | None:
    """The native server to start, or None for the Python one (see `ServerChoice`).

    `need_static`: the server must run inside an image root, where only a static binary is
    sure to. Under `auto`, falling back to Python logs one warning per process.
    """
    global _warned
    choice = server_choice()
    if choice is ServerChoice.PYTHON:
        return None
    try:
        server = build()
        if need_static and not server.static:
            raise BackendUnavailable(
                "the native command server could only be linked dynamically (no libc.a: "
                "install libc6-dev), so it cannot run inside an image root"
            )
        return server
    except BackendUnavailable as e:
        if choice is ServerChoice.NATIVE:
            raise
        if not _warned:
            _warned = True
            _log.warning("%s; sandboxes use the slower Python command server", e)
        return None


# ---- the grading helper and exec shim (`_grading.c`) ------------------------------------------

GRADING_SOURCE = Path(__file__).with_name("_grading.c")
GRADING_HELPER_INSIDE = "/run/skyrl-grading"
"""Where a two-uid grading sandbox binds the helper (its `exec` and `skyrl-as-agent` modes)."""
GRADING_SHIM_INSIDE = "/run/skyrl-grading-shim.so"
"""Where it binds the exec shim (put in LD_PRELOAD of every grading command)."""


@dataclass(frozen=True)
class GradingTools:
    """The built pieces of a two-uid grading sandbox (see `_grading.c`)."""

    helper: Path
    """The helper executable: `launch` on the host, `exec` and `skyrl-as-agent` inside."""
    shim: Path
    """The exec shim, a shared library for LD_PRELOAD."""
    static: bool
    """The helper is statically linked (it runs inside any image root)."""


def _grading_hash() -> str:
    digest = hashlib.sha256(GRADING_SOURCE.read_bytes())
    digest.update(repr((_FLAGS, platform.machine(), "grading")).encode())
    return digest.hexdigest()[:16]


def _compile_helper(cc: str, out: Path) -> None:
    errors = []
    for extra in (("-static",), ()):
        cmd = [cc, *_FLAGS, *extra, "-o", str(out), str(GRADING_SOURCE)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_COMPILE_TIMEOUT_S)
        if done.returncode == 0:
            out.chmod(0o755)
            return
        errors.append(f"$ {' '.join(cmd)}\n{done.stderr.strip()[-2000:]}")
    raise RuntimeError("cannot compile the grading helper:\n" + "\n".join(errors))


def _compile_shim(cc: str, out: Path) -> None:
    cmd = [cc, *_FLAGS, "-shared", "-fPIC", "-DSKYRL_SHIM", "-o", str(out), str(GRADING_SOURCE)]
    done = subprocess.run(
        [*cmd, "-ldl"], capture_output=True, text=True, timeout=_COMPILE_TIMEOUT_S
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"cannot compile the exec shim:\n$ {' '.join(cmd)}\n{done.stderr[-2000:]}"
        )
    out.chmod(0o755)


_grading_lock = threading.Lock()
_grading_built: GradingTools | None = None
_grading_failure: str | None = None


def build_grading() -> GradingTools:
    """The grading helper and exec shim, compiled on first use (once per source hash, in
    `binary_dir()`, like the command server). Raises `BackendUnavailable` with the reason
    (no C compiler, a failed build, a helper that does not run here); later calls in this
    process fail at once."""
    global _grading_built, _grading_failure
    with _grading_lock:
        if _grading_built is not None:
            return _grading_built
        if _grading_failure is not None:
            raise BackendUnavailable(_grading_failure)
        cc = compiler()
        try:
            if cc is None:
                raise RuntimeError("no C compiler (install the Debian packages gcc and libc6-dev)")
            tag = _grading_hash()
            helper = build_once(
                binary_dir() / f"skyrl-grading-{tag}", lambda o: _compile_helper(cc, o)
            )
            shim = build_once(
                binary_dir() / f"skyrl-grading-shim-{tag}.so", lambda o: _compile_shim(cc, o)
            )
            done = subprocess.run([str(helper), "--version"], capture_output=True, timeout=30)
            if done.returncode != 0 or b"ready" not in done.stdout:
                raise RuntimeError(f"{helper} does not run here: {done.stderr[-500:]!r}")
            _grading_built = GradingTools(helper, shim, _is_static(helper))
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            _grading_failure = f"the grading helper is unavailable: {e}"
            raise BackendUnavailable(_grading_failure) from None
        return _grading_built


def grading_settled() -> bool:
    """True when `build_grading` answers without compiling."""
    return _grading_built is not None or _grading_failure is not None
