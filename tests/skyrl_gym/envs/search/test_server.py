from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from skyrl_gym.envs.search.env import SearchEnv, bundled_tasks
from skyrl_sdk.tools.search import (
    BM25Index,
    HttpRetriever,
    RetrievalError,
    RetrievalFailure,
    RetryPolicy,
)

API_KEY = "search-test-key"
"""The key the module's server requires (clients read it from $SKYRL_API_KEY)."""
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_url(index_dir: Path) -> Iterator[str]:
    """`skyrl search serve INDEX --port P --api-key KEY` in a subprocess, as a user would
    start it."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "skyrl_gym.cli", "search", "serve", str(index_dir),
         "--port", str(port), "--api-key", API_KEY],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"skyrl search serve did not start:\n{out}")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_env_over_http_matches_the_local_index(
    server_url: str, index: BM25Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKYRL_API_KEY", API_KEY)  # the env's HttpRetriever sends it
    local = SearchEnv(retriever=index)
    remote = SearchEnv(search_url=server_url)
    for task in bundled_tasks()[::13]:
        steps = [f"<search>{task['question']}</search>", "<search>hash table</search>",
                 f"<answer>{task['answers'][0]}</answer>"]  # fmt: skip
        for env in (local, remote):
            env.reset(options={"task": task})
        for action in steps:
            a, b = local.step(action), remote.step(action)
            assert a[:4] == b[:4]
            assert [s["doc_ids"] for s in a[4].get("search", [])] == [
                s["doc_ids"] for s in b[4].get("search", [])
            ]
    remote.close()


def test_search_r1_wire_format(server_url: str, index: BM25Index) -> None:
    body = {"queries": ["largest elements heapq", ""], "topk": 2}
    assert httpx.post(f"{server_url}/retrieve", json=body).status_code == 401
    result = httpx.post(f"{server_url}/retrieve", json=body, headers=AUTH).json()["result"]
    assert len(result) == 2 and result[1] == []
    doc = result[0][0]
    assert doc["id"] == "heapq.nlargest"
    assert doc["contents"] == f'"{doc["title"]}"\n{doc["text"]}'
    scored_body = {**body, "return_scores": True}
    scored = httpx.post(f"{server_url}/retrieve", json=scored_body, headers=AUTH).json()
    assert scored["result"][0][0]["score"] == pytest.approx(
        index.search(body["queries"][0], 2)[0].score
    )
    client = HttpRetriever(server_url + "/retrieve", api_key=API_KEY)
    with client, pytest.raises(RetrievalError) as e:
        client.retrieve(["x"], topk=10_000)
    assert e.value.kind is RetrievalFailure.BAD_REQUEST and "422" in str(e.value)
    with HttpRetriever(server_url, api_key="wrong") as client, pytest.raises(RetrievalError) as e:
        client.retrieve(["x"])
    assert e.value.kind is RetrievalFailure.BAD_REQUEST and "401" in str(e.value)


def _mock(statuses: list[int], calls: list[int]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        status = statuses[min(len(calls), len(statuses)) - 1]
        if status == 0:
            raise httpx.ReadTimeout("slow", request=request)
        doc = {"id": "1", "contents": '"T"\nbody'}
        return httpx.Response(status, json={"result": [[{"document": doc, "score": 2.5}]]})

    return httpx.MockTransport(handler)


def test_client_retries_then_succeeds_or_says_why() -> None:
    fast = RetryPolicy(attempts=3, backoff_s=0.0)
    calls: list[int] = []
    client = HttpRetriever(
        "http://search.test", retry=fast, transport=_mock([503, 502, 200], calls)
    )
    [[hit]] = client.retrieve(["q"], 3)
    assert (hit.id, hit.title, hit.text, hit.score, len(calls)) == ("1", "T", "body", 2.5, 3)

    calls.clear()
    client = HttpRetriever("http://search.test", retry=fast, transport=_mock([500], calls))
    with pytest.raises(RetrievalError, match="after 3 attempts: HTTP 500") as e:
        client.retrieve(["q"], 3)
    assert e.value.kind is RetrievalFailure.SERVER_ERROR and len(calls) == 3

    calls.clear()
    client = HttpRetriever("http://search.test", retry=fast, transport=_mock([0], calls))
    with pytest.raises(RetrievalError) as e:
        client.retrieve(["q"], 3)
    assert e.value.kind is RetrievalFailure.TIMEOUT

    calls.clear()
    client = HttpRetriever("http://search.test", retry=fast, transport=_mock([404], calls))
    with pytest.raises(RetrievalError) as e:
        client.retrieve(["q"], 3)
    assert e.value.kind is RetrievalFailure.BAD_REQUEST and len(calls) == 1
    assert client.url == "http://search.test/retrieve"
    assert RetryPolicy(backoff_s=1.0, max_backoff_s=3.0).delay(3) == 3.0
