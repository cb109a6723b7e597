"""The native command server (`sandboxes/_server.c`) against the Python one (`_server.py`).

Protocol conformance: both servers are started as plain subprocesses and given the same
requests; their replies, decoded by the host's own bounded decoder, must be equal (durations
and pids aside). Then the behaviours that matter inside a real sandbox: output caps, timeouts,
cancel, EOF, orphan reaping, non-dumpable, archives, and the server choice itself.
"""

from __future__ import annotations

import asyncio
import logging
import marshal
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyrl_sdk.sandboxes import BackendUnavailable, SandboxSpec, _native, create_sandbox
from skyrl_sdk.sandboxes._process import SERVER_SOURCE, _safe_loads
from tests.conftest import arun, needs_bwrap

KINDS = ("native", "python")
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def _native_binary() -> Path:
    try:
        return _native.build().path
    except BackendUnavailable as e:
        pytest.skip(str(e))


class Server:
    """One command server as a plain subprocess, spoken to frame by frame."""

    def __init__(self, kind: str, cwd: Path) -> None:
        argv = (
            [str(_native_binary())]
            if kind == "native"
            else [sys.executable, "-I", "-S", "-c", SERVER_SOURCE]
        )
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=cwd, env=ENV
        )
        self.hello = self.reply()

    def send(self, request: dict[str, Any]) -> None:
        data = marshal.dumps(request, 2)
        assert self.proc.stdin is not None
        self.proc.stdin.write(len(data).to_bytes(4, "big") + data)
        self.proc.stdin.flush()

    def reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        size = int.from_bytes(self.proc.stdout.read(4), "big")
        return _safe_loads(self.proc.stdout.read(size))

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self.send(request)
        return self.reply()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[dict[str, Server]]:
    started = {kind: Server(kind, tmp_path) for kind in KINDS}
    yield started
    for server in started.values():
        server.close()


def _exec(argv: list[str], **extra: Any) -> dict[str, Any]:
    request = {
        "op": "exec",
        "argv": argv,
        "env": ENV,
        "cwd": None,
        "timeout": 10.0,
        "stdin": None,
        "limit": 1000,
        "cpu_time": None,
        "fsize": None,
        "as_bytes": None,
    }
    request.update(extra)
    return request


def _conformance_requests(tmp: Path) -> list[tuple[str, dict[str, Any]]]:
    sh = "/bin/sh"
    return [
        ("output", _exec([sh, "-c", "echo out; echo err >&2; exit 3"], cwd=str(tmp))),
        ("stdin", _exec(["cat"], stdin=b"x" * 300_000 + b"END")),
        ("empty stdin", _exec(["cat"], stdin=b"")),
        ("capped", _exec([sh, "-c", "seq 1 5000; seq 1 3000 >&2"], limit=4096)),
        ("zero cap", _exec([sh, "-c", "echo hi"], limit=0)),
        ("not found", _exec(["no-such-command-here"])),
        ("bad cwd", _exec(["ls"], cwd=str(tmp / "missing"))),
        ("not executable", _exec([str(tmp / "plain.txt")])),
        ("env", _exec([sh, "-c", 'echo "$FOO|$PATH"'], env={**ENV, "FOO": "b a r"})),
        ("signal", _exec([sh, "-c", "kill -TERM $$"])),
        ("long script", _exec([sh, "-c", "#" + "y" * 150_000 + "\necho long"])),
        ("timeout", _exec(["sleep", "5"], timeout=0.3)),
        (
            "write",
            {
                "op": "write",
                "path": str(tmp / "d/e/f.txt"),
                "data": b"hello",
                "mode": 0o600,
                "parents": True,
            },
        ),
        ("read", {"op": "read", "path": str(tmp / "d/e/f.txt"), "max_bytes": 3}),
        ("stat", _exec(["stat", "-c", "%a %s", str(tmp / "d/e/f.txt")])),
        ("read missing", {"op": "read", "path": str(tmp / "nope"), "max_bytes": 3}),
        ("read dir", {"op": "read", "path": str(tmp), "max_bytes": 3}),
        (
            "write no parent",
            {"op": "write", "path": str(tmp / "x/y"), "data": b"", "parents": False},
        ),
        ("unknown op", {"op": "frobnicate"}),
        # Not a namespace's PID 1 here: end_all kills nothing and says so (others: -1).
        ("end_all outside a sandbox", {**_exec(["/bin/sh", "-c", "exit 4"]), "end_all": True}),
    ]


