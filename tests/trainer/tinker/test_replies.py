"""The service's typed replies (`wire.Reply`) serialise to the very JSON the hand-built dicts
did: same keys, same order, absent (not null) where the SDK's field is optional."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.errors import ServiceError
from skyrl_sdk.trainer.tinker.service_futures import failure
from tests.trainer.tinker.conftest import AUTH, TinkerServer

_AS_SENT = {"ensure_ascii": False, "allow_nan": False, "separators": (",", ":")}
"""How Starlette's JSONResponse encodes a body."""


def _bytes(body: dict[str, Any]) -> str:
    return json.dumps(body, **_AS_SENT)  # type: ignore[arg-type]


CASES: list[tuple[wire.Reply, dict[str, Any]]] = [
    (wire.FutureReply(request_id="r", model_id="m"), {"request_id": "r", "model_id": "m"}),
    (
        wire.FutureReply(request_id="r", sample_sequence_ids=["r:0", "r:1"]),
        {"request_id": "r", "sample_sequence_ids": ["r:0", "r:1"]},
    ),
    (
        wire.TryAgain(request_id="r"),
        {"type": "try_again", "request_id": "r", "queue_state": "active"},
    ),
    (
        wire.CancelReply(request_id="r", cancelled=False, state="done"),
        {"request_id": "r", "cancelled": False, "state": "done"},
    ),
    (wire.CreateSessionReply(session_id="s"), {"session_id": "s", "type": "create_session"}),
    (wire.CreateModelReply(model_id="m"), {"model_id": "m", "type": "create_model"}),
    (wire.UnloadModelReply(model_id="m"), {"model_id": "m", "type": "unload_model"}),
    (
        wire.GetInfoReply(
            model_id="m",
            model_data=wire.ModelData(model_name="b", tokenizer_id="/t"),
            is_lora=True,
            lora_rank=4,
            model_name="b",
        ),
        {
            "model_id": "m",
            "model_data": {"arch": "causal_lm", "model_name": "b", "tokenizer_id": "/t"},
            "is_lora": True,
            "lora_rank": 4,
            "model_name": "b",
            "optimizer_config": {"type": "adamw"},
            "type": "get_info",
        },
    ),
    (
        wire.GetInfoReply(
            model_id="m",
            model_data=wire.ModelData(model_name="b"),
            is_lora=False,
            lora_rank=None,
            model_name="b",
        ),
        {
            "model_id": "m",
            "model_data": {"arch": "causal_lm", "model_name": "b"},
            "is_lora": False,
            "lora_rank": None,
            "model_name": "b",
            "optimizer_config": {"type": "adamw"},
            "type": "get_info",
        },
    ),
    (
        wire.SaveWeightsReply(path="tinker://m/weights/a"),
        {"path": "tinker://m/weights/a", "type": "save_weights"},
    ),
    (wire.SaveForSamplerReply(path="p"), {"path": "p", "type": "save_weights_for_sampler"}),
    (
        wire.SaveForSamplerReply(path=None, sampling_session_id="s:sample:0"),
        {"path": None, "sampling_session_id": "s:sample:0", "type": "save_weights_for_sampler"},
    ),
    (wire.LoadWeightsReply(path="p"), {"path": "p", "type": "load_weights"}),
    (
        wire.LoadWeightsReply(path="p", model_id="m"),
        {"path": "p", "model_id": "m", "type": "load_weights"},
    ),
    (
        wire.CreateSamplingSessionReply(sampling_session_id="s:sample:0"),
        {"sampling_session_id": "s:sample:0", "type": "create_sampling_session"},
    ),
    (
        wire.RequestFailed(error="no", category=wire.FailureCategory.USER),
        {"error": "no", "category": "user"},
    ),
    (wire.HeartbeatReply(), {"type": "session_heartbeat"}),
    (wire.StatusOk(), {"status": "ok"}),
    (wire.SessionIds(sessions=["a", "b"]), {"sessions": ["a", "b"]}),
    (
        wire.SessionInfo(
            training_run_ids=["s:train:0"], sampler_ids=[], user_metadata={}, display_name=None
        ),
        {
            "training_run_ids": ["s:train:0"],
            "sampler_ids": [],
            "user_metadata": {},
            "display_name": None,
        },
    ),
    (
        wire.SessionSearchReply(
            sessions=[
                wire.SessionSummary(
                    session_id="s",
                    created_at="2026-01-01T00:00:00+00:00",
                    owner="local",
                    project_id="local",
                    status=wire.FinishedStatus(reason={"type": "errored"}, detail=None),
                    checkpoints_count=1,
                    display_name="n",
                    user_metadata={"k": "v"},
                    checkpoint_storage_bytes=10,
                ),
                wire.SessionSummary(
                    session_id="t",
                    created_at=None,
                    owner="local",
                    project_id="p",
                    status=wire.ActiveStatus(),
                    checkpoints_count=0,
                    display_name=None,
                    user_metadata={},
                    checkpoint_storage_bytes=0,
                ),
            ],
            next_cursor=wire.SessionCursor(last_created_at=None, last_session_id="t"),
        ),
        {
            "sessions": [
                {
                    "session_id": "s",
                    "created_at": "2026-01-01T00:00:00+00:00",
                    "owner": "local",
                    "project_id": "local",
                    "status": {
                        "type": "client_finished",
                        "reason": {"type": "errored"},
                        "detail": None,
                    },
                    "checkpoints_count": 1,
                    "display_name": "n",
                    "user_metadata": {"k": "v"},
                    "checkpoint_storage_bytes": 10,
                },
                {
                    "session_id": "t",
                    "created_at": None,
                    "owner": "local",
                    "project_id": "p",
                    "status": {"type": "active"},
                    "checkpoints_count": 0,
                    "display_name": None,
                    "user_metadata": {},
                    "checkpoint_storage_bytes": 0,
                },
            ],
            "next_cursor": {"last_created_at": None, "last_session_id": "t"},
        },
    ),
    (wire.SessionSearchReply(sessions=[], next_cursor=None), {"sessions": [], "next_cursor": None}),
    (
        wire.WeightsInfoReply(base_model="b", is_lora=False),
        {"base_model": "b", "optimizer_config": {"type": "adamw"}, "is_lora": False},
    ),
    (
        wire.WeightsInfoReply(
            base_model="b",
            is_lora=True,
            lora_rank=4,
            train_attn=True,
            train_mlp=False,
            train_unembed=False,
        ),
        {
            "base_model": "b",
            "optimizer_config": {"type": "adamw"},
            "is_lora": True,
            "lora_rank": 4,
            "train_attn": True,
            "train_mlp": False,
            "train_unembed": False,
        },
    ),
    (
        wire.StorageReply(
            data=[
                wire.StorageUsage(
                    project_id=None, checkpoint_count=2, size_bytes=10, size_gigabytes=1e-8
                )
            ]
        ),
        {
            "effective_rate_usd_per_gigabyte_month": None,
            "data": [
                {
                    "project_id": None,
                    "checkpoint_count": 2,
                    "size_bytes": 10,
                    "size_gigabytes": 1e-8,
                }
            ],
        },
    ),
    (wire.TtlReply(tinker_path="p", expires_at=None), {"tinker_path": "p", "expires_at": None}),
    (wire.TtlReply(tinker_path="p", expires_at=1.5), {"tinker_path": "p", "expires_at": 1.5}),
    (wire.PublishedReply(tinker_path="p", public=True), {"tinker_path": "p", "public": True}),
    (wire.DeletedReply(deleted="p"), {"deleted": "p"}),
    (
        wire.CheckpointsReply(
            checkpoints=[], cursor=wire.PageCursor(offset=0, limit=5, total_count=9)
        ),
        {"checkpoints": [], "cursor": {"offset": 0, "limit": 5, "total_count": 9}},
    ),
    (wire.CheckpointsReply(checkpoints=[], cursor=None), {"checkpoints": [], "cursor": None}),
]


