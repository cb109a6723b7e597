from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyrl_gym.envs.search.env import CORPUS_FILE, DATA_DIR, bundled_tasks
from skyrl_sdk.tools.search import (
    BM25Index,
    CorpusError,
    SearchIndexError,
    build_index,
    read_corpus,
)


def test_bundled_data_is_small_and_every_answer_is_in_its_document() -> None:
    tasks = bundled_tasks()
    assert len(tasks) >= 100
    data = [DATA_DIR / n for n in ("corpus.jsonl", "tasks.jsonl", "corpus_manifest.json")]
    assert sum(f.stat().st_size for f in data) < 3_000_000
    docs = {d.id: d for d in read_corpus(CORPUS_FILE)}
    for task in tasks:
        doc = docs[task["doc_id"]]
        assert any(a in doc.title or a in doc.text for a in task["answers"]), task["task_id"]


def test_search_ranks_the_documented_function_first(index: BM25Index) -> None:
    hits = index.search("Find the n largest elements in a dataset", topk=3)
    assert hits[0].id == "heapq.nlargest"
    assert hits[0].title == "heapq.nlargest"
    assert "n largest" in hits[0].text
    assert hits[0].score >= hits[1].score >= hits[2].score > 0
    assert index.manifest.documents == index.num_docs > 2000


def test_recall_at_3_on_the_bundled_questions(index: BM25Index) -> None:
    tasks = bundled_tasks()
    found = sum(t["doc_id"] in [p.id for p in index.search(t["question"], 3)] for t in tasks)
    assert found / len(tasks) >= 0.9


@pytest.mark.parametrize(
    "query", ["", "   ", "!!! ???", "AND OR NOT", 'title:x "unclosed (', "\x00\ud800", "x" * 5000]
)
def test_odd_queries_never_raise(index: BM25Index, query: str) -> None:
    hits = index.search(query, topk=3)
    assert isinstance(hits, list) and len(hits) <= 3


def test_build_refuses_to_clobber(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "title": "A", "text": "alpha beta"}) + "\n")
    out = tmp_path / "idx"
    build_index(corpus, out)
    with pytest.raises(SearchIndexError, match="already holds an index"):
        build_index(corpus, out)
    build_index(corpus, out, overwrite=True)
    other = tmp_path / "precious"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    with pytest.raises(SearchIndexError, match="not a search index"):
        build_index(corpus, other, overwrite=True)
    assert (other / "keep.txt").exists()
    with pytest.raises(SearchIndexError, match="not a search index"):
        BM25Index(other)


def test_search_r1_contents_corpus_and_errors_name_the_line(tmp_path: Path) -> None:
    corpus = tmp_path / "wiki.jsonl"
    rows = [
        {"id": "0", "contents": '"Paris"\nParis is the capital of France.'},
        {"id": "1", "contents": '"Berlin"\nBerlin is the capital of Germany.'},
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    build_index(corpus, tmp_path / "idx")
    hit = BM25Index(tmp_path / "idx").search("capital of Germany", 1)[0]
    assert (hit.id, hit.title, hit.text) == ("1", "Berlin", "Berlin is the capital of Germany.")

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "0", "text": "ok"}) + "\n" + '{"id": "1"}\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2"):
        build_index(bad, tmp_path / "idx2")
    assert not (tmp_path / "idx2").exists()
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"id": "0", "text": "a"}\n{"id": "0", "text": "b"}\n')
    with pytest.raises(CorpusError, match="duplicate"):
        build_index(dup, tmp_path / "idx3")
