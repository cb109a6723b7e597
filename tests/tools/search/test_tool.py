"""The `search` tool: one result per query, never raising; empty queries are not sent."""

from __future__ import annotations

import socket

import pytest

from skyrl_sdk.tools.search import BM25Index, HttpRetriever, RetryPolicy, SearchTool
from skyrl_sdk.tools.search.tool import SearchOutcome


def test_each_query_gets_its_outcome(tiny_index: BM25Index) -> None:
    tool = SearchTool(tiny_index, topk=1)
    found, nothing, empty = tool.run(["green tea", "zebra", " ?! "])
    assert found.outcome is SearchOutcome.OK and [p.id for p in found.passages] == ["tea"]
    assert found.message.startswith("Doc 1 (Title: Tea) Green tea")
    assert nothing.outcome is SearchOutcome.NO_RESULTS and "try other keywords" in nothing.message
    assert empty.outcome is SearchOutcome.EMPTY_QUERY and empty.duration_s == 0.0
    assert found.to_json()["doc_ids"] == ["tea"] and found.to_json()["outcome"] == "ok"
    assert tool.tool.name == "search" and tool.tool.fn(query="espresso").startswith("Doc 1")
    with pytest.raises(ValueError, match="topk"):
        SearchTool(tiny_index, topk=0)


def test_a_retriever_that_fails_is_a_failed_result_not_an_exception() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with HttpRetriever(f"http://127.0.0.1:{port}", retry=RetryPolicy(attempts=1)) as down:
        (result,) = SearchTool(down).run(["tea"])
    assert result.outcome is SearchOutcome.FAILED and result.passages == ()
    assert result.message.startswith("Search error (unreachable): ")
