"""A process killed with SIGKILL while holding sandboxes leaves nothing behind once reaped."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from skyrl_sdk.sandboxes import reap, records
from skyrl_sdk.sandboxes.tracking import owner_alive
from tests.conftest import needs_bwrap, processes_matching

OWNER = """
import asyncio, json, sys
from skyrl_sdk.sandboxes import create_sandbox

async def main():
    boxes = [await create_sandbox(backend=b) for b in ("bwrap", "bwrap", "local")]
    for sb in boxes:
        await sb.exec("nohup setsid sleep {marker} >/dev/null 2>&1 &")
    info = [dict(id=sb.id, ws=str(sb.host_workspace), cg=sb._record.cgroups) for sb in boxes]
    print(json.dumps(info), flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


@needs_bwrap
def test_sigkilled_owner_leaves_nothing_after_reap() -> None:
    marker = f"{os.getpid() % 1000 + 2000}.{time.time_ns() % 10**6}"
    # Not pytest's tmp_path: its 0700 parents would stop the sandbox user reaching its workspace.
    state = Path(tempfile.mkdtemp(prefix="skyrl-leak-test-"))
    state.chmod(0o711)
    env = {**os.environ, "SKYRL_SANDBOX_STATE": str(state)}
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER.format(marker=marker)],
        stdout=subprocess.PIPE,
        env=env,
        cwd=Path(__file__).parents[2],
    )
    try:
        line = owner.stdout.readline()  # type: ignore[union-attr]
        boxes = json.loads(line)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    orphans = records(state)
    assert {b["id"] for b in boxes} == {r.id for r in orphans}
    assert not any(owner_alive(r.owner_pid, r.owner_start) for r in orphans)
    assert all(Path(b["ws"]).exists() for b in boxes)  # the reaper has work to do

    report = reap(state)
    assert sorted(report.reaped) == sorted(b["id"] for b in boxes) and not report.errors
    deadline = time.monotonic() + 5
    while processes_matching(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_matching(f"sleep {marker}") == []
    assert records(state) == []
    for b in boxes:
        assert not Path(b["ws"]).exists()
        assert not any(Path(cg).exists() for cg in b["cg"])
    shutil.rmtree(state, ignore_errors=True)


WORKSPACE_OWNER = """
import asyncio, json
from skyrl_sdk.sandboxes import SandboxSpec, Workspace, create_sandbox

async def main():
    ws = Workspace.create("skyrl-leak-ws-", owner_uid=65534)
    sb = await create_sandbox(SandboxSpec(workspace_dir=ws))
    await sb.exec("echo data > kept.txt")
    print(json.dumps(dict(ws=str(ws.path), sandbox=sb.id, cap=ws.disk_cap)), flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


@needs_bwrap
def test_sigkilled_owner_of_a_workspace_leaves_nothing_after_reap() -> None:
    state = Path(tempfile.mkdtemp(prefix="skyrl-leak-test-"))
    state.chmod(0o711)
    env = {**os.environ, "SKYRL_SANDBOX_STATE": str(state / "state"), "TMPDIR": str(state)}
    owner = subprocess.Popen(
        [sys.executable, "-c", WORKSPACE_OWNER],
        stdout=subprocess.PIPE,
        env=env,
        cwd=Path(__file__).parents[2],
    )
    try:
        made = json.loads(owner.stdout.readline())  # type: ignore[union-attr]
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    try:
        workspace = Path(made["ws"])
        assert (workspace / "kept.txt").read_text() == "data\n"
        assert {r.id for r in records(state / "state")} >= {made["sandbox"]}
        report = reap(state / "state")
        assert made["sandbox"] in report.reaped and not report.errors
        assert not workspace.exists()
        assert records(state / "state") == []
        if os.geteuid() == 0:
            assert made["cap"] == "tmpfs"
            assert str(workspace) not in Path("/proc/self/mountinfo").read_text()
    finally:
        shutil.rmtree(state, ignore_errors=True)
