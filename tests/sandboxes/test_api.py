"""The Sandbox API on real bwrap and local sandboxes: commands, files, limits, pool, errors."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path

import pytest

from skyrl_sdk.sandboxes import (
    ExecStatus,
    SandboxError,
    SandboxPool,
    SandboxSpec,
    create_sandbox,
    records,
)
from tests.conftest import arun, needs_bwrap


@needs_bwrap
def test_exec_basics_stdin_env_cwd_and_argv() -> None:
    async def go():
        spec = SandboxSpec(env={"FROM_SPEC": "1"}, files={"sub/data.txt": "payload"})
        async with create_sandbox(spec) as sb:
            return [
                await sb.exec("echo out; echo err >&2; exit 3"),
                await sb.exec(["cat"], stdin="piped in"),
                await sb.exec('echo "$FROM_SPEC $EXTRA"', env={"EXTRA": "2"}),
                await sb.exec("pwd; cat data.txt", cwd="sub"),
                await sb.exec(["printf", "%s|", "a b", "$HOME"]),
                await sb.exec(["no-such-binary"]),
            ]

    failed, piped, env, cwd, argv, missing = arun(go())
    assert (failed.exit_code, failed.stdout, failed.stderr) == (3, "out\n", "err\n")
    assert failed.status is ExecStatus.FAILED and not failed.ok
    assert piped.stdout == "piped in"
    assert env.stdout == "1 2\n"
    assert cwd.stdout == "/workspace/sub\npayload"
    assert argv.stdout == "a b|$HOME|"  # argv lists are not shell-expanded
    assert missing.exit_code == 127 and "not found" in missing.stderr


@needs_bwrap
def test_one_persistent_server_serves_many_cheap_execs() -> None:
    async def go():
        async with create_sandbox() as sb:
            parents = {(await sb.exec("echo $PPID")).stdout for _ in range(5)}
            await sb.exec("echo 1 > state")
            kept = (await sb.exec("cat state")).stdout
            times = []
            for _ in range(30):
                t0 = time.perf_counter()
                await sb.exec("true")
                times.append(time.perf_counter() - t0)
            return parents, kept, statistics.median(times)

    parents, kept, median_s = arun(go())
    assert parents == {"1\n"}  # every command is a child of the same in-sandbox server (PID 1)
    assert kept == "1\n"
    assert median_s < 0.05  # far below a sandbox start


@needs_bwrap
def test_files_read_write_upload_download(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text("X = 1\n")
    (source / "top.txt").write_text("top")

    async def go():
        async with create_sandbox() as sb:
            await sb.write_file("a/b/c.bin", b"\x00\xffdata")
            await sb.write_file("/tmp/scratch.txt", "in tmp")
            await sb.upload(source, "up")
            listing = await sb.exec("find up -type f | sort; cat /tmp/scratch.txt")
            back = await sb.download("up", tmp_path / "back")
            with pytest.raises(FileNotFoundError):
                await sb.read_file("missing.txt")
            with pytest.raises(SandboxError):
                await sb.read_file("a/b/c.bin", max_bytes=3)
            return await sb.read_file("a/b/c.bin"), listing.stdout, back

    data, listing, back = arun(go())
    assert data == b"\x00\xffdata"
    assert listing == "up/pkg/mod.py\nup/top.txt\nin tmp"
    assert (back / "pkg" / "mod.py").read_text() == "X = 1\n"


@needs_bwrap
def test_cancelled_exec_kills_the_command_and_the_sandbox_stays_usable() -> None:
    async def go():
        async with create_sandbox() as sb:
            task = asyncio.ensure_future(sb.exec("sleep 1; touch late"))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            after = await sb.exec("echo next")
            await asyncio.sleep(1.2)
            late = await sb.exec("test -e late && echo yes || echo no")
            return after.stdout, late.stdout

    assert arun(go()) == ("next\n", "no\n")


@needs_bwrap
def test_disk_cap_limits_the_workspace() -> None:
    if os.geteuid() != 0:
        pytest.skip("the tmpfs workspace needs root (RLIMIT_FSIZE is used otherwise)")

    async def go():
        async with create_sandbox(SandboxSpec(disk_bytes=1 << 20)) as sb:
            small = await sb.exec("head -c 100000 /dev/zero > small")
            big = await sb.exec("head -c 3000000 /dev/zero > big")
            return small, big, sb.limits["disk"]

    small, big, how = arun(go())
    assert small.ok and how == "tmpfs"
    assert not big.ok and "No space left" in big.stderr


def test_local_backend_runs_in_a_host_temp_workspace() -> None:
    async def go():
        async with create_sandbox(SandboxSpec(files={"f.txt": "hi"}), backend="local") as sb:
            result = await sb.exec("pwd; cat f.txt")
            return result, sb.host_workspace

    result, workspace = arun(go())
    assert result.stdout == f"{workspace}\nhi"
    assert not workspace.exists()


@needs_bwrap
def test_sandboxes_are_recorded_while_open_and_forgotten_after_close() -> None:
    async def go():
        sb = await create_sandbox()
        live = {r.id for r in records()}
        await sb.close()
        await sb.close()  # idempotent
        with pytest.raises(SandboxError, match="closed"):
            await sb.exec("true")
        return sb.id, live, {r.id for r in records()}

    sid, live, after = arun(go())
    assert sid in live and sid not in after


@needs_bwrap
def test_pool_bounds_live_sandboxes_and_records_acquire_latency() -> None:
    async def go():
        async with SandboxPool(SandboxSpec(), warm=1, max_live=2) as pool:
            assert pool.stats().warm == 1
            a = await pool.acquire()
            b = await pool.acquire()
            with pytest.raises((TimeoutError, asyncio.TimeoutError)):
                await pool.acquire(timeout=0.3)  # both slots are taken
            await pool.release(a)
            c = await pool.acquire(timeout=10)
            assert (await c.exec("echo ok")).stdout == "ok\n"
            assert a.closed  # never handed out twice
            await pool.release(b)
            await pool.release(c)
            return pool.stats()

    stats = arun(go())
    assert stats.acquired == 3 and stats.in_use == 0
    assert stats.acquire_p50_ms > 0 and stats.live <= 2


def test_bad_input_gets_clear_errors() -> None:
    with pytest.raises(ValueError, match="memory_bytes"):
        SandboxSpec(memory_bytes=-1)
    with pytest.raises(ValueError, match="relative path"):
        SandboxSpec(files={"../escape": "x"})
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxSpec(timeout_s=0)
    with pytest.raises(ValueError, match="unknown sandbox backend 'vm'"):
        create_sandbox(backend="vm")
    with pytest.raises(TypeError, match="SandboxSpec"):
        create_sandbox({"network": True})  # type: ignore[arg-type]

    async def go():
        async with create_sandbox(backend="local") as sb:
            with pytest.raises(ValueError, match="timeout"):
                await sb.exec("true", timeout=0)
            with pytest.raises(TypeError, match="non-empty list"):
                await sb.exec([])
            with pytest.raises(ValueError, match="environment variable"):
                await sb.exec("true", env={"A=B": "x"})

    arun(go())
    assert SandboxSpec(env={"A": 1}).env == (("A", "1"),)
    assert hash(SandboxSpec(files={"a": "x"})) == hash(SandboxSpec(files={"a": b"x"}))


@needs_bwrap
def test_a_workspace_carries_its_cap_across_sandboxes() -> None:
    if os.geteuid() != 0:
        pytest.skip("a size-capped Workspace needs root (a tmpfs)")
    from skyrl_sdk.sandboxes import Workspace

    async def go(ws: Workspace):
        spec = SandboxSpec(workspace_dir=ws, disk_bytes=None)
        async with create_sandbox(spec) as agent:
            wrote = await agent.exec("echo kept > a.txt; head -c 3000000 /dev/zero > big")
            how = agent.limits["disk"]
        async with create_sandbox(spec) as grader:
            seen = await grader.exec("cat a.txt")
        return wrote, how, seen

    with Workspace.create(disk_bytes=1 << 20) as ws:
        wrote, how, seen = arun(go(ws))
    assert not wrote.ok and "No space left" in wrote.stderr and how == "tmpfs"
    assert seen.stdout == "kept\n"
