"""`skyrl sandbox exec` and `skyrl bench sandbox`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from skyrl_sdk.benchmarks.sandbox_bench import run as bench_run
from tests.conftest import needs_bwrap

pytestmark = needs_bwrap
ROOT = Path(__file__).parents[2]
BENCH_KEYS = {
    "start_p50_ms",
    "start_p99_ms",
    "exec_p50_ms",
    "exec_p99_ms",
    "bare_exec_p50_ms",
    "bare_exec_p99_ms",
    "exec_vs_bare_p50",
}


def skyrl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skyrl_gym.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_sandbox_exec_prints_output_and_passes_the_exit_status(host_listener: int) -> None:
    ok = skyrl("sandbox", "exec", "--", "echo", "hi there")
    assert (ok.returncode, ok.stdout) == (0, "hi there\n")
    failed = skyrl("sandbox", "exec", "--", "echo oops >&2; exit 7")
    assert (failed.returncode, failed.stderr) == (7, "oops\n")
    slow = skyrl("sandbox", "exec", "--timeout", "1", "--", "sleep 10")
    assert slow.returncode == 124 and "timed out" in slow.stderr
    probe = (
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {host_listener}), 2)\""
    )
    assert skyrl("sandbox", "exec", "--", probe).returncode == 1
    assert skyrl("sandbox", "exec", "--network", "--", probe).returncode == 0
    bad = skyrl("sandbox", "exec", "--backend", "vm", "--", "true")
    assert bad.returncode == 2 and "unknown sandbox backend" in bad.stderr


def test_bench_reports_exactly_the_promised_keys() -> None:
    report = bench_run(starts=3, execs=20)
    assert set(report.result) == BENCH_KEYS
    assert all(v > 0 for v in report.result.values())
    assert (
        report.result["exec_vs_bare_p50"]
        == round(report.result["exec_p50_ms"] / report.result["bare_exec_p50_ms"], 3)
        or abs(
            report.result["exec_vs_bare_p50"]
            - report.result["exec_p50_ms"] / report.result["bare_exec_p50_ms"]
        )
        < 0.01
    )
    line = json.dumps(report.result)
    assert json.loads(line) == report.result
