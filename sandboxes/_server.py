# ruff: noqa: UP031, SIM105 - runs on any Python >= 3.6 and must not import contextlib
"""The command server that runs *inside* a sandbox (bwrap and local backends).

This is the reference implementation and the fallback: where a C compiler is available the
sandbox runs `_server.c` instead, which speaks the same protocol and starts 10-20 ms faster
(see `_native.py`). Keep the two in step (tests/sandboxes/test_native_server.py compares
them); the native server runs this file with `--archive` for tar and untar.

The host starts it once per sandbox (`python3 -I -S -c <this file>`) and then sends it
requests over its stdin/stdout, so an `exec` costs one fork+exec inside the sandbox instead of
a whole sandbox start. It must run on any Python >= 3.6 that an image may carry, so it uses
only modules built into the interpreter (no `json`, `subprocess`, `signal`: they cost 5-10 ms
of imports, which would double the sandbox start time).

Wire format, both ways: a 4-byte big-endian length, then a `marshal` (version 2) dict.

Hardening: first thing, it makes itself non-dumpable (prctl through the `_ctypes` extension,
well under a millisecond), so the commands it runs, which share its uid, cannot ptrace it or
open its memory or pipes under /proc; under bwrap a seccomp filter is the second wall. The
hello says whether that worked (`nondumpable`).

Lifetime: when the host side goes away (even by SIGKILL) this process reads EOF on stdin and
exits. Under bwrap it runs as PID 1 of the sandbox's PID namespace, so its exit makes the
kernel kill every process left in the sandbox. As PID 1 it also reaps orphaned children.
"""

import marshal
import os
import select
import sys
import time

_SIGKILL = 9
_READ = 1 << 16
_IS_INIT = os.getpid() == 1
_exited = {}  # pid -> wait status, for children reaped by the PID-1 sweep
_current = [0]  # the running command's pid (0: none)
_orphans = [0]  # orphans reaped while it ran
_scripts = [0]


def _frame(obj):
    data = marshal.dumps(obj, 2)
    return len(data).to_bytes(4, "big") + data


def _send(obj):
    data = memoryview(_frame(obj))
    while data:
        data = data[os.write(1, data) :]


class _Input:
    """Buffered frame reader on fd 0."""

    def __init__(self):
        self.buf = bytearray()
        self.eof = False

    def fill(self):
        chunk = os.read(0, _READ)
        if not chunk:
            self.eof = True
        self.buf += chunk

    def frame(self):
        """The next complete frame, or None if more bytes are needed."""
        if len(self.buf) < 4:
            return None
        size = int.from_bytes(self.buf[:4], "big")
        if len(self.buf) < 4 + size:
            return None
        payload = bytes(self.buf[4 : 4 + size])
        del self.buf[: 4 + size]
        return marshal.loads(payload)


def _reap_orphans():
    """As PID 1, collect exited orphans so zombies never count against the pids limit."""
    if not _IS_INIT:
        return
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _exited[pid] = status
        if _current[0] and pid != _current[0]:
            _orphans[0] += 1


class _Capture:
    """Keeps the first `head` and the last `tail` bytes of a stream, and counts the rest."""

    def __init__(self, limit):
        self.head_cap = limit - limit // 4
        self.tail_cap = limit // 4
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data):
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_cap:
            self.tail += data
            extra = len(self.tail) - self.tail_cap
            if extra > 0:
                del self.tail[:extra]


def _limits(req):
    """(resource name, soft, hard) for the rlimits this command asks for."""
    import resource

    # Core dumps off (soft 0) as in a container, but raisable (`ulimit -c unlimited`): hard
    # unlimited, or the disk cap when that is an rlimit (RLIMIT_FSIZE does not bound a dump).
    core_hard = int(req["fsize"]) if req.get("fsize") else resource.RLIM_INFINITY
    limits = [("RLIMIT_CORE", 0, core_hard)]
    if req.get("cpu_time"):
        limits.append(("RLIMIT_CPU", int(req["cpu_time"]), int(req["cpu_time"]) + 1))
    for key, name in (("fsize", "RLIMIT_FSIZE"), ("as_bytes", "RLIMIT_AS")):
        if req.get(key):
            limits.append((name, int(req[key]), int(req[key])))
    return limits


