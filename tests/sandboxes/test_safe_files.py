"""`read_regular_file`, `grading_env` and `Workspace`: the shared hardening helpers."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from skyrl_sdk.sandboxes import (
    DEFAULT_DISK_BYTES,
    DiskCap,
    SandboxSpec,
    UnsafeFileError,
    Workspace,
    grading_env,
    read_regular_file,
    records,
)
from skyrl_sdk.sandboxes.grading import GIT_HARDENING
from skyrl_sdk.sandboxes.spec import DEFAULT_PATH


def test_reads_a_regular_file_capped_from_the_head_or_the_tail(tmp_path: Path) -> None:
    path = tmp_path / "reward.txt"
    path.write_bytes(b"0123456789")
    assert read_regular_file(path, max_bytes=100) == b"0123456789"
    assert read_regular_file(str(path), max_bytes=4) == b"0123"
    assert read_regular_file(path, max_bytes=4, tail=True) == b"6789"
    assert read_regular_file(path, max_bytes=0) == b""
    assert read_regular_file("reward.txt", max_bytes=3, under=tmp_path) == b"012"


def test_large_file_is_read_only_up_to_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "big"
    with open(path, "wb") as f:
        f.truncate(8 << 30)  # sparse: 8 GiB announced, nothing on disk
    assert len(read_regular_file(path, max_bytes=1000)) == 1000
    assert read_regular_file(path, max_bytes=10, tail=True) == b"\0" * 10


def test_symlinked_file_or_directory_is_refused_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    (tmp_path / "link").symlink_to(secret)
    (tmp_path / "dirlink").symlink_to(tmp_path)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for bad in ("link", "dirlink/secret", "dangling"):
        with pytest.raises(UnsafeFileError):
            read_regular_file(tmp_path / bad, max_bytes=100)
        with pytest.raises(UnsafeFileError):
            read_regular_file(bad, max_bytes=100, under=tmp_path)
    assert isinstance(UnsafeFileError(), OSError)


def test_fifo_directory_and_device_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done = threading.Event()

    def attempt() -> None:
        with pytest.raises(UnsafeFileError):
            read_regular_file(fifo, max_bytes=10)
        done.set()

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(5)
    assert done.is_set(), "opening a FIFO blocked"
    with pytest.raises(UnsafeFileError):
        read_regular_file(tmp_path, max_bytes=10)
    with pytest.raises(UnsafeFileError):
        read_regular_file("/dev/zero", max_bytes=10)


def test_missing_file_and_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "absent", max_bytes=10)
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "absent" / "deeper", max_bytes=10)
    with pytest.raises(ValueError):
        read_regular_file(tmp_path / "x", max_bytes=-1)
    with pytest.raises(ValueError):
        read_regular_file("../etc/passwd", max_bytes=10, under=tmp_path)


def test_grading_env_wins_over_the_task_variables() -> None:
    env = grading_env({"HOME": "/app", "PATH": "/app/bin", "PYTHONNOUSERSITE": "", "TASK": "x"})
    assert env == {
        "TASK": "x",
        "HOME": "/tmp",
        "PATH": DEFAULT_PATH,
        "PYTHONNOUSERSITE": "1",
        "PYTHONSAFEPATH": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        **GIT_HARDENING,
    }
    assert grading_env()["HOME"] == "/tmp"


def test_spec_defaults_cap_disk_cpu_and_cpu_time() -> None:
    spec = SandboxSpec()
    assert (spec.disk_bytes, spec.cpus, spec.cpu_time_s) == (1 << 30, 1.0, 600.0)
    assert (spec.memory_bytes, spec.pids, spec.timeout_s, spec.output_limit_bytes) == (
        512 << 20,
        256,
        30.0,
        256 * 1024,
    )
    assert DEFAULT_DISK_BYTES == 1 << 30
    # A caller's workspace carries its own cap: no longer an error with disk_bytes set.
    assert SandboxSpec(workspace_dir="/tmp/x", disk_bytes=1 << 20).workspace_dir == "/tmp/x"


def test_workspace_is_recorded_capped_and_removed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SKYRL_SANDBOX_STATE", str(tmp_path / "state"))
    with Workspace.create("skyrl-ws-test-", disk_bytes=1 << 20) as ws:
        assert ws.path.is_dir() and ws.path.name.startswith("skyrl-ws-test-")
        [record] = records()
        assert record.workspace == str(ws.path) and record.owner_pid == os.getpid()
        assert SandboxSpec(workspace_dir=ws).workspace_dir == str(ws.path)
        if os.geteuid() == 0:
            assert ws.disk_cap is DiskCap.TMPFS
            (ws.path / "small").write_bytes(b"x" * 1000)
            with pytest.raises(OSError) as err, open(ws.path / "big", "wb") as f:
                f.write(b"x" * (2 << 20))
            assert err.value.errno == 28  # ENOSPC
        else:
            assert ws.disk_cap is DiskCap.NONE
    assert not ws.path.exists() and records() == [] and ws.closed
    ws.close()  # idempotent


def test_workspace_left_open_is_removed_at_interpreter_exit(tmp_path: Path) -> None:
    code = "from skyrl_sdk.sandboxes import Workspace; print(Workspace.create().path)"
    env = {**os.environ, "SKYRL_SANDBOX_STATE": str(tmp_path / "state")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert not Path(out.stdout.strip()).exists()
    assert not list((tmp_path / "state").iterdir())
