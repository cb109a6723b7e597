"""Vector 5 of issue 14: the in-sandbox command server can be traced, hijacked or made to
blow up the host.

Sandboxed code runs as the same uid as the command server (PID 1 of the sandbox). Before the
security work it could ptrace-attach to it, open its memory and its pipes to the host through
/proc/1, and create nested user namespaces; and a 4-byte frame length announced by a
(compromised) server made the host allocate that much (up to 4 GiB) before reading a byte.
Now the server is non-dumpable, bwrap loads a seccomp filter (ptrace, nested user namespaces,
keyctl, bpf, perf_event_open, mount... refused) and disables user namespaces, and the host
refuses a frame larger than the pending request can return, before reading it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skyrl_sdk.sandboxes import SandboxError, create_sandbox
from tests.conftest import arun, needs_bwrap

# Each probe prints one JSON object; run with python3 inside a default bwrap sandbox.
PTRACE_PROBE = textwrap.dedent(
    """
    import ctypes, json, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    # PTRACE_SEIZE attaches without stopping PID 1 (a stopped server would hang the test).
    rc = libc.ptrace(0x4206, 1, None, None)
    print(json.dumps({"rc": rc, "errno": ctypes.get_errno()}))
    """
)

PROC_PROBE = textwrap.dedent(
    """
    import json, os
    out = {}
    for name, flags in (("mem", os.O_RDONLY), ("fd/0", os.O_RDONLY), ("fd/1", os.O_WRONLY),
                        ("environ", os.O_RDONLY)):
        try:
            fd = os.open("/proc/1/" + name, flags)
        except OSError as e:
            out[name] = "denied: " + type(e).__name__
            continue
        try:
            if name == "mem":
                # Read one byte of the server's memory at the start of its first mapping.
                with open("/proc/1/maps") as maps:
                    start = int(maps.readline().split("-")[0], 16)
                os.lseek(fd, start, 0)
                out[name] = "READ %d bytes" % len(os.read(fd, 16))
            else:
                out[name] = "OPENED"
        except OSError as e:
            out[name] = "OPENED, then " + type(e).__name__
        finally:
            os.close(fd)
    print(json.dumps(out))
    """
)

USERNS_PROBE = textwrap.dedent(
    """
    import ctypes, json
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.unshare(0x10000000)  # CLONE_NEWUSER
    print(json.dumps({"rc": rc, "errno": ctypes.get_errno()}))
    """
)


def run_in_sandbox(*commands: list[str] | str) -> list:
    async def go():
        async with create_sandbox() as sb:
            return [await sb.exec(c, timeout=20) for c in commands]

    return arun(go())


@needs_bwrap
def test_code_inside_cannot_ptrace_the_command_server() -> None:
    """Vector 5: ptrace-attaching PID 1 (the server) from inside is refused."""
    [result] = run_in_sandbox(["python3", "-c", PTRACE_PROBE])
    got = json.loads(result.stdout)
    assert got["rc"] != 0, "code inside the sandbox ptrace-attached the command server"
    assert got["errno"] == 1  # EPERM (seccomp and non-dumpable both say so)


@needs_bwrap
def test_code_inside_cannot_open_the_servers_memory_or_pipes() -> None:
    """Vector 5: /proc/1/mem, /proc/1/fd/0 and /proc/1/fd/1 (the pipes to the host) stay shut."""
    [result] = run_in_sandbox(["python3", "-c", PROC_PROBE])
    got = json.loads(result.stdout)
    for name in ("mem", "fd/0", "fd/1", "environ"):
        assert got[name].startswith("denied"), f"/proc/1/{name}: {got[name]}"


@needs_bwrap
def test_nested_user_namespaces_are_refused() -> None:
    """Vector 5: no nested user namespace (where the code would hold every capability)."""
    probe, shell = run_in_sandbox(
        ["python3", "-c", USERNS_PROBE], "unshare -U true && echo CREATED || echo refused"
    )
    assert json.loads(probe.stdout)["rc"] != 0, "unshare(CLONE_NEWUSER) succeeded inside"
    assert "CREATED" not in shell.stdout, shell.output


@needs_bwrap
def test_dangerous_syscalls_fail_with_eperm_and_ordinary_work_goes_on() -> None:
    """Vector 5: keyctl, bpf, perf_event_open, mount, setns, userfaultfd give EPERM; threads,
    subprocesses and clone without CLONE_NEWUSER still work."""
    probe = textwrap.dedent(
        """
        import ctypes, json, subprocess, threading
        libc = ctypes.CDLL(None, use_errno=True)
        nr = {"keyctl": 250, "bpf": 321, "perf_event_open": 298, "mount": 165, "setns": 308,
              "userfaultfd": 323, "add_key": 248, "kexec_load": 246}
        out = {}
        for name, n in nr.items():
            rc = libc.syscall(n, 0, 0, 0, 0, 0)
            out[name] = ctypes.get_errno() if rc == -1 else "ALLOWED"
        t = threading.Thread(target=lambda: None); t.start(); t.join()
        out["spawn"] = subprocess.run(["echo", "ok"], capture_output=True, text=True).stdout
        print(json.dumps(out))
        """
    )
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("the probe uses x86_64 system call numbers")
    [result] = run_in_sandbox(["python3", "-c", probe])
    got = json.loads(result.stdout)
    assert got.pop("spawn") == "ok\n"
    assert got == dict.fromkeys(got, 1), got  # every one EPERM


# A stand-in for a compromised command server: it says hello properly, then answers the first
# request with a frame that announces 512 MiB and streams zeros after it.
FORGED_SERVER = textwrap.dedent(
    """
    import marshal, os, sys
    hello = marshal.dumps({"ready": True, "pid": os.getpid(), "magic": b""}, 2)
    os.write(1, len(hello).to_bytes(4, "big") + hello)
    os.read(0, 1 << 16)
    os.write(1, (512 << 20).to_bytes(4, "big"))
    chunk = bytes(1 << 20)
    try:
        for _ in range(600):
            os.write(1, chunk)
    except OSError:
        pass
    """
)

# The same with a small frame whose marshal data announces a tuple of 2**27 items: 1 GiB of
# pointers for `marshal.loads` to allocate before it finds the data missing.
FORGED_TUPLE_SERVER = textwrap.dedent(
    """
    import marshal, os, sys
    hello = marshal.dumps({"ready": True, "pid": os.getpid(), "magic": b""}, 2)
    os.write(1, len(hello).to_bytes(4, "big") + hello)
    os.read(0, 1 << 16)
    payload = b"(" + (1 << 27).to_bytes(4, "little")
    os.write(1, len(payload).to_bytes(4, "big") + payload)
    os.read(0, 1 << 16)
    """
)

# Runs in a fresh interpreter, so that the peak RSS it reports is this scenario's alone.
HOST = textwrap.dedent(
    """
    import asyncio, json, sys
    from skyrl_sdk.sandboxes.local import LocalSandbox
    from skyrl_sdk.sandboxes import SandboxError

    FAKE = sys.argv[1]

    class Forged(LocalSandbox):
        def _server_argv(self, workspace, python_args):
            return [sys.executable, "-c", FAKE]

    def hwm_kib():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])

    async def main():
        sb = Forged()
        await sb.start()
        before = hwm_kib()
        try:
            await sb.exec("echo hi", timeout=20)
            outcome = "answered"
        except SandboxError as e:
            outcome = "refused: " + str(e)
        after = hwm_kib()
        await sb.close()
        print(json.dumps({"outcome": outcome, "growth_mib": (after - before) / 1024}))

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("fake", [FORGED_SERVER, FORGED_TUPLE_SERVER], ids=["frame", "tuple"])
def test_forged_huge_reply_is_refused_before_the_host_allocates_it(
    fake: str, tmp_path: Path
) -> None:
    """Vector 5: a compromised server's announced 512 MiB frame (or 1 GiB marshal tuple) does
    not make the host process grow: it is refused and the sandbox marked broken."""
    env = {**os.environ, "SKYRL_SANDBOX_STATE": str(tmp_path / "state")}
    out = subprocess.run(
        [sys.executable, "-c", HOST, fake],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=Path(__file__).parents[3],
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["growth_mib"] < 64, f"the host grew by {got['growth_mib']:.0f} MiB: {got}"
    assert got["outcome"].startswith("refused"), got


def test_a_broken_sandbox_stays_broken() -> None:
    """Vector 5: after a refused frame the sandbox answers nothing more (no desync)."""
    from skyrl_sdk.sandboxes.local import LocalSandbox

    class Forged(LocalSandbox):
        def _server_argv(self, workspace: Path, python_args: list[str]) -> list[str]:
            return [sys.executable, "-c", FORGED_SERVER]

    async def attempt(sb: Forged, cmd: str) -> str:
        try:
            await sb.exec(cmd, timeout=20)
        except SandboxError as e:
            return str(e)
        return "answered"

    async def go() -> tuple[str, str]:
        sb = Forged()
        await sb.start()
        try:
            return await attempt(sb, "echo hi"), await attempt(sb, "echo again")
        finally:
            await sb.close()

    first, second = arun(go())
    assert "reply" in first and "broken" in second
