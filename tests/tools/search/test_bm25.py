"""The local BM25 index: what it ranks first, what a query's terms are, its manifest."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyrl_sdk.tools.search import BM25Index, IndexManifest, SearchIndexError, query_terms
from skyrl_sdk.tools.search.bm25 import MAX_QUERY_TERMS

from .conftest import DOCS


def test_the_matching_document_ranks_first(tiny_index: BM25Index) -> None:
    assert tiny_index.num_docs == len(DOCS)
    (best, *rest) = tiny_index.search("wild yeast sourdough", topk=3)
    assert best.id == "bread" and best.title == "Bread" and best.text == DOCS[2].text
    assert all(best.score > p.score for p in rest)
    assert [p.id for p in tiny_index.search("espresso beans", topk=1)] == ["coffee"]
    assert tiny_index.search("zebra", topk=3) == []
    assert tiny_index.retrieve(["tea", "?!"], topk=1) == [tiny_index.search("tea", 1), []]
    with pytest.raises(ValueError, match="topk"):
        tiny_index.search("tea", topk=0)


def test_query_terms_are_lowercased_unique_words_and_bounded() -> None:
    assert query_terms("Tea, TEA and tea_time?") == ["tea", "and", "time"]
    assert len(query_terms(" ".join(f"w{i}" for i in range(200)))) == MAX_QUERY_TERMS


def test_the_manifest_describes_the_index_and_a_non_index_is_refused(
    tiny_index: BM25Index, tmp_path: Path
) -> None:
    manifest = IndexManifest.read(tmp_path / "index")
    assert manifest.documents == len(DOCS) and manifest.backend == "tantivy"
    with pytest.raises(SearchIndexError):
        BM25Index(tmp_path / "nowhere")