@pytest.mark.parametrize(("reply", "expected"), CASES, ids=lambda c: type(c).__name__)
def test_a_reply_serialises_to_the_old_dict_byte_for_byte(
    reply: wire.Reply, expected: dict[str, Any]
) -> None:
    assert _bytes(reply.body()) == _bytes(expected)


def test_replies_are_frozen() -> None:
    reply = wire.CreateModelReply(model_id="m")
    with pytest.raises(Exception, match="frozen"):
        reply.model_id = "other"  # type: ignore[misc]


def test_a_jobs_exception_fails_its_future_as_the_user_or_the_server() -> None:
    assert failure(ValueError("bad loss")).body() == {"error": "bad loss", "category": "user"}
    assert failure(KeyError("unknown model_id 'm'")).body() == {
        "error": "unknown model_id 'm'",
        "category": "user",
    }
    assert failure(ServiceError(410, "gone")).body() == {"error": "gone", "category": "user"}
    assert failure(RuntimeError("boom")).body() == {
        "error": "RuntimeError: boom",
        "category": "server",
    }


def _poll(client: httpx.Client, request_id: str) -> httpx.Response:
    for _ in range(100):
        response = client.post("/api/v1/retrieve_future", json={"request_id": request_id})
        if response.json().get("type") != "try_again":
            return response
        time.sleep(0.05)
    raise AssertionError("future never resolved")


