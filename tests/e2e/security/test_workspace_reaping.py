"""Vector 7 of issue 14: an env's temporary workspaces leak when its process is SIGKILLed.

Before the security work the terminal and harbor envs made their workspaces with
`tempfile.mkdtemp` (`/tmp/skyrl-terminal-*`, `/tmp/skyrl-harbor-*`), which nothing recorded:
after a SIGKILL they stayed forever. Now every workspace is recorded with its owner before it
is created, and `skyrl sandbox reap` (or the reap at the first sandbox start of any later
process) removes it, with the sandboxes the dead process left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import needs_bwrap

pytestmark = needs_bwrap

CHECKOUT = Path(__file__).resolve().parents[3]

# An env process: starts a terminal episode (workspace + agent sandbox), says where its
# workspace is, and waits to be killed.
OWNER = """
import json, sys, time
import skyrl_gym

env = skyrl_gym.make("terminal")
env.reset(seed=0)
sandbox = env.unwrapped.sandbox
print(json.dumps({"workspace": str(sandbox.host_workspace), "sandbox": sandbox.id}), flush=True)
time.sleep(600)
"""

# A later process that only starts one sandbox: its first start reaps what the dead left.
LATER = """
import asyncio
from skyrl_sdk.sandboxes import create_sandbox

async def main():
    async with create_sandbox(backend="local") as sb:
        await sb.exec("true")

asyncio.run(main())
"""


@pytest.fixture
def private_tmp() -> Iterator[dict[str, str]]:
    """TMPDIR and the sandbox state root of the child processes, private to this test."""
    base = Path(tempfile.mkdtemp(prefix="skyrl-reap-test-"))
    base.chmod(0o711)  # the sandbox user must reach workspaces below it
    (base / "tmp").mkdir(mode=0o711)
    env = {
        **os.environ,
        "TMPDIR": str(base / "tmp"),
        "SKYRL_SANDBOX_STATE": str(base / "state"),
    }
    yield env
    subprocess.run(["umount", "-R", "-l", str(base / "tmp")], capture_output=True)
    for leftover in (base / "tmp").glob("*"):
        subprocess.run(["umount", "-l", str(leftover)], capture_output=True)
    shutil.rmtree(base, ignore_errors=True)


def kill_env_process(env: dict[str, str]) -> dict[str, str]:
    """Start an env process, wait until its episode runs, SIGKILL it; returns what it made."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], stdout=subprocess.PIPE, env=env, cwd=CHECKOUT
    )
    try:
        line = owner.stdout.readline()  # type: ignore[union-attr]
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    assert line, "the env process did not start its episode"
    made = json.loads(line)
    assert Path(made["workspace"]).is_dir()  # the reaper has work to do
    return made


def test_skyrl_sandbox_reap_removes_a_killed_envs_workspace(private_tmp: dict[str, str]) -> None:
    """Vector 7: after SIGKILL, `skyrl sandbox reap` removes the env's workspace and sandbox."""
    made = kill_env_process(private_tmp)
    reap = subprocess.run(
        [sys.executable, "-m", "skyrl_gym.cli", "sandbox", "reap"],
        env=private_tmp,
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert reap.returncode == 0, reap.stdout + reap.stderr
    assert not Path(made["workspace"]).exists(), "the killed env's workspace was not reaped"
    assert list(Path(private_tmp["TMPDIR"]).iterdir()) == []
    state = Path(private_tmp["SKYRL_SANDBOX_STATE"])
    assert not state.exists() or list(state.iterdir()) == []


def test_first_sandbox_of_a_later_process_reaps_it(private_tmp: dict[str, str]) -> None:
    """Vector 7: without anyone running `reap`, the next process to start a sandbox does."""
    made = kill_env_process(private_tmp)
    later = subprocess.run(
        [sys.executable, "-c", LATER],
        env=private_tmp,
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert later.returncode == 0, later.stderr
    assert not Path(made["workspace"]).exists(), "the killed env's workspace was not reaped"
    assert list(Path(private_tmp["TMPDIR"]).iterdir()) == []
