"""Server pieces without the SDK: seq ordering, legacy JSON bodies and results."""

from __future__ import annotations

import time

import httpx
import pytest

from skyrl_sdk.trainer.tinker.model_queue import ModelQueue
from tests.trainer.tinker.conftest import AUTH, TinkerServer


def test_queue_runs_in_seq_order() -> None:
    ran: list[int] = []
    queue = ModelQueue(next_seq=1)
    for seq in (3, 2, 5, 1):  # the SDK sends the first chunk last
        queue.submit(seq, lambda seq=seq: ran.append(seq))
    assert ran == [1, 2, 3]
    queue.submit(4, lambda: ran.append(4))
    assert ran == [1, 2, 3, 4, 5]
    with pytest.raises(Exception, match="already submitted"):
        queue.submit(2, lambda: None)


def _poll(client: httpx.Client, request_id: str) -> dict:
    for _ in range(50):
        body = client.post("/api/v1/retrieve_future", json={"request_id": request_id}).json()
        if body.get("type") != "try_again":
            return body
        time.sleep(0.1)
    raise AssertionError("future never resolved")


def test_legacy_json_forward_backward_and_sample(tinker_server: TinkerServer) -> None:
    with httpx.Client(base_url=tinker_server.base_url, timeout=60, headers=AUTH) as c:
        session = c.post("/api/v1/create_session", json={"tags": []}).json()["session_id"]
        body = {"session_id": session, "base_model": tinker_server.base_model}
        created = c.post("/api/v1/create_model", json=body).json()
        model_id = _poll(c, created["request_id"])["model_id"]
        datum = {
            "model_input": {"chunks": [{"type": "encoded_text", "tokens": [5, 6, 7]}]},
            "loss_fn_inputs": {
                "target_tokens": {"data": [6, 7, 8], "dtype": "int64", "shape": [3]},
                "weights": {"data": [1.0, 1.0, 1.0], "dtype": "float32", "shape": [3]},
            },
        }
        fbi = {"data": [datum], "loss_fn": "cross_entropy"}
        r = c.post(
            "/api/v1/forward_backward",
            json={"model_id": model_id, "seq_id": 1, "forward_backward_input": fbi},
        )
        out = _poll(c, r.json()["request_id"])
        assert out["metrics"]["loss:sum"] > 0
        assert len(out["loss_fn_outputs"][0]["logprobs"]["data"]) == 3
        r = c.post(
            "/api/v1/forward_backward",
            content=b"\x00garbage",
            headers={"content-type": "application/x-protobuf"},
        )
        assert r.status_code == 400 and "forward_backward" in r.json()["detail"]
        sample = {
            "base_model": tinker_server.base_model,
            "num_samples": 2,
            "prompt": {"chunks": [{"type": "encoded_text", "tokens": [5, 6]}]},
            "sampling_params": {"max_tokens": 3, "stop": [], "seed": 0},
        }
        r = c.post("/api/v1/asample", json=sample).json()
        assert len(r["sample_sequence_ids"]) == 2
        seqs = _poll(c, r["request_id"])["sequences"]
        assert [len(s["tokens"]) for s in seqs] == [3, 3]
        assert all(len(s["logprobs"]) == 3 for s in seqs)


def test_zstd_body_that_inflates_past_the_limit_gets_413(tinker_server: TinkerServer) -> None:
    """A few KB of zstd must not become more than `max_request_bytes` in memory."""
    import zstandard

    from skyrl_sdk.http_guard import DEFAULT_MAX_REQUEST_BYTES

    bomb = zstandard.ZstdCompressor().compress(bytes(DEFAULT_MAX_REQUEST_BYTES + 1))
    assert len(bomb) < 100_000
    r = httpx.post(
        f"{tinker_server.base_url}/api/v1/forward_backward",
        content=bomb,
        headers={**AUTH, "content-type": "application/x-protobuf", "content-encoding": "zstd"},
        timeout=60,
    )
    assert r.status_code == 413 and "zstd" in r.json()["detail"]
