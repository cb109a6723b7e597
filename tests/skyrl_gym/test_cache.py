"""build_once: artefacts appear whole, once, even when builders race or fail."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from skyrl_gym.cache import build_once


def test_racing_builders_leave_one_complete_directory(tmp_path):
    target = tmp_path / "index"

    def build(path: Path) -> None:
        path.mkdir()
        for i in range(50):
            (path / f"part{i}").write_text(str(i))

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: build_once(target, build), range(8)))
    assert results == [target] * 8
    assert sorted(p.name for p in target.iterdir()) == sorted(f"part{i}" for i in range(50))
    assert [p.name for p in tmp_path.iterdir()] == ["index"]  # no staging left behind


def test_an_existing_target_is_not_rebuilt(tmp_path):
    target = tmp_path / "db.sqlite"
    target.write_text("built")
    build_once(target, lambda path: pytest.fail("must not rebuild"))
    assert target.read_text() == "built"


def test_a_failed_build_leaves_nothing(tmp_path):
    target = tmp_path / "db.sqlite"

    def broken(path: Path) -> None:
        path.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        build_once(target, broken)
    assert list(tmp_path.iterdir()) == []