def _comparable(reply: dict[str, Any]) -> dict[str, Any]:
    out = dict(reply)
    if "duration" in out:
        assert isinstance(out.pop("duration"), float)
    return out


def test_both_servers_answer_every_request_alike(
    servers: dict[str, Server], tmp_path: Path
) -> None:
    (tmp_path / "plain.txt").write_text("not a program")
    assert servers["native"].hello["ready"] and servers["native"].hello["nondumpable"]
    assert servers["native"].hello["server"] == "native"
    for name, request in _conformance_requests(tmp_path):
        replies = {kind: _comparable(server.ask(request)) for kind, server in servers.items()}
        assert replies["native"] == replies["python"], name
    # The native server sets a command's rlimits and oom_score_adj before execve, so even the
    # command's first instruction sees them (the Python server applies them right after the
    # spawn, and a fast `sh` may still see the interim values).
    limits = servers["native"].ask(
        _exec(
            ["/bin/sh", "-c", "ulimit -t; ulimit -f; ulimit -c; cat /proc/self/oom_score_adj"],
            cpu_time=7,
            fsize=1 << 20,
        )
    )
    assert limits["out_head"] == b"7\n2048\n0\n1000\n"
    capped = servers["native"].ask(_exec(["/bin/sh", "-c", "seq 1 5000"], limit=4096))
    assert len(capped["out_head"]) == 3072 and len(capped["out_tail"]) == 1024
    assert capped["out_total"] == len("".join(f"{i}\n" for i in range(1, 5001)))
    assert capped["out_tail"].endswith(b"4999\n5000\n")


@pytest.mark.parametrize("kind", KINDS)
def test_cancel_frame_kills_the_running_command(kind: str, tmp_path: Path) -> None:
    server = Server(kind, tmp_path)
    try:
        t0 = time.monotonic()
        server.send(_exec(["/bin/sh", "-c", "sleep 30 & sleep 30"]))
        time.sleep(0.3)
        server.send({"op": "cancel"})
        reply = server.reply()
        assert reply["cancelled"] and reply["exit_code"] == -9
        assert time.monotonic() - t0 < 10
        # A late cancel (its exec already finished) is ignored, and the server still answers.
        server.send({"op": "cancel"})
        assert server.ask(_exec(["echo", "next"]))["out_head"] == b"next\n"
    finally:
        server.close()


@pytest.mark.parametrize("kind", KINDS)
def test_eof_on_stdin_kills_the_command_and_the_server_exits(kind: str, tmp_path: Path) -> None:
    server = Server(kind, tmp_path)
    pidfile = tmp_path / "pid"
    try:
        server.send(_exec(["/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 30"]))
        deadline = time.monotonic() + 10
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        pid = int(pidfile.read_text())
        assert server.proc.stdin is not None
        server.proc.stdin.close()
        assert server.proc.wait(10) == 0
        deadline = time.monotonic() + 5
        while _alive(pid):
            assert time.monotonic() < deadline, "the command outlived its server"
            time.sleep(0.02)
    finally:
        server.close()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _sandbox_run(kind: str, monkeypatch: pytest.MonkeyPatch, body: Any, **spec: Any) -> Any:
    monkeypatch.setenv(_native.SERVER_ENV, kind)

    async def go() -> Any:
        async with create_sandbox(SandboxSpec(**spec)) as sb:
            assert sb.server_kind == kind  # type: ignore[attr-defined]
            return await body(sb)

    return arun(go())


