"""The docker backend against a real dockerd started by the `docker_engine` fixture."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skyrl_sdk.sandboxes import ExecStatus, SandboxError, SandboxSpec, create_sandbox, reap
from tests.conftest import arun

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("docker")]


def client():
    import docker

    return docker.from_env()


def test_docker_exec_files_and_workspace(docker_engine: str, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "in.txt").write_text("uploaded")

    async def go():
        spec = SandboxSpec(image=docker_engine, files={"seed.txt": "seed"}, env={"V": "1"})
        async with create_sandbox(spec, backend="docker") as sb:
            basics = await sb.exec("echo $V; cat seed.txt; echo err >&2; exit 5")
            piped = await sb.exec(["cat"], stdin="through stdin")
            await sb.write_file("dir/new.txt", "written")
            await sb.upload(source, "up")
            back = await sb.download("up", tmp_path / "back")
            data = await sb.read_file("dir/new.txt")
            with pytest.raises(FileNotFoundError):
                await sb.read_file("nope.txt")
            host_view = (sb.host_workspace / "dir" / "new.txt").read_text()
            return basics, piped, data, back, host_view

    basics, piped, data, back, host_view = arun(go())
    assert (basics.exit_code, basics.stdout, basics.stderr) == (5, "1\nseed", "err\n")
    assert piped.stdout == "through stdin"
    assert data == b"written" and host_view == "written"
    assert (back / "in.txt").read_text() == "uploaded"


def test_docker_isolation_network_readonly_root_and_caps(
    docker_engine: str, host_listener: int
) -> None:
    fetch = f"nc -w 3 127.0.0.1 {host_listener} </dev/null"

    async def go():
        spec = SandboxSpec(
            image=docker_engine, memory_bytes=64 << 20, pids=16, output_limit_bytes=1024
        )
        async with create_sandbox(spec, backend="docker") as sb:
            blocked = await sb.exec(fetch, timeout=10)
            readonly = await sb.exec("touch /etc/x")
            hog = await sb.exec("dd if=/dev/zero of=/dev/null bs=200M count=1", timeout=20)
            loop = await sb.exec("while :; do :; done", timeout=1)
            flood = await sb.exec("head -c 10000000 /dev/zero", timeout=30)
            # Last: while the fork bomb's children live, even `docker exec` cannot start
            # (runc needs a pid in the container's cgroup).
            forks = await sb.exec("for i in $(seq 40); do sleep 3 & done; wait", timeout=20)
        async with create_sandbox(
            SandboxSpec(image=docker_engine, network=True), backend="docker"
        ) as sb:
            allowed = await sb.exec(fetch, timeout=10)
        return blocked, readonly, hog, forks, loop, flood, allowed

    blocked, readonly, hog, forks, loop, flood, allowed = arun(go(), timeout=120)
    assert blocked.exit_code != 0 and "Connection refused" in blocked.stderr, blocked
    assert allowed.exit_code == 0 and allowed.stdout.endswith("hello"), allowed
    assert readonly.exit_code != 0 and "Read-only" in readonly.stderr, readonly
    assert hog.exit_code in (137, -9), hog
    assert hog.status in (ExecStatus.FAILED, ExecStatus.KILLED), hog
    assert "can't fork" in forks.stderr or "temporarily unavailable" in forks.stderr, forks
    assert loop.timed_out and loop.duration_s < 5, loop
    assert flood.truncated and flood.stdout_bytes == 10_000_000, flood.stdout_bytes
    assert len(flood.stdout) < 1200


def test_docker_close_removes_the_container(docker_engine: str) -> None:
    async def go():
        sb = await create_sandbox(SandboxSpec(image=docker_engine), backend="docker")
        await sb.exec("sleep 1000 &")
        name = sb.id
        running = [c.name for c in client().containers.list()]
        await sb.close()
        return name, running

    name, running = arun(go())
    assert name in running
    assert name not in [c.name for c in client().containers.list(all=True)]


OWNER = """
import asyncio
from skyrl_sdk.sandboxes import SandboxSpec, create_sandbox

async def main():
    sb = await create_sandbox(SandboxSpec(image={image!r}), backend="docker")
    print(sb.id, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_docker_container_of_a_sigkilled_owner_is_reaped(docker_engine: str) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER.format(image=docker_engine)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
        env=dict(os.environ),
    )
    try:
        name = owner.stdout.readline().strip()  # type: ignore[union-attr]
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    time.sleep(0.2)
    assert name in [c.name for c in client().containers.list()]  # SIGKILL left it running
    report = reap()
    assert name in report.reaped, json.dumps(report.errors)
    assert name not in [c.name for c in client().containers.list(all=True)]


def test_docker_backend_errors_are_clear(docker_engine: str) -> None:
    async def go():
        with pytest.raises(ValueError, match=r"needs SandboxSpec\(image"):
            await create_sandbox(SandboxSpec(), backend="docker")
        with pytest.raises(SandboxError, match="not found on the engine"):
            await create_sandbox(SandboxSpec(image="skyrl-missing:1"), backend="docker")

    arun(go())
