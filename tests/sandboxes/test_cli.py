"""`skyrl sandbox exec | reap | audit` and `skyrl bench sandbox`."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from skyrl_sdk.benchmarks.perf.sandbox import run as bench_run
from skyrl_sdk.sandboxes import GradingIsolation, SandboxSpec, cow_root
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
    "bare_bwrap_start_p50_ms",
    "start_vs_bare",
    "net_start_p50_ms",
    "net_start_p99_ms",
    "grading_isolation",
    "task_root_start_p50_ms",
    "task_root_start_p99_ms",
    "task_root_target_met",
    "grading_exec_true_p50_ms",
    "grading_one_uid_exec_true_p50_ms",
    "grading_exec_bin_true_p50_ms",
    "grading_one_uid_exec_bin_true_p50_ms",
}
DEFAULTS = {f.name: f.default for f in dataclasses.fields(SandboxSpec)}


def skyrl(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skyrl_gym.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
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
    # Asked-for network is a namespace of its own: the host's loopback stays out of reach.
    assert skyrl("sandbox", "exec", "--network", "--", probe).returncode == 1
    bad = skyrl("sandbox", "exec", "--backend", "vm", "--", "true")
    assert bad.returncode == 2 and "unknown sandbox backend" in bad.stderr


def test_bench_reports_exactly_the_promised_keys() -> None:
    report = bench_run(starts=3, execs=20)
    result = report.result
    assert set(result) == BENCH_KEYS
    optional = {"net_start_p50_ms", "net_start_p99_ms"}  # None where network=True cannot start
    isolation = result.pop("grading_isolation")
    assert isolation in {g.value for g in GradingIsolation}
    # The task-root row (a copy-on-write trial root): None only where roots are unsupported.
    met = result.pop("task_root_target_met")
    if cow_root.supported() is None:
        assert met in (True, False) and result["task_root_start_p50_ms"] > 0
    else:
        optional |= {"task_root_start_p50_ms", "task_root_start_p99_ms"}
    assert any("task root" in row[0] for row in report.rows)
    assert all(v > 0 for k, v in result.items() if k not in optional or v is not None)
    ratios = (
        ("exec_vs_bare_p50", "exec_p50_ms", "bare_exec_p50_ms"),
        ("start_vs_bare", "start_p50_ms", "bare_bwrap_start_p50_ms"),
    )
    for ratio, num, den in ratios:
        assert abs(result[ratio] - result[num] / result[den]) < 0.01
    assert json.loads(json.dumps(result)) == result
    assert any("network=True" in row[0] for row in report.rows)
    assert any("grading exec" in row[0] for row in report.rows)


def test_exec_help_prints_every_default_cap_from_the_spec() -> None:
    """The defaults shown are SandboxSpec's own (computed here from its fields)."""
    result = skyrl("sandbox", "exec", "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    d = DEFAULTS
    for shown in (
        f"memory {d['memory_bytes'] >> 20} MiB",
        f"pids {d['pids']} processes",
        f"cpus {d['cpus']:g} core",
        f"cpu time {d['cpu_time_s']:g} s per command",
        f"disk {d['disk_bytes'] >> 20} MiB",
        f"wall time {d['timeout_s']:g} s per command",
        f"output {d['output_limit_bytes'] // 1024} KiB per stream",
    ):
        assert shown in text, (shown, text)
    for option in ("--memory-mb", "--pids", "--cpus", "--cpu-time", "--disk-mb", "--output-kb"):
        assert option in text
    assert f"[default: {d['disk_bytes'] >> 20}]" in text


def test_exec_cap_options_are_applied() -> None:
    small = skyrl("sandbox", "exec", "--output-kb", "1", "--", "yes | head -c 100000")
    assert small.returncode == 0
    assert "bytes truncated" in small.stdout and len(small.stdout) < 1200
    busy = skyrl(
        "sandbox", "exec", "--cpu-time", "1", "--", "python3 -c 'while True: pass'", timeout=90
    )
    assert busy.returncode in (128 + signal.SIGXCPU, 128 + signal.SIGKILL), busy
    if os.geteuid() == 0:  # the workspace is a size-capped tmpfs only as root
        full = skyrl("sandbox", "exec", "--disk-mb", "1", "--", "head -c 4000000 /dev/zero > f")
        assert full.returncode != 0 and "No space left" in full.stderr, full
    uncapped = skyrl("sandbox", "exec", "--memory-mb", "0", "--cpus", "0.5", "--", "true")
    assert uncapped.returncode == 0, uncapped.stderr
    bad = skyrl("sandbox", "exec", "--cpus", "-1", "--", "true")
    assert bad.returncode == 2 and "--cpus" in bad.stderr


OWNER = """
import asyncio, json
from skyrl_sdk.sandboxes import Workspace, create_sandbox
ws = Workspace.create(prefix="skyrl-cli-reap-")
async def main():
    sb = await create_sandbox()
    print(json.dumps([str(ws.path), str(sb.host_workspace)]), flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


def test_reap_reports_sandboxes_and_env_workspaces_in_one_line() -> None:
    # Not pytest's tmp_path: its 0700 parents would stop the sandbox user reaching its workspace.
    state = Path(tempfile.mkdtemp(prefix="skyrl-cli-reap-state-"))
    state.chmod(0o711)
    env = {"SKYRL_SANDBOX_STATE": str(state)}
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER],
        stdout=subprocess.PIPE,
        env={**os.environ, **env},
        cwd=ROOT,
    )
    try:
        paths = json.loads(owner.stdout.readline())  # type: ignore[union-attr]
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    assert all(Path(p).exists() for p in paths)
    result = skyrl("sandbox", "reap", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "reaped 1 sandbox and 1 env workspace; 0 left with live owners"
    ]
    assert not any(Path(p).exists() for p in paths)
    again = skyrl("sandbox", "reap", env=env)
    assert (
        again.stdout.strip() == "reaped 0 sandboxes and 0 env workspaces; 0 left with live owners"
    )
    state.rmdir()


def test_audit_cli_prints_a_row_per_probe_and_exits_by_the_worst() -> None:
    probes = ["--probe", "output", "--probe", "wall-timeout", "--probe", "network-off"]
    held = skyrl("sandbox", "audit", "--json", *probes)
    assert held.returncode == 0, held.stdout + held.stderr
    report = json.loads(held.stdout.splitlines()[-1])
    assert report["backend"] == "bwrap" and report["exit_code"] == 0
    assert [p["probe"] for p in report["probes"]] == ["network-off", "wall-timeout", "output"]
    assert {p["verdict"] for p in report["probes"]} == {"contained"}
    for name in ("network-off", "wall-timeout", "output"):
        assert name in held.stdout  # the table, before the JSON line
    # The local backend is not a sandbox: its host network is reachable, and the audit says so.
    local = skyrl("sandbox", "audit", "--backend", "local", "--probe", "network-off")
    assert local.returncode == 1
    assert "NOT contained" in local.stdout and "host 127.0.0.1" in local.stdout
    unknown = skyrl("sandbox", "audit", "--probe", "telepathy")
    assert unknown.returncode == 2 and "unknown probes" in unknown.stderr