def test_the_server_sends_the_service_replies_unchanged(tinker_server: TinkerServer) -> None:
    svc = tinker_server.service
    with httpx.Client(base_url=tinker_server.base_url, timeout=60, headers=AUTH) as c:
        created = c.post("/api/v1/create_session", json={"tags": []})
        session = created.json()["session_id"]
        assert created.text == _bytes({"session_id": session, "type": "create_session"})
        body = {"session_id": session, "model_seq_id": 7, "base_model": tinker_server.base_model}
        submitted = c.post("/api/v1/create_model", json=body)
        model_id = f"{session}:train:7"
        request_id = submitted.json()["request_id"]
        assert submitted.text == _bytes({"request_id": request_id, "model_id": model_id})
        done = _poll(c, request_id)
        assert done.text == _bytes({"model_id": model_id, "type": "create_model"})
        info = c.post("/api/v1/get_info", json={"model_id": model_id})
        typed = svc.get_info(model_id)
        assert isinstance(typed, wire.GetInfoReply) and typed.model_data.tokenizer_id
        assert info.text == _bytes(typed.body())
        assert list(info.json()) == [
            "model_id",
            "model_data",
            "is_lora",
            "lora_rank",
            "model_name",
            "optimizer_config",
            "type",
        ]
        run = svc.registry.runs.get(model_id)
        assert isinstance(svc.training_run(run), wire.TrainingRun)
        listed = c.get(f"/api/v1/training_runs/{model_id}")
        assert listed.text == _bytes(svc.training_run(run).body())
        cancel = c.post("/api/v1/cancel_future", json={"request_id": request_id})
        assert cancel.status_code == 400 and "only sampling requests" in cancel.text


def test_session_refusals_keep_their_status_and_body(tinker_server: TinkerServer) -> None:
    with httpx.Client(base_url=tinker_server.base_url, timeout=60, headers=AUTH) as c:
        session = c.post("/api/v1/create_session", json={"tags": []}).json()["session_id"]
        beat = c.post("/api/v1/session_heartbeat", json={"session_id": session})
        assert beat.text == _bytes({"type": "session_heartbeat"})
        done = c.post(f"/api/v1/sessions/{session}/finish", json={"reason": {"type": "success"}})
        assert done.text == _bytes({"status": "ok"})
        gone = c.post("/api/v1/session_heartbeat", json={"session_id": session})
        message = f"session {session} has finished"
        assert gone.status_code == 410
        assert gone.text == _bytes({"detail": message, "error": message})
        bad = c.post("/api/v1/sessions/search", json={"cursor": {"last_session_id": "x"}})
        assert bad.status_code == 400 and bad.json()["error"].startswith("bad cursor: ")
        unknown = c.get("/api/v1/sessions/nope")
        assert unknown.status_code == 404 and "unknown session 'nope'" in unknown.text


def test_sampler_and_capability_views_keep_their_bytes(tinker_server: TinkerServer) -> None:
    base = tinker_server.base_model
    with httpx.Client(base_url=tinker_server.base_url, timeout=60, headers=AUTH) as c:
        session = c.post("/api/v1/create_session", json={"tags": []}).json()["session_id"]
        body = {"session_id": session, "sampling_session_seq_id": 3, "base_model": base}
        made = c.post("/api/v1/create_sampling_session", json=body)
        sampler_id = f"{session}:sample:3"
        assert made.text == _bytes(
            {"sampling_session_id": sampler_id, "type": "create_sampling_session"}
        )
        got = c.get(f"/api/v1/samplers/{sampler_id}")
        assert got.text == _bytes(
            {"sampler_id": sampler_id, "base_model": base, "model_path": None}
        )
        missing = c.get("/api/v1/samplers/nope")
        message = "unknown sampler 'nope'"
        assert missing.status_code == 404
        assert missing.text == _bytes({"detail": message, "error": message})
        caps = c.get("/api/v1/get_server_capabilities").json()["supported_models"]
        assert caps[0] == {
            "model_name": base,
            "max_context_length": tinker_server.service.config.models[0].max_context_length,
            "trainable": True,
            "sampleable": True,
        }
        assert list(caps[0]) == ["model_name", "max_context_length", "trainable", "sampleable"]
