"""The HTTP retriever's own rules: its URL, its retry waits, an answer of the wrong shape."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")

from skyrl_sdk.tools.search import HttpRetriever, RetrievalError, RetryPolicy
from skyrl_sdk.tools.search.client import retrieve_url
from skyrl_sdk.tools.search.server import ServerThread
from skyrl_sdk.tools.search.types import RetrievalFailure


def test_the_url_gets_retrieve_only_when_it_names_no_path() -> None:
    assert retrieve_url("http://h:1") == "http://h:1/retrieve"
    assert retrieve_url("http://h:1/") == "http://h:1/retrieve"
    assert retrieve_url("https://h/api/search") == "https://h/api/search"
    with pytest.raises(ValueError, match="http"):
        retrieve_url("ftp://h/")


def test_retry_waits_double_up_to_their_bound() -> None:
    policy = RetryPolicy(backoff_s=0.5, max_backoff_s=1.5)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 1.5, 1.5]


def test_an_answer_that_is_not_search_r1_is_a_bad_response() -> None:
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/retrieve")
    def retrieve() -> dict[str, list[int]]:
        return {"result": [1, 2]}  # two entries for one query

    with ServerThread(app) as server, HttpRetriever(server.url) as client:
        assert client.retrieve([]) == []
        with pytest.raises(RetrievalError) as bad:
            client.retrieve(["tea"])
    assert bad.value.kind is RetrievalFailure.BAD_RESPONSE