@needs_bwrap
@pytest.mark.parametrize("kind", KINDS)
def test_sandbox_caps_output_and_times_out(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def body(sb: Any) -> None:
        big = await sb.exec("head -c 100000 /dev/zero | tr '\\0' a; echo; echo tail-marker")
        assert big.truncated and big.stdout_bytes == 100000 + 1 + 12
        assert big.stdout.startswith("a" * 100) and big.stdout.rstrip().endswith("tail-marker")
        t0 = time.monotonic()
        slow = await sb.exec("sleep 20", timeout=0.5)
        assert slow.timed_out and time.monotonic() - t0 < 5
        assert (await sb.exec("echo still")).stdout == "still\n"

    _sandbox_run(kind, monkeypatch, body, output_limit_bytes=4096)


@needs_bwrap
@pytest.mark.parametrize("kind", KINDS)
def test_sandbox_cancel_leaves_nothing_running(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def body(sb: Any) -> str:
        task = asyncio.ensure_future(sb.exec("sleep 30 & sleep 31"))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        listing = await sb.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
        return listing.stdout

    assert "sleep 3" not in _sandbox_run(kind, monkeypatch, body)


@needs_bwrap
@pytest.mark.parametrize("kind", KINDS)
def test_sandbox_pid1_reaps_orphans(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A double-forked child that exits is re-parented to the server (PID 1) and reaped: no
    zombie stays behind to count against the pids limit."""

    async def body(sb: Any) -> str:
        # The inner subshell exits at once; `sleep` becomes an orphan of PID 1 and dies soon.
        await sb.exec("(sleep 0.2 </dev/null >/dev/null 2>&1 &); exit 0")
        await asyncio.sleep(1.0)
        states = await sb.exec("grep -h '^State' /proc/[0-9]*/status")
        return states.stdout

    assert "zombie" not in _sandbox_run(kind, monkeypatch, body)


@needs_bwrap
@pytest.mark.parametrize("kind", KINDS)
def test_sandbox_end_all_kills_what_the_command_left_at_its_exit(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`exec(..., end_all=True)`: the moment the command exits, every other process of the
    sandbox (here a detached `setsid` writer that would otherwise keep writing) is killed and
    counted; without it the writer goes on."""

    async def body(sb: Any) -> tuple[Any, str, Any, str]:
        writer = "setsid sh -c 'sleep 0.3; echo late > /tmp/late' </dev/null >/dev/null 2>&1 &"
        ended = await sb.exec(
            f"{writer} sleep 30 </dev/null >/dev/null 2>&1 & exit 3", end_all=True
        )
        await asyncio.sleep(0.6)
        after = (await sb.exec("cat /tmp/l* /proc/[0-9]*/comm")).stdout
        plain = await sb.exec(f"{writer} exit 0")
        await asyncio.sleep(0.6)
        return ended, after, plain, (await sb.exec("cat /tmp/late")).stdout

    ended, after, plain, late = _sandbox_run(kind, monkeypatch, body)
    # `sleep 30` and the writer's shell, plus the writer's `sleep 0.3` when that shell has
    # already forked it by the time `exit 3` runs (it has, on a loaded host).
    assert ended.exit_code == 3 and ended.left_running in (2, 3) and ended.orphaned == 0, ended
    assert "late" not in after and "sleep" not in after, after  # no file, no sleep left
    assert plain.left_running is None and late == "late\n"


@needs_bwrap
@pytest.mark.parametrize("kind", KINDS)
def test_sandbox_end_all_counts_processes_that_outlived_their_parent(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A detached child that ends before the command does (re-parented to PID 1, which reaps
    it) is counted in `orphaned`; children the command waits for are not."""

    async def body(sb: Any) -> tuple[Any, Any]:
        waited = await sb.exec("sleep 0.1 & sleep 0.1 & wait; echo $(true)", end_all=True)
        detached = await sb.exec("(setsid sleep 0.1 &); sleep 0.5", end_all=True)
        return waited, detached

    waited, detached = _sandbox_run(kind, monkeypatch, body)
    assert (waited.orphaned, waited.left_running) == (0, 0), waited
    assert (detached.orphaned, detached.left_running) == (1, 0), detached


@needs_bwrap
@pytest.mark.parametrize("kind", KINDS)
def test_sandbox_server_is_nondumpable(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def body(sb: Any) -> tuple[bool, int, str]:
        probe = await sb.exec("cat /proc/1/environ; cat /proc/1/mem")
        comm = (await sb.exec("cat /proc/1/comm")).stdout.strip()
        return sb.hardening["nondumpable"], probe.exit_code, comm

    hardened, code, comm = _sandbox_run(kind, monkeypatch, body)
    assert hardened and code != 0
    assert comm == ("skyrl-server" if kind == "native" else "python3")


@needs_bwrap
@pytest.mark.parametrize("kind", KINDS)
def test_sandbox_upload_and_download_round_trip(
    kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("alpha")
    (src / "b.bin").write_bytes(bytes(range(256)))
    out = tmp_path / "out"

    async def body(sb: Any) -> str:
        await sb.upload(src, "/tmp/up")
        listing = await sb.exec("cat /tmp/up/sub/a.txt; wc -c < /tmp/up/b.bin")
        await sb.download("/tmp/up", out)
        return listing.stdout

    assert _sandbox_run(kind, monkeypatch, body) == "alpha256\n"
    assert (out / "up" / "sub" / "a.txt").read_text() == "alpha"
    assert (out / "up" / "b.bin").read_bytes() == bytes(range(256))


def test_server_choice_and_fallback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(_native.SERVER_ENV, "bogus")
    with pytest.raises(BackendUnavailable, match="SKYRL_SANDBOX_SERVER"):
        _native.server_choice()
    monkeypatch.setenv(_native.SERVER_ENV, "python")
    assert _native.choose(need_static=False) is None
    # No compiler: `auto` falls back to Python with one warning, `native` refuses.
    monkeypatch.setattr(_native, "_built", None)
    monkeypatch.setattr(_native, "_failure", None)
    monkeypatch.setattr(_native, "_warned", False)
    monkeypatch.setattr(_native, "compiler", lambda: None)
    monkeypatch.setenv(_native.SERVER_ENV, "auto")
    with caplog.at_level(logging.WARNING, logger=_native.__name__):
        assert _native.choose(need_static=False) is None
        assert _native.choose(need_static=False) is None
    warnings = [r for r in caplog.records if r.name == _native.__name__]
    assert len(warnings) == 1 and "gcc" in warnings[0].getMessage()
    monkeypatch.setenv(_native.SERVER_ENV, "native")
    with pytest.raises(BackendUnavailable, match="no C compiler"):
        _native.choose(need_static=False)


def test_local_backend_falls_back_to_python_without_a_compiler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_native, "_built", None)
    monkeypatch.setattr(_native, "_failure", None)
    monkeypatch.setattr(_native, "_warned", True)
    monkeypatch.setattr(_native, "compiler", lambda: None)
    monkeypatch.setenv(_native.SERVER_ENV, "auto")

    async def go() -> tuple[str | None, str]:
        async with create_sandbox(SandboxSpec(), "local") as sb:
            return sb.server_kind, (await sb.exec("echo ok")).stdout  # type: ignore[attr-defined]

    assert arun(go()) == ("python", "ok\n")


def test_the_native_binary_is_static_when_libc_allows() -> None:
    server = _native.build() if _native.compiler() else pytest.skip("no C compiler")
    libc_a = any(Path(d, "libc.a").exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"))  # fmt: skip
    assert server.static == libc_a
    st = server.path.stat()
    assert st.st_mode & 0o755 == 0o755 and not st.st_mode & 0o022


@needs_bwrap
def test_native_server_runs_in_an_image_root_without_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The static binary needs nothing from the image: a busybox-only root works."""
    busybox = shutil.which("busybox")
    if busybox is None or not _native.build().static:
        pytest.skip("needs a static busybox and a static native server")
    root = Path(tempfile.mkdtemp(prefix="skyrl-native-rootfs-"))
    try:
        root.chmod(0o755)  # the sandbox user must reach it
        (root / "bin").mkdir()
        shutil.copy(busybox, root / "bin" / "busybox")
        for name in ("sh", "echo", "cat"):
            (root / "bin" / name).symlink_to("busybox")

        async def body(sb: Any) -> str:
            return (await sb.exec("echo in-image; cat /proc/1/comm")).stdout

        out = _sandbox_run("native", monkeypatch, body, rootfs=str(root), env={"PATH": "/bin"})
        assert out == "in-image\nskyrl-server\n"
    finally:
        shutil.rmtree(root, ignore_errors=True)
