"""Vectors 6 and 7 of issue 14 for the envs: capped workspaces, reaped after a SIGKILL.

The `terminal`, `harbor` and `swe` envs keep a host directory per episode (it outlives the
agent's sandbox so the grading phase can look at it). It is a `Workspace`: size-capped (a
tmpfs as root; Harbor's `[environment].storage_mb` is the cap) and recorded with its owner, so
`skyrl sandbox reap` removes it after its owner is killed with SIGKILL. `close()` releases it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyrl_gym.envs.harbor.runtime import HarborRuntime
from skyrl_gym.envs.harbor.task import load_task
from skyrl_gym.envs.terminal.env import TerminalEnv
from skyrl_sdk.sandboxes import reap
from tests.skyrl_gym.envs.harbor.conftest import arun, make_task, needs_bwrap

pytestmark = needs_bwrap
REPO = Path(__file__).parents[4]
MiB = 1 << 20

# Opens a terminal episode and a Harbor trial, prints their host directories, waits to die.
OWNER = """
import asyncio, json, sys
from skyrl_gym.envs.harbor.runtime import HarborRuntime
from skyrl_gym.envs.harbor.task import load_task
from skyrl_gym.envs.terminal.env import TerminalEnv

env = TerminalEnv()
env.reset(seed=0)
runtime = HarborRuntime(load_task(sys.argv[1]))
asyncio.run(runtime.start())
print(json.dumps([str(env.sandbox.host_workspace), str(runtime.app_dir.parent)]), flush=True)
sys.stdin.read()
"""


def tmpfs_size(path: Path) -> int | None:
    """The `size=` of a tmpfs mounted exactly at `path` (from /proc/self/mountinfo)."""
    size = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] != os.path.realpath(path):
            continue
        rest = fields[fields.index("-") + 1 :]
        options = dict(o.partition("=")[::2] for o in rest[2].split(","))
        size = None
        if rest[0] == "tmpfs" and options.get("size", "").endswith("k"):
            size = int(options["size"][:-1]) * 1024
    return size


@pytest.fixture
def state() -> Iterator[Path]:
    """A private sandbox state root (not pytest's tmp_path: the sandbox user must traverse)."""
    root = Path(tempfile.mkdtemp(prefix="skyrl-ws-test-"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="tmpfs workspaces need root")
def test_env_workspaces_are_reaped_after_their_owner_is_sigkilled(
    tmp_path: Path, state: Path
) -> None:
    """Vector 7: /tmp/skyrl-terminal-* and /tmp/skyrl-harbor-* do not outlive a SIGKILL."""
    task = make_task(tmp_path, "plain")
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(task)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "SKYRL_SANDBOX_STATE": str(state)},
        cwd=REPO,
    )
    dirs: list[str] = []
    try:
        dirs = json.loads(owner.stdout.readline())  # type: ignore[union-attr]
        assert all(Path(d).is_dir() for d in dirs)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    try:
        reap(state)
        left = [d for d in dirs if Path(d).exists()]
        assert left == [], "env workspaces survived their owner's SIGKILL and the reap"
    finally:
        for d in dirs:  # never leak on failure (the code before issue 14 left them)
            if os.path.ismount(d):
                subprocess.run(["umount", "-l", d], check=False)
            shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="the disk cap is a tmpfs as root")
def test_harbor_storage_is_the_disk_cap(tmp_path: Path) -> None:
    """Vector 6: `[environment].storage_mb` caps what the agent can write (ENOSPC)."""
    toml = textwrap.dedent(
        """\
        schema_version = "1.4"
        [verifier]
        timeout_sec = 30.0
        [environment]
        network_mode = "no-network"
        storage_mb = 32
        memory_mb = 512
        """
    )
    runtime = HarborRuntime(load_task(make_task(tmp_path, "small-disk", toml=toml)))

    async def go() -> tuple[str, int]:
        try:
            sandbox = await runtime.start()
            ran = await sandbox.exec(
                "dd if=/dev/zero of=/app/big bs=1M count=64 2>&1; sync", timeout=60
            )
            return ran.output, os.path.getsize(runtime.app_dir / "big")
        finally:
            await runtime.close()

    output, size = arun(go(), 120)
    assert size <= 32 * MiB, output
    assert "No space left on device" in output
    assert not runtime.app_dir.exists()  # close() released it


@pytest.mark.skipif(os.geteuid() != 0, reason="the disk cap is a tmpfs as root")
def test_terminal_workspace_is_capped_and_released() -> None:
    """Vector 6: the terminal env's workspace is a size-capped tmpfs; close() removes it."""
    env = TerminalEnv()
    try:
        env.reset(seed=0)
        workspace = env.sandbox.host_workspace  # type: ignore[union-attr]
        assert workspace is not None
        assert tmpfs_size(workspace) == 1 << 30  # DEFAULT_DISK_BYTES
    finally:
        env.close()
    assert not workspace.exists()