def _own_soft_limits(req):
    """Lower this server's own *soft* limits to what the next command gets, so that the
    child inherits them from its first instruction; returns what to restore.

    `_apply_limits` sets the exact soft and hard limits on the child, but only after
    posix_spawn returned: by then a shell may already have forked the real command, which
    would keep the old limits (measured: most `sh -c 'python3 ...'` children escaped
    RLIMIT_CPU that way). Soft limits can be raised back afterwards (hard ones could not), and
    CPU time counts per process, so the server sets its own soft RLIMIT_CPU to its own CPU time
    plus the command's allowance: the child, which starts at zero, gets at most a little more
    than the allowance (the server's own CPU seconds) until `_apply_limits` makes it exact.
    """
    import resource

    saved = []
    for name, soft, _hard in _limits(req):
        which = getattr(resource, name)
        current = resource.getrlimit(which)
        if name == "RLIMIT_CPU":
            used = os.times()
            soft = int(used[0] + used[1]) + 1 + soft
        elif name == "RLIMIT_AS" and soft < _vm_size() + (64 << 20):
            continue  # the server itself would fail to map the child's stack
        if current[1] != resource.RLIM_INFINITY:
            soft = min(soft, current[1])
        try:
            resource.setrlimit(which, (soft, current[1]))
        except (OSError, ValueError):
            continue
        saved.append((which, current))
    return saved


def _restore_limits(saved):
    import resource

    for which, limits in saved:
        try:
            resource.setrlimit(which, limits)
        except (OSError, ValueError):
            pass


def _vm_size():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 1 << 62


def _apply_limits(pid, req):
    """Set the exact rlimits of a just-spawned child and make it the OOM killer's first choice.

    posix_spawn cannot set rlimits in the child, and fork() costs ~5 ms on these VMs against
    ~1 ms for posix_spawn, so limits are applied from outside right after the spawn (the
    child already inherited the soft ones, see `_own_soft_limits`; memory and pids caps are
    cgroups and have no window at all).
    """
    try:
        with open("/proc/%d/oom_score_adj" % pid, "w") as f:
            f.write("1000")
    except OSError:
        pass
    import resource

    for name, soft, hard in _limits(req):
        which = getattr(resource, name)
        try:
            _, cur_hard = resource.prlimit(pid, which)
            # Hard limits may only be lowered: there is no CAP_SYS_RESOURCE to raise them.
            if cur_hard != resource.RLIM_INFINITY:
                hard = min(hard, cur_hard)
                soft = min(soft, hard)
            resource.prlimit(pid, which, (soft, hard))
        except (OSError, ValueError):
            pass


def _which(name, env):
    if "/" in name:
        return name
    for d in env.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(":"):
        candidate = os.path.join(d or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _spawn(req, argv, stdin_r, out_w, err_w):
    """Start the command in its own session; returns its pid or an error message."""
    env = req.get("env") or {}
    path = _which(argv[0], env)
    if path is None:
        return "%s: command not found" % argv[0]
    here = os.getcwd()
    try:
        if req.get("cwd"):
            os.chdir(req["cwd"])
        return os.posix_spawn(
            path,
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, stdin_r, 0),
                (os.POSIX_SPAWN_DUP2, out_w, 1),
                (os.POSIX_SPAWN_DUP2, err_w, 2),
            ],
            setsid=True,
        )
    except OSError as e:
        return "cannot run %r: %s" % (argv[0], e)
    finally:
        os.chdir(here)


def _status_code(status):
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return -1


def _try_wait(pid):
    if pid in _exited:
        return _exited.pop(pid)
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return _exited.pop(pid, 0)
    return status if got == pid else None


def _end_all():
    """As the sandbox's PID 1: count the other processes still running (zombies aside), kill
    them all at once (`kill(-1)` spares only PID 1) and reap them. Returns the count, or -1
    when this server is not the namespace's init (then nothing is killed)."""
    if not _IS_INIT:
        return -1
    running = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z":
            running += 1
    try:
        os.kill(-1, _SIGKILL)
    except OSError:
        pass
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.001)
    return running


