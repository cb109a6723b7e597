"""Vector 6 of issue 14: no disk cap and no CPU cap by default.

Before the security work a default sandbox's workspace was a plain host directory (a `dd` of
1.5 GB went to the host disk) and nothing bounded its CPU bandwidth. Now a default spec caps
the workspace and /tmp at 1 GiB (size-capped tmpfs), CPU at one core (cgroup quota) and CPU
time per command at 600 s, and `Sandbox.limits` says how each cap is enforced here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from skyrl_sdk.sandboxes import SandboxError, SandboxSpec, create_sandbox
from tests.conftest import arun, needs_bwrap

pytestmark = needs_bwrap

GiB = 1 << 30
DD = "dd if=/dev/zero of={path} bs=1M count=1500 2>&1; echo rc=$?; stat -c %s {path}"


def host_used() -> int:
    return shutil.disk_usage("/tmp").used


def fill(where: str, spec: SandboxSpec) -> tuple[int, int, str]:
    """Write 1.5 GB at `where` inside; returns (bytes the file holds, host disk growth
    measured while the sandbox still existed, output).

    With the default memory cap the tmpfs pages fill the memory cgroup: the writer is
    OOM-killed, and the command server may be too (the exec then raises SandboxError and
    the sandbox is gone): both are "stopped". The size is then read from the host side.
    """

    async def go() -> tuple[int, int, str]:
        async with create_sandbox(spec) as sb:
            before = host_used()
            try:
                result = await sb.exec(DD.format(path=where), timeout=120)
                out = result.output
            except SandboxError as e:
                out = f"sandbox killed: {e}"
            grown = host_used() - before
            if where.startswith("/workspace/"):
                assert sb.host_workspace is not None
                host_file = sb.host_workspace / where.removeprefix("/workspace/")
                size = host_file.stat().st_size if host_file.exists() else 0
            elif out.startswith("sandbox killed"):
                size = 0  # /tmp went with the sandbox
            else:
                size = int(out.strip().splitlines()[-1])
            return size, grown, out

    return arun(go(), timeout=240)


def test_filling_the_workspace_stops_at_the_disk_cap() -> None:
    """Vector 6: a default sandbox cannot write 1.5 GB into its workspace or the host disk."""
    size, grown, out = fill("/workspace/fill", SandboxSpec())
    assert size <= GiB, f"1.5 GB landed in the workspace ({size} bytes): {out[-500:]}"
    assert grown <= GiB + (64 << 20), f"the host disk grew by {grown} bytes"


def test_disk_cap_holds_even_with_a_larger_memory_cap() -> None:
    """Vector 6: /tmp and the workspace stay at 1 GiB when memory allows more (tmpfs pages are
    memory, so with the default 512 MiB memory cap that one bites first)."""
    spec = SandboxSpec(memory_bytes=3 * GiB)
    for where in ("/tmp/fill", "/workspace/fill"):
        size, grown, out = fill(where, spec)
        assert size <= GiB, f"{where} took {size} bytes past the 1 GiB cap: {out[-500:]}"
        assert "No space left" in out, out[-500:]
        assert grown <= GiB + (64 << 20)


def test_tmp_is_bounded_by_default() -> None:
    """Vector 6: a 1.5 GB write to /tmp of a default sandbox is stopped (ENOSPC or OOM)."""
    size, _, out = fill("/tmp/fill", SandboxSpec())
    assert size <= GiB and "rc=0" not in out, out[-500:]


BUSY = (
    "import os, time\n"
    "kids = []\n"
    "for _ in range(4):\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        end = time.monotonic() + 3\n"
    "        while time.monotonic() < end:\n"
    "            pass\n"
    "        os._exit(0)\n"
    "    kids.append(pid)\n"
    "start = time.monotonic()\n"
    "for pid in kids:\n"
    "    os.waitpid(pid, 0)\n"
    "t = os.times()\n"
    "print(t.children_user + t.children_system, time.monotonic() - start)\n"
)


def test_cpu_bound_processes_get_at_most_one_core_by_default() -> None:
    """Vector 6: four busy processes for 3 s of wall time get about one core, not the host's.

    The same processes run on the host first: when they do not get clearly more than one
    core there (a loaded machine), a cap cannot be told apart and the test skips."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: a one-core cap cannot be told apart")
    host = subprocess.run(
        [sys.executable, "-c", BUSY], capture_output=True, text=True, timeout=60, check=True
    )
    host_cpu, host_wall = (float(x) for x in host.stdout.split())
    if host_cpu < 1.6 * host_wall:
        pytest.skip(f"the host itself gave only {host_cpu / host_wall:.2f} cores: too busy")

    async def go():
        async with create_sandbox() as sb:
            return await sb.exec(["python3", "-c", BUSY], timeout=60), sb.limits

    result, limits = arun(go())
    assert result.ok, result.output
    cpu, wall = (float(x) for x in result.stdout.split())
    assert cpu <= 1.3 * wall, f"{cpu:.1f} CPU-seconds in {wall:.1f} s of wall time: no CPU cap"
    if os.geteuid() == 0:
        assert limits["cpus"] == "cgroup"


def test_limits_say_how_every_default_cap_is_enforced() -> None:
    """Vector 6: `limits` names the mechanism of each cap; as root none is missing."""

    async def go():
        async with create_sandbox() as sb:
            return sb.limits

    limits = arun(go())
    assert set(limits) >= {"memory", "pids", "cpus", "cpu_time", "disk", "tmp", "wall_time"}
    if os.geteuid() == 0:
        assert "none" not in limits.values(), limits
        assert limits["disk"] == limits["tmp"] == "tmpfs"


def test_default_sandbox_has_a_cpu_quota_and_a_cpu_time_limit() -> None:
    """Vector 6: with no CPU setting at all, a command runs under RLIMIT_CPU and (as root) a
    cgroup CPU quota of one core. Deterministic, unlike the timing test above, so it runs on
    a loaded machine too."""
    probe = "import resource; print(*resource.getrlimit(resource.RLIMIT_CPU))"

    async def go():
        async with create_sandbox() as sb:
            result = await sb.exec(["python3", "-c", probe])
            cpu_dir = sb._cgroups.paths.get("cpu")  # type: ignore[attr-defined]
            quota = period = None
            if cpu_dir is not None:
                quota = int((cpu_dir / "cpu.cfs_quota_us").read_text())
                period = int((cpu_dir / "cpu.cfs_period_us").read_text())
            return result, quota, period

    result, quota, period = arun(go())
    assert result.ok, result.output
    soft, _hard = (int(x) for x in result.stdout.split())
    assert 0 < soft <= 3600, f"RLIMIT_CPU is {soft}: no CPU-time cap by default"
    if os.geteuid() == 0 and os.path.isdir("/sys/fs/cgroup/cpu"):
        assert quota is not None and period is not None, "no CPU cgroup for a default sandbox"
        assert 0 < quota <= period, f"quota {quota} us per {period} us: not capped to a core"
