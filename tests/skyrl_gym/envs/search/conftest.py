from __future__ import annotations

from pathlib import Path

import pytest

from skyrl_gym.envs.search.env import CORPUS_FILE
from skyrl_sdk.tools.search import BM25Index, build_index


@pytest.fixture(scope="session")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled corpus indexed once per test session, outside the user's cache."""
    out = tmp_path_factory.mktemp("search") / "index"
    build_index(CORPUS_FILE, out)
    return out


@pytest.fixture(scope="session")
def index(index_dir: Path) -> BM25Index:
    return BM25Index(index_dir)
