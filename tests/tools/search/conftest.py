from __future__ import annotations

from pathlib import Path

import pytest

from skyrl_sdk.tools.search import BM25Index, Document, build_index

DOCS = (
    Document("tea", "Tea", "Green tea is steeped in water that is not quite boiling."),
    Document("coffee", "Coffee", "Espresso is coffee brewed by forcing hot water through beans."),
    Document("bread", "Bread", "Sourdough bread rises with a culture of wild yeast."),
)
"""A corpus of three documents whose words barely overlap."""


@pytest.fixture
def tiny_index(tmp_path: Path) -> BM25Index:
    """`DOCS` indexed in a fresh directory."""
    build_index(DOCS, tmp_path / "index")
    index = BM25Index(tmp_path / "index")
    yield index
    index.close()
