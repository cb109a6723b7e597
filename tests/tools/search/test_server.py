"""The Search-R1 server over an index, asked by the HTTP client: the same passages as the
local index, health, topk bounds and the API key."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")

from skyrl_sdk.tools.search import BM25Index, HttpRetriever, RetrievalError, RetryPolicy
from skyrl_sdk.tools.search.server import ServerThread, create_app
from skyrl_sdk.tools.search.types import RetrievalFailure


def test_the_client_gets_what_the_local_index_gives(tiny_index: BM25Index) -> None:
    app = create_app(tiny_index, max_topk=2, documents=tiny_index.num_docs)
    with ServerThread(app) as server, HttpRetriever(server.url) as client:
        assert client.retrieve(["green tea", "yeast"], topk=2) == tiny_index.retrieve(
            ["green tea", "yeast"], topk=2
        )
        assert httpx.get(f"{server.url}/health").json() == {"status": "ok", "documents": 3}
        with pytest.raises(RetrievalError) as too_many:
            client.retrieve(["tea"], topk=3)
        assert too_many.value.kind is RetrievalFailure.BAD_REQUEST


def test_a_keyed_server_refuses_a_client_without_the_key(tiny_index: BM25Index) -> None:
    app = create_app(tiny_index, api_key="s3cret")
    with ServerThread(app) as server:
        with HttpRetriever(server.url, api_key="s3cret") as keyed:
            assert [p.id for p in keyed.retrieve(["espresso"], topk=1)[0]] == ["coffee"]
        with (
            HttpRetriever(server.url, api_key="", retry=RetryPolicy(attempts=1)) as anonymous,
            pytest.raises(RetrievalError) as refused,
        ):
            anonymous.retrieve(["espresso"], topk=1)
        assert refused.value.kind is RetrievalFailure.BAD_REQUEST and "401" in str(refused.value)
