"""`skyrl bench sandbox`: sandbox start and warm `exec("true")` latency against a bare subprocess.

Baseline: `subprocess.run(["/bin/sh", "-c", "true"])` from this process, the same program a
sandboxed `exec("true")` runs. Bare and sandboxed execs alternate in one loop so both see the
same machine load.
"""

from __future__ import annotations

import asyncio
import subprocess
import time

from skyrl_sdk.benchmarks.report import BenchReport
from skyrl_sdk.sandboxes import SandboxPool, SandboxSpec, create_sandbox
from skyrl_sdk.sandboxes.pool import percentile


async def _measure(starts: int, execs: int, backend: str) -> dict[str, list[float]]:
    spec = SandboxSpec()
    start_ms: list[float] = []
    await (await create_sandbox(spec, backend)).close()  # warm caches; run the startup reaper
    for _ in range(starts):
        t0 = time.perf_counter()
        sandbox = await create_sandbox(spec, backend)
        start_ms.append((time.perf_counter() - t0) * 1000)
        await sandbox.close()
    exec_ms: list[float] = []
    bare_ms: list[float] = []
    async with create_sandbox(spec, backend) as sandbox:
        for _ in range(10):
            await sandbox.exec("true")
        for _ in range(execs):
            t0 = time.perf_counter()
            result = await sandbox.exec("true")
            exec_ms.append((time.perf_counter() - t0) * 1000)
            if not result.ok:
                raise RuntimeError(f"exec('true') failed in the sandbox: {result}")
            t0 = time.perf_counter()
            subprocess.run(["/bin/sh", "-c", "true"], check=True)
            bare_ms.append((time.perf_counter() - t0) * 1000)
    async with SandboxPool(spec, backend, warm=2, max_live=4) as pool:
        for _ in range(max(4, starts // 4)):
            sandbox = await pool.acquire()
            await pool.release(sandbox)
            await asyncio.sleep(0.1)  # let the pool refill, as it would between episodes
        acquire = pool.stats()
    bare_bwrap_ms: list[float] = []
    if backend == "bwrap":  # context for start: bwrap alone, no cgroups, uid drop or server
        argv = ["bwrap", "--ro-bind", "/", "/", "--unshare-all", "--proc", "/proc", "true"]
        for _ in range(max(5, starts // 2)):
            t0 = time.perf_counter()
            subprocess.run(argv, check=True)
            bare_bwrap_ms.append((time.perf_counter() - t0) * 1000)
    return {
        "bwrap_true": bare_bwrap_ms,
        "start": start_ms,
        "exec": exec_ms,
        "bare": bare_ms,
        "acquire": [acquire.acquire_p50_ms, acquire.acquire_p99_ms],
    }


def run(starts: int = 40, execs: int = 300, backend: str = "bwrap") -> BenchReport:
    """Measure and return the report (keys: start/exec/bare_exec p50/p99, exec_vs_bare_p50)."""
    m = asyncio.run(_measure(starts, execs, backend))
    s50, s99 = percentile(m["start"], 50), percentile(m["start"], 99)
    e50, e99 = percentile(m["exec"], 50), percentile(m["exec"], 99)
    b50, b99 = percentile(m["bare"], 50), percentile(m["bare"], 99)
    result = {
        "start_p50_ms": round(s50, 3),
        "start_p99_ms": round(s99, 3),
        "exec_p50_ms": round(e50, 3),
        "exec_p99_ms": round(e99, 3),
        "bare_exec_p50_ms": round(b50, 3),
        "bare_exec_p99_ms": round(b99, 3),
        "exec_vs_bare_p50": round(e50 / b50, 3),
    }
    rows = [
        (
            f"{backend} start p50 / p99 (ms)",
            f"{s50:.1f} / {s99:.1f}",
            f"{percentile(m['bwrap_true'], 50):.1f} (bare `bwrap true` p50)"
            if m["bwrap_true"]
            else "-",
        ),
        ("warm exec('true') p50 (ms)", f"{e50:.2f}", f"{b50:.2f} (bare subprocess)"),
        ("warm exec('true') p99 (ms)", f"{e99:.2f}", f"{b99:.2f} (bare subprocess)"),
        ("exec / bare, p50", f"{e50 / b50:.2f}x", "target <= 2x"),
        ("pool acquire p50 / p99 (ms)", f"{m['acquire'][0]:.2f} / {m['acquire'][1]:.2f}", "-"),
    ]
    notes = [
        f"{starts} starts (create until the in-sandbox server answers), {execs} execs in one warm "
        "sandbox, alternating with bare subprocess runs of /bin/sh -c true.",
        "Start includes cgroup creation, the uid drop, bwrap and the Python command server's "
        "boot; a SandboxPool hides it (pool acquire row).",
    ]
    return BenchReport("sandbox", rows, result, notes)
