"""Issue 25: the cache of built task roots (`root_cache.RootCache`): reuse, one build under
concurrency (fcntl lock), size cap, prune, and keys that change with every input."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from skyrl_gym.envs.harbor.root_cache import CacheOutcome, RootCache, build_key


def _build_counting(counter: Path, size: int = 0, delay: float = 0.0):
    def build(staging: Path) -> None:
        with counter.open("a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(delay)
        (staging / "usr").mkdir()
        (staging / "usr" / "layer.bin").write_bytes(os.urandom(size) if size else b"x")

    return build


def test_second_get_reuses_the_built_layer(tmp_path: Path) -> None:
    cache = RootCache(tmp_path / "roots")
    counter = tmp_path / "builds"
    first = cache.get("k1", _build_counting(counter))
    second = cache.get("k1", _build_counting(counter))
    assert (first.outcome, second.outcome) == (CacheOutcome.BUILT, CacheOutcome.HIT)
    assert second.path == first.path and (second.path / "usr" / "layer.bin").is_file()
    assert len(counter.read_text().splitlines()) == 1


def test_a_failed_build_caches_nothing(tmp_path: Path) -> None:
    cache = RootCache(tmp_path / "roots")

    def broken(staging: Path) -> None:
        (staging / "half").write_text("x")
        raise RuntimeError("step failed")

    with pytest.raises(RuntimeError):
        cache.get("k1", broken)
    assert cache.entries() == []
    assert cache.get("k1", _build_counting(tmp_path / "c")).outcome is CacheOutcome.BUILT


def _worker(directory: str, counter: str) -> str:
    cache = RootCache(Path(directory))
    return cache.get("shared", _build_counting(Path(counter), delay=0.3)).outcome.value


def test_four_trials_build_once(tmp_path: Path) -> None:
    """Four at once (`-n 4`): each opens its own lock file description, so flock excludes
    them from each other as it does separate processes."""
    counter = tmp_path / "builds"
    with ThreadPoolExecutor(4) as pool:
        outcomes = list(
            pool.map(lambda _: _worker(str(tmp_path / "roots"), str(counter)), range(4))
        )
    assert sorted(outcomes) == ["built", "hit", "hit", "hit"]
    assert len(counter.read_text().splitlines()) == 1


def test_size_cap_evicts_least_recently_used_but_not_held(tmp_path: Path) -> None:
    cache = RootCache(tmp_path / "roots", max_bytes=3 * 64 * 1024)
    for key in ("a", "b"):
        cache.get(key, _build_counting(tmp_path / "c", size=64 * 1024))
        time.sleep(0.02)
    with cache.hold("a"):
        # Over the cap: a is the oldest but held, so b goes; c is the one just built.
        cache.get("c", _build_counting(tmp_path / "c", size=2 * 64 * 1024))
    assert sorted(k for k, _, _ in cache.entries()) == ["a", "c"]
    # Unheld, least recently used first: a, then c, until d alone is under the cap.
    cache.get("d", _build_counting(tmp_path / "c", size=2 * 64 * 1024))
    assert [k for k, _, _ in cache.entries()] == ["d"]


def test_prune_removes_all_unheld_layers(tmp_path: Path) -> None:
    cache = RootCache(tmp_path / "roots")
    for key in ("a", "b"):
        cache.get(key, _build_counting(tmp_path / "c"))
    (cache.directory / ".build-dead-xyz").mkdir()  # a crashed build's staging
    with cache.hold("b"):
        assert cache.prune() == ["a"]
    assert [k for k, _, _ in cache.entries()] == ["b"]
    assert not (cache.directory / ".build-dead-xyz").exists()
    assert cache.prune() == ["b"] and cache.entries() == []


def test_key_changes_with_dockerfile_context_and_base(tmp_path: Path) -> None:
    env = tmp_path / "environment"
    env.mkdir()
    dockerfile = env / "Dockerfile"
    dockerfile.write_text("FROM x\nRUN echo hi > /opt/a\n")
    (env / "data.txt").write_text("1")
    base = build_key(dockerfile, env, None)
    assert build_key(dockerfile, env, None) == base
    (env / "data.txt").write_text("2")
    changed_context = build_key(dockerfile, env, None)
    dockerfile.write_text("FROM x\nRUN echo bye > /opt/a\n")
    changed_dockerfile = build_key(dockerfile, env, None)
    (tmp_path / "rootfs").mkdir()
    other_base = build_key(dockerfile, env, str(tmp_path / "rootfs"))
    assert len({base, changed_context, changed_dockerfile, other_base}) == 4


def test_bad_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a cache key"):
        RootCache(tmp_path).get("../escape", _build_counting(tmp_path / "c"))
