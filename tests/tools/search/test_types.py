"""Corpus rows, corpus files and the passages shown to the model."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyrl_sdk.tools.search.types import (
    CorpusError,
    Document,
    Passage,
    document_from_json,
    format_passages,
    read_corpus,
)


def test_documents_read_both_row_shapes() -> None:
    assert document_from_json({"id": 7, "title": "T", "text": "body"}) == Document("7", "T", "body")
    search_r1 = {"id": "d1", "contents": '"The Title"\nfirst line\nsecond'}
    assert document_from_json(search_r1) == Document("d1", "The Title", "first line\nsecond")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ([1], "must be a JSON object"),
        ({"id": True, "text": "t"}, "no usable 'id'"),
        ({"id": "", "text": "t"}, "no usable 'id'"),
        ({"id": "a", "title": 3, "text": "t"}, "'title' must be a string"),
        ({"id": "a"}, "neither a 'text' nor a 'contents'"),
    ],
)
def test_malformed_rows_say_what_is_wrong(row: object, message: str) -> None:
    with pytest.raises(CorpusError, match=message):
        document_from_json(row)


def test_read_corpus_skips_blank_lines_and_names_the_bad_line(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "text": "x"}\n\n{"id": "b", "text": "y"}\nnot json\n')
    docs = read_corpus(corpus)
    assert [next(docs).id, next(docs).id] == ["a", "b"]
    with pytest.raises(CorpusError, match=r"c\.jsonl:4: not valid JSON"):
        next(docs)
    with pytest.raises(CorpusError, match="corpus not found"):
        list(read_corpus(tmp_path / "missing.jsonl"))


def test_passages_are_numbered_squashed_and_cut() -> None:
    passages = [Passage("a", "A", "one\n  two", 2.0), Passage("b", "B", "x" * 30, 1.0)]
    text = format_passages(passages, max_chars=10)
    assert text == "Doc 1 (Title: A) one two\nDoc 2 (Title: B) xxxxxxxxxx ..."
    assert passages[0].to_json() == {"id": "a", "title": "A", "text": "one\n  two", "score": 2.0}
