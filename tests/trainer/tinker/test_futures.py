"""Futures: a long-poll is answered as soon as its request settles, a bounded one says "try
again" while the request runs (and the SDK keeps polling until it gets the result), and settled
results are read from memory yet kept in SQLite for a restart."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest

from skyrl_sdk.trainer.tinker.store import DB_NAME, FutureState, FutureStore
from tests.trainer.tinker.conftest import API_KEY, AUTH

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402


def _finish_later(store: FutureStore, request_id: str, result: object, delay: float) -> None:
    def settle() -> None:
        time.sleep(delay)
        store.finish(request_id, result)

    threading.Thread(target=settle, daemon=True).start()


def test_a_poll_is_answered_when_its_request_settles_not_at_its_timeout(tmp_path: Path) -> None:
    store = FutureStore(tmp_path / DB_NAME)

    async def poll() -> tuple[FutureState, object, float]:
        store.bind(asyncio.get_running_loop())
        request_id = store.create("sample", None)
        _finish_later(store, request_id, {"sequences": [1, 2]}, 0.05)  # from another thread
        started = time.monotonic()
        record = await store.wait(request_id, timeout=120)
        assert record is not None
        return record.state, record.result, time.monotonic() - started

    state, result, waited = asyncio.run(poll())
    assert state is FutureState.DONE and result == {"sequences": [1, 2]}
    assert waited < 60  # woken by the settle, long before the 120 s bound


def test_a_bounded_poll_of_a_running_request_returns_it_pending(tmp_path: Path) -> None:
    store = FutureStore(tmp_path / DB_NAME)

    async def poll() -> FutureState:
        store.bind(asyncio.get_running_loop())
        record = await store.wait(store.create("forward_backward", "m"), timeout=0.05)
        assert record is not None
        return record.state

    assert asyncio.run(poll()) is FutureState.PENDING


def test_settled_results_outlive_the_memory_window_and_a_restart(tmp_path: Path) -> None:
    store = FutureStore(tmp_path / DB_NAME, keep=2)
    ids = [store.create("forward_backward", "m") for _ in range(3)]
    for i, request_id in enumerate(ids):
        store.finish(request_id, {"loss": i})
    pending = store.create("sample", None)
    assert not store.cancel(ids[0])  # settled already: the first outcome stays
    # The oldest left the in-memory window: read back from SQLite, the same result.
    assert [store.get(i).result for i in ids] == [{"loss": 0}, {"loss": 1}, {"loss": 2}]
    assert store.get("req-unknown") is None
    store.close()
    restarted = FutureStore(tmp_path / DB_NAME)
    assert [restarted.get(i).state for i in ids] == [FutureState.DONE] * 3
    assert restarted.get(ids[2]).result == {"loss": 2}
    assert restarted.get(pending).state is FutureState.LOST


def test_a_short_poll_bound_says_try_again_and_the_sdk_still_gets_the_result(
    tmp_path: Path,
) -> None:
    from skyrl_sdk.trainer.tinker.cli import TINY_NAME, default_models
    from skyrl_sdk.trainer.tinker.server import ServerConfig, ServerThread

    config = ServerConfig(
        models=default_models(), state_dir=tmp_path, poll_timeout_s=0.1, api_key=API_KEY
    )
    long = {"max_tokens": 1000, "stop": [], "seed": 0}
    prompt = {"chunks": [{"type": "encoded_text", "tokens": [5, 6, 7]}]}
    with ServerThread(config) as server:
        with httpx.Client(base_url=server.base_url, timeout=60, headers=AUTH) as c:
            body = {"base_model": TINY_NAME, "prompt": prompt, "sampling_params": long}
            request_id = c.post("/api/v1/asample", json=body).json()["request_id"]
            polls = []
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                polls.append(c.post("/api/v1/retrieve_future", json={"request_id": request_id}))
                assert polls[-1].status_code == 200
                if polls[-1].json().get("type") != "try_again":
                    break
            assert polls[0].json() == {
                "type": "try_again",
                "request_id": request_id,
                "queue_state": "active",
            }
            assert len(polls[-1].json()["sequences"][0]["tokens"]) == 1000
            again = c.post("/api/v1/retrieve_future", json={"request_id": request_id}).json()
            assert again == polls[-1].json()  # a settled result can be fetched again

        service = tinker.ServiceClient(base_url=server.base_url, api_key=API_KEY)
        client = service.create_sampling_client(base_model=TINY_NAME)
        client = client.result() if hasattr(client, "result") else client
        params = types.SamplingParams(max_tokens=1000, stop=[], seed=0)
        out = client.sample(types.ModelInput.from_ints([5, 6, 7]), 1, params).result()
        assert len(out.sequences[0].tokens) == 1000


def test_a_polled_sample_outlives_the_abandon_timeout_and_an_unpolled_one_does_not(
    tmp_path: Path,
) -> None:
    """`abandon_after_s` cancels only what nobody polls: the SDK's long polls (short here)
    keep a sample that takes several abandon periods alive to its end; the same request left
    unpolled is cancelled, and the cancellation says why."""
    from skyrl_sdk.trainer.tinker.cli import TINY_NAME, default_models
    from skyrl_sdk.trainer.tinker.server import ServerConfig, ServerThread

    config = ServerConfig(
        models=default_models(),
        state_dir=tmp_path,
        poll_timeout_s=0.2,
        api_key=API_KEY,
        abandon_after_s=0.5,
    )
    with ServerThread(config) as server:
        service = tinker.ServiceClient(base_url=server.base_url, api_key=API_KEY)
        client = service.create_sampling_client(base_model=TINY_NAME)
        client = client.result() if hasattr(client, "result") else client
        params = types.SamplingParams(max_tokens=1500, stop=[], seed=0)
        started = time.monotonic()
        out = client.sample(types.ModelInput.from_ints([5, 6, 7]), 4, params).result()
        assert [len(s.tokens) for s in out.sequences] == [1500] * 4
        took = time.monotonic() - started
        svc = server.app.state.service
        body = {
            "base_model": TINY_NAME,
            "num_samples": 4,
            "prompt": {"chunks": [{"type": "encoded_text", "tokens": [5, 6, 7]}]},
            "sampling_params": {"max_tokens": 1500, "stop": [], "seed": 0},
        }
        with httpx.Client(base_url=server.base_url, timeout=60, headers=AUTH) as c:
            request_id = c.post("/api/v1/asample", json=body).json()["request_id"]
            deadline = time.monotonic() + 30
            while svc.store.get(request_id).state is FutureState.PENDING:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            answer = c.post("/api/v1/retrieve_future", json={"request_id": request_id}).json()
    assert svc.store.get(request_id).state is FutureState.CANCELLED
    assert "nobody polled" in answer["error"]
    assert took > 0.5 or svc.queued_sample_tokens() == 0  # it outlived one abandon period
