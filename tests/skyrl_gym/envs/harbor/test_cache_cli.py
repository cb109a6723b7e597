"""`skyrl harbor cache list` and `skyrl harbor cache prune` over `$SKYRL_CACHE/harbor-roots`,
through the real CLI: key, size and last use of each built root; prune removes every root no
trial holds and keeps a held one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from skyrl_gym.envs.harbor.root_cache import RootCache

REPO = Path(__file__).parents[4]


def _cache_cli(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SKYRL_CACHE": str(cache), "COLUMNS": "200"}
    env.pop("SKYRL_HARBOR_ROOTS_MAX_BYTES", None)
    return subprocess.run(
        [sys.executable, "-m", "skyrl_gym", "harbor", "cache", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )


def _layer(size: int):
    def build(staging: Path) -> None:
        (staging / "usr").mkdir()
        (staging / "usr" / "blob").write_bytes(os.urandom(size))

    return build


def test_cache_list_and_prune(tmp_path: Path) -> None:
    cache_root = tmp_path / "cache"
    cache = RootCache(cache_root / "harbor-roots")
    cache.get("a" * 32, _layer(200_000))
    cache.get("b" * 32, _layer(50_000))
    os.utime(cache.directory / ("b" * 32) / ".complete", (1_700_000_000, 1_700_000_000))

    listed = _cache_cli(cache_root, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    doc = json.loads(listed.stdout)
    assert doc["directory"] == str(cache.directory)
    keys = [e["key"] for e in doc["entries"]]
    assert keys == ["b" * 32, "a" * 32], doc  # least recently used first
    sizes = {e["key"]: e["bytes"] for e in doc["entries"]}
    assert sizes["a" * 32] >= 200_000 > sizes["b" * 32] >= 50_000, sizes
    assert doc["entries"][0]["last_used"] == "2023-11-14T22:13:20+00:00", doc
    assert doc["total_bytes"] == sum(sizes.values())

    table = _cache_cli(cache_root, "list")
    assert table.returncode == 0, table.stderr
    assert "a" * 32 in table.stdout and "KiB" in table.stdout, table.stdout
    assert "2 root(s)" in table.stdout, table.stdout

    # A root a running trial holds is kept; the other is removed.
    with cache.hold("a" * 32):
        pruned = _cache_cli(cache_root, "prune", "--json")
    assert pruned.returncode == 0, pruned.stderr
    doc = json.loads(pruned.stdout)
    assert [e["key"] for e in doc["removed"]] == ["b" * 32], doc
    assert [e["key"] for e in doc["kept_in_use"]] == ["a" * 32], doc
    assert doc["freed_bytes"] == sizes["b" * 32]
    assert not (cache.directory / ("b" * 32)).exists()
    assert (cache.directory / ("a" * 32) / "usr" / "blob").is_file()

    readable = _cache_cli(cache_root, "prune")
    assert readable.returncode == 0, readable.stderr
    assert "removed 1 root(s)" in readable.stdout, readable.stdout
    assert [e["key"] for e in cache.entries()] == [], cache.entries()
    empty = json.loads(_cache_cli(cache_root, "list", "--json").stdout)
    assert empty["entries"] == [] and empty["total_bytes"] == 0


def test_cache_list_of_no_cache_and_bad_cap(tmp_path: Path) -> None:
    listed = _cache_cli(tmp_path / "nothing", "list")
    assert listed.returncode == 0, listed.stderr
    assert "0 root(s)" in listed.stdout, listed.stdout
    env_cap = {**os.environ, "SKYRL_CACHE": str(tmp_path), "SKYRL_HARBOR_ROOTS_MAX_BYTES": "lots"}
    bad = subprocess.run(
        [sys.executable, "-m", "skyrl_gym", "harbor", "cache", "prune"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env_cap,
    )
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "SKYRL_HARBOR_ROOTS_MAX_BYTES" in bad.stdout, bad.stdout
