"""`harbor.host`: size clamps, the sparse-aware charged copy, and the log-tree copy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from skyrl_gym.envs.harbor.host import (
    CopyError,
    CopyJob,
    HostMaxima,
    charged_copy,
    clamp_task_sizes,
    copy_untrusted_tree,
)
from skyrl_gym.envs.harbor.task import EnvironmentSettings
from tests.conftest import arun

MiB = 1 << 20


def _copy(jobs: list[CopyJob], dest: Path, budget: int = 1 << 30) -> list[str]:
    return arun(charged_copy(jobs, dest, budget_bytes=budget, timeout_s=60), 90)


def test_clamps_name_the_task_value_and_the_clamp() -> None:
    maxima = HostMaxima(memory_bytes=4096 * MiB, disk_bytes=1024 * MiB, cpus=2.0, disk_reason="r")
    big = EnvironmentSettings(memory_mb=10**8, storage_mb=10**8, cpus=64.0)
    sizes = clamp_task_sizes(big, maxima)
    assert (sizes.memory_mb, sizes.storage_mb, sizes.cpus) == (4096, 1024, 2.0)
    assert any("memory_mb=100000000 clamped to 4096 MiB" in n for n in sizes.notes)
    assert any("storage_mb=100000000 clamped to 1024 MiB (r)" in n for n in sizes.notes)
    assert any("cpus=64 clamped to 2" in n for n in sizes.notes)
    small = clamp_task_sizes(EnvironmentSettings(memory_mb=512, storage_mb=64), maxima)
    assert (small.memory_mb, small.storage_mb, small.cpus, small.notes) == (512, 64, None, ())
    host = HostMaxima.detect()
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert host.memory_bytes <= total // 2 and host.disk_bytes > 0


def test_copy_keeps_holes_and_makes_zero_runs_holes(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    with open(src, "wb") as f:
        f.write(b"x" * MiB)
        f.write(bytes(8 * MiB))  # written zeros: left a hole in the copy
        f.write(b"y" * MiB)
        f.truncate(64 * MiB)  # a real hole at the end
    dest = tmp_path / "dest"
    dest.mkdir()
    assert _copy([CopyJob(src, "sub/out.bin", tree=False)], dest) == []
    out = dest / "sub" / "out.bin"
    assert out.stat().st_size == 64 * MiB
    assert out.stat().st_blocks * 512 <= 3 * MiB  # the two data MiB, not 64
    with open(src, "rb") as a, open(out, "rb") as b:
        while chunk := a.read(MiB):
            assert chunk == b.read(MiB)


def test_copy_replaces_a_link_and_refuses_a_link_on_the_way(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("host file\n")
    victim_dir = tmp_path / "victim-dir"
    victim_dir.mkdir()
    src = tmp_path / "payload"
    src.write_text("payload\n")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "file").symlink_to(victim)
    (dest / "dir").symlink_to(victim_dir)
    _copy([CopyJob(src, "file", tree=False)], dest)
    assert victim.read_text() == "host file\n"
    assert not (dest / "file").is_symlink() and (dest / "file").read_text() == "payload\n"
    with pytest.raises(CopyError, match="a link or not a directory"):
        _copy([CopyJob(src, "dir/x", tree=False)], dest)
    assert list(victim_dir.iterdir()) == []


def test_copy_tree_skips_fifos_keeps_links_and_keeps_to_its_budget(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f.txt").write_text("f\n")
    (tree / "link").symlink_to("/etc/passwd")
    os.mkfifo(tree / "pipe")  # a FIFO would block a naive copy forever
    dest = tmp_path / "dest"
    dest.mkdir()
    notes = _copy([CopyJob(tree, "into", tree=True)], dest)
    assert (dest / "into" / "a" / "b" / "f.txt").read_text() == "f\n"
    assert os.readlink(dest / "into" / "link") == "/etc/passwd"
    assert not (dest / "into" / "pipe").exists()
    assert any("pipe" in n and "skipped" in n for n in notes), notes
    big = tmp_path / "big"
    big.write_bytes(b"z" * (3 * MiB))
    with pytest.raises(CopyError, match="larger than the workspace's cap"):
        _copy([CopyJob(big, "big", tree=False)], dest, budget=MiB)


def test_log_tree_copy_names_what_it_cuts(tmp_path: Path) -> None:
    src = tmp_path / "logs"
    deep = src / ("a/" * 200)
    deep.mkdir(parents=True)
    (deep / "leaf.txt").write_text("leaf\n")
    (src / "top.txt").write_text("top\n")
    (src / "big.txt").write_bytes(b"b" * 5000)
    (src / "link").symlink_to("/etc/shadow")
    os.mkfifo(src / "pipe")
    many = src / "many"
    many.mkdir()
    for i in range(30):
        (many / f"f{i}").write_text("x")
    dest = tmp_path / "out"
    notes: list[str] = []
    copy_untrusted_tree(src, dest, "agent", budget=[1 << 20], file_max_bytes=1000, notes=notes)
    copy_untrusted_tree(
        many,
        tmp_path / "out-many",
        "many",
        budget=[1 << 20],
        file_max_bytes=10,
        notes=notes,
        max_entries=25,
    )
    text = "\n".join(notes)
    assert (dest / "top.txt").read_text() == "top\n"
    assert os.readlink(dest / "link") == "/etc/shadow"
    assert (dest / "big.txt").stat().st_size == 1000 and "agent/big.txt: cut at 1000" in text
    assert "agent/pipe: not a regular file" in text
    assert "deeper than 64 levels; not copied" in text and "agent/a/a/" in text
    assert "more than 25 log entries" in text