def _script_file(argv):
    """`argv` with an over-long `sh -c SCRIPT` handed over as a file; returns (argv, the
    file's path or None)."""
    # A single argument above the kernel's 128 KiB MAX_ARG_STRLEN cannot be passed to execve:
    # hand long shell scripts over as a file instead.
    # A two-uid grading sandbox runs `HELPER exec -- sh -c SCRIPT` (bwrap.py `_command`).
    at = 3 if len(argv) == 6 and argv[1:3] == ["exec", "--"] else 0
    if not (len(argv) == at + 3 and argv[at + 1] == "-c" and len(argv[at + 2]) > 100_000):
        return argv, None
    # O_EXCL|O_NOFOLLOW: code in the sandbox may have planted something at that name.
    while True:
        _scripts[0] += 1
        script = "/tmp/.skyrl-script-%d-%d" % (os.getpid(), _scripts[0])
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(script, flags, 0o600)
            break
        except FileExistsError:
            continue
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(argv[at + 2])
    return [*argv[: at + 1], script], script


def _start(req, argv, with_stdin):
    """Spawn the command on fresh pipes: (pid, stdout, stderr, stdin writer or None), or the
    error message when it could not start (then every descriptor is closed)."""
    if with_stdin:
        stdin_r, stdin_w = os.pipe()
    else:
        stdin_r, stdin_w = os.open("/dev/null", os.O_RDONLY), None
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    saved = _own_soft_limits(req)
    try:
        pid = _spawn(req, argv, stdin_r, out_w, err_w)
    finally:
        _restore_limits(saved)
    for fd in (stdin_r, out_w, err_w):
        os.close(fd)
    if isinstance(pid, str):
        for fd in (out_r, err_r, stdin_w):
            if fd is not None:
                os.close(fd)
        return pid
    return pid, out_r, err_r, stdin_w


def _pidfd(pid):
    """A pidfd for `pid` (readable once it exits), or None where the kernel has none."""
    if hasattr(os, "pidfd_open"):
        try:
            return os.pidfd_open(pid)
        except OSError:
            return None
    return None


class _Running:
    """One running command: its pipes, what it printed, and how it ended (`_exec`'s loop)."""

    def __init__(self, req, pid, out_r, err_r, stdin_w, stdin_data, started):
        self.pid = pid
        self.end_all = req.get("end_all")
        limit = int(req.get("limit", 1 << 16))
        self.out_r, self.err_r = out_r, err_r
        self.caps = {out_r: _Capture(limit), err_r: _Capture(limit)}
        self.readers = [out_r, err_r]
        self.writers = []
        self.pending = memoryview(stdin_data or b"")
        self.stdin_w = stdin_w
        if stdin_w is not None:
            os.set_blocking(stdin_w, False)
            if self.pending:
                self.writers.append(stdin_w)
            else:
                os.close(stdin_w)
                self.stdin_w = None
        self.pidfd = _pidfd(pid)
        timeout = float(req.get("timeout") or 3600.0)
        self.deadline = started + timeout
        self.status = None
        self.timed_out = self.cancelled = False
        self.drain_until = None
        self.others = -1

    def run(self, inp):
        """Feed stdin, collect output and watch the host until the command is done."""
        while True:
            if self.status is None:
                self._poll_exit()
            now = time.monotonic()
            if self.status is None and now >= self.deadline and not self.timed_out:
                self.timed_out = True
                _kill_group(self.pid)
            drained = self.drain_until is not None and now >= self.drain_until
            if (not self.readers or drained) and self.status is not None:
                break
            r, w, _ = select.select(self._watch(), self.writers, [], self._wait(now))
            for fd in r:
                if fd == 0:
                    self._from_host(inp)
                elif fd == self.pidfd:
                    pass  # loop around to waitpid
                else:
                    self._read(fd)
            for fd in w:
                self._feed(fd)

    def _poll_exit(self):
        self.status = _try_wait(self.pid)
        if self.status is not None:
            _current[0] = 0
        if self.status is not None and self.end_all:
            # Nothing the command left behind runs on past its exit (e.g. to rewrite a
            # file the host reads next); the count says whether anything was there.
            self.others = _end_all()
        if self.status is not None and self.drain_until is None:
            # Exited: collect what is already in the pipes, but do not wait on background
            # processes that inherited them.
            self.drain_until = time.monotonic() + 0.05

    def _watch(self):
        watch = [0, *self.readers]
        if self.pidfd is not None and self.status is None:
            watch.append(self.pidfd)
        return watch

    def _wait(self, now):
        """How long the next select may block."""
        wait = 0.01 if self.pidfd is None and self.status is None else None
        limit_at = self.drain_until if self.drain_until is not None else self.deadline
        remaining = max(0.0, limit_at - now)
        wait = remaining if wait is None else min(wait, remaining)
        if self.timed_out and self.status is None:
            wait = 0.01
        return wait

    def _from_host(self, inp):
        inp.fill()
        if inp.eof:  # the host is gone: stop everything
            _kill_group(self.pid)
            os._exit(0)
        while True:
            msg = inp.frame()
            if msg is None:
                break
            if msg.get("op") == "cancel" and self.status is None:
                self.cancelled = True
                _kill_group(self.pid)

    def _read(self, fd):
        try:
            chunk = os.read(fd, _READ)
        except OSError:
            chunk = b""
        if chunk:
            self.caps[fd].add(chunk)
        else:
            self.readers.remove(fd)
            os.close(fd)

    def _feed(self, fd):
        try:
            n = os.write(fd, self.pending[:_READ])
            self.pending = self.pending[n:]
        except (BrokenPipeError, OSError):
            self.pending = memoryview(b"")
        if not self.pending:
            self.writers.remove(fd)
            os.close(fd)
            self.stdin_w = None

    def close(self):
        for fd in self.readers:
            os.close(fd)
        if self.stdin_w is not None:
            os.close(self.stdin_w)
        if self.pidfd is not None:
            os.close(self.pidfd)

    def reply(self, started):
        out, err = self.caps[self.out_r], self.caps[self.err_r]
        return {
            "exit_code": _status_code(self.status),
            "timed_out": self.timed_out,
            "cancelled": self.cancelled,
            "out_head": bytes(out.head),
            "out_tail": bytes(out.tail),
            "out_total": out.total,
            "err_head": bytes(err.head),
            "err_tail": bytes(err.tail),
            "err_total": err.total,
            "duration": time.monotonic() - started,
            "others": self.others,
            "orphans": _orphans[0] if _IS_INIT else -1,
        }


def _exec(req, inp):
    started = time.monotonic()
    argv, script = _script_file(list(req["argv"]))
    stdin_data = req.get("stdin")
    spawned = _start(req, argv, stdin_data is not None)
    if isinstance(spawned, str):
        return _failed(spawned, started)
    pid, out_r, err_r, stdin_w = spawned
    _apply_limits(pid, req)
    _current[0], _orphans[0] = pid, 0
    running = _Running(req, pid, out_r, err_r, stdin_w, stdin_data, started)
    running.run(inp)
    running.close()
    if script is not None:
        try:
            os.unlink(script)
        except OSError:
            pass
    return running.reply(started)


def _failed(message, started):
    err = ("sandbox: %s\n" % message).encode()
    return {
        "exit_code": 127 if "not found" in message else 126,
        "timed_out": False,
        "cancelled": False,
        "out_head": b"",
        "out_tail": b"",
        "out_total": 0,
        "err_head": err,
        "err_tail": b"",
        "err_total": len(err),
        "duration": time.monotonic() - started,
    }


def _kill_group(pid):
    for target in (-pid, pid):
        try:
            os.kill(target, _SIGKILL)
        except OSError:
            pass


def _read(req):
    with open(req["path"], "rb") as f:
        data = f.read(int(req.get("max_bytes", 1 << 30)) + 1)
    return {"data": data}


def _write(req):
    path = req["path"]
    if req.get("parents"):
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, int(req.get("mode", 0o644)))
    with os.fdopen(fd, "wb") as f:
        f.write(req["data"])
    os.chmod(path, int(req.get("mode", 0o644)))
    return {}


def _untar(req):
    import io
    import tarfile

    os.makedirs(req["dest"], exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(req["data"]), mode="r:") as tar:
        for member in tar.getmembers():
            name = os.path.normpath(member.name)
            if name.startswith("..") or os.path.isabs(name):
                raise ValueError("unsafe path in archive: %r" % member.name)
            if member.issym() or member.islnk():
                link = os.path.normpath(os.path.join(os.path.dirname(name), member.linkname))
                if member.linkname.startswith("/") or link.startswith(".."):
                    raise ValueError("unsafe link in archive: %r" % member.name)
        tar.extractall(req["dest"])
    return {}


class _TooLarge(Exception):
    pass


def _tar(req):
    import io
    import tarfile

    path = req["path"].rstrip("/") or "/"
    if not os.path.exists(path):
        raise FileNotFoundError(2, "No such file or directory", path)
    cap = int(req.get("max_bytes") or (1 << 62))

    class _Capped(io.BytesIO):
        def write(self, data):
            if self.tell() + len(data) > cap:
                raise _TooLarge("archive of %s is larger than max_bytes=%d" % (path, cap))
            return io.BytesIO.write(self, data)

    buf = _Capped()
    with tarfile.open(fileobj=buf, mode="w:") as tar:
        tar.add(path, arcname=os.path.basename(path) or ".")
    return {"data": buf.getvalue()}


_OPS = {"read": _read, "write": _write, "untar": _untar, "tar": _tar}


def _make_undumpable():
    """prctl(PR_SET_DUMPABLE, 0): the commands this server runs share its uid, and a
    non-dumpable process can be neither ptrace-attached nor read or written through
    /proc/PID/mem or /proc/PID/fd by them. The setting is per process and resets at execve,
    so the commands themselves stay ordinary. Uses the `_ctypes` extension directly: the
    `ctypes` package costs 3-5 ms of imports, `_ctypes` well under one. Returns True once
    PR_GET_DUMPABLE confirms it."""
    try:
        import _ctypes
    except ImportError:  # an interpreter built without libffi: nothing to call prctl with
        return False

    class _Long(_ctypes._SimpleCData):
        _type_ = "l"

    class _Func(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL
        _restype_ = _Long

    class _Libc:
        _handle = _ctypes.dlopen(None)

    try:
        prctl = _Func(("prctl", _Libc))
        prctl.argtypes = (_Long, _Long, _Long, _Long, _Long)
        prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
        return prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE
    except Exception:
        return False


def main():
    nondumpable = _make_undumpable()
    if _IS_INIT:
        # Orphans of the sandbox are re-parented to us: reap them as they die, even while an
        # exec is running, so no zombie lingers (a zombie still answers `kill -0`).
        import _signal

        _signal.signal(_signal.SIGCHLD, lambda signum, frame: _reap_orphans())
    os.set_inheritable(0, False)
    os.set_inheritable(1, False)
    inp = _Input()
    # The magic number says whether the host may send this interpreter precompiled bytecode.
    boot = sys.modules.get("_frozen_importlib_external")
    magic = getattr(boot, "MAGIC_NUMBER", b"")
    _send(
        {
            "ready": True,
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "magic": magic,
            "nondumpable": nondumpable,
        }
    )
    while True:
        msg = inp.frame()
        if msg is None:
            if inp.eof:
                return
            if _IS_INIT:
                r, _, _ = select.select([0], [], [], 0.5)
                _reap_orphans()
                if not r:
                    continue
            inp.fill()
            continue
        op = msg.get("op")
        if op == "cancel":
            continue  # arrived after its exec had already finished
        if op == "exit":
            _send({})
            return
        try:
            if op == "exec":
                reply = _exec(msg, inp)
            elif op in _OPS:
                reply = _OPS[op](msg)
            else:
                reply = {"error": "ValueError", "message": "unknown op %r" % op}
        except Exception as e:
            reply = {"error": type(e).__name__, "message": str(e)}
        _send(reply)
        _reap_orphans()


def _archive_main():
    """`python3 -I -S -c <this file> --archive`: one `tar` or `untar` request on stdin, its
    marshal reply on stdout. The native command server (_server.c) runs this as a child
    rather than reimplementing tar; archives are rare (upload/download)."""
    chunks = []
    while True:
        chunk = os.read(0, _READ)
        if not chunk:
            break
        chunks.append(chunk)
    req = marshal.loads(b"".join(chunks))
    try:
        if req.get("op") not in ("tar", "untar"):
            raise ValueError("not an archive op: %r" % req.get("op"))
        reply = _OPS[req["op"]](req)
    except Exception as e:
        reply = {"error": type(e).__name__, "message": str(e)}
    data = memoryview(marshal.dumps(reply, 2))
    while data:
        data = data[os.write(1, data) :]


if __name__ == "__main__":
    if sys.argv[1:] == ["--archive"]:
        _archive_main()
    else:
        main()
