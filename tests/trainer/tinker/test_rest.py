"""`tinker.RestClient` against our server: training runs, checkpoints, sessions."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.trainer.tinker.conftest import API_KEY, AUTH, TinkerServer

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402


def _clients(server: TinkerServer) -> tuple[tinker.ServiceClient, tinker.RestClient]:
    service = tinker.ServiceClient(
        base_url=server.base_url, api_key=API_KEY, user_metadata={"suite": "rest"}
    )
    return service, tinker.RestClient(base_url=server.base_url, api_key=API_KEY)


def test_runs_and_checkpoints(tinker_server: TinkerServer) -> None:
    service, rest = _clients(tinker_server)
    trainer = service.create_lora_training_client(
        tinker_server.base_model, rank=4, user_metadata={"renderer_name": "plain"}
    ).result()
    run_id = trainer.model_id
    state = trainer.save_state("a", ttl_seconds=3600, user_metadata={"step": "0"}).result().path
    sampler = trainer.save_weights_for_sampler("b").result().path

    run = rest.get_training_run(run_id).result()
    assert (run.base_model, run.is_lora, run.lora_rank) == (tinker_server.base_model, True, 4)
    assert run.user_metadata == {"renderer_name": "plain"} and not run.corrupted
    assert run.last_checkpoint.tinker_path == state
    assert run.last_sampler_checkpoint.tinker_path == sampler
    assert rest.get_training_run_by_tinker_path(state).result().training_run_id == run_id
    runs = rest.list_training_runs(limit=100).result()
    assert run_id in [r.training_run_id for r in runs.training_runs]
    assert runs.cursor.total_count >= 1

    ckpts = {c.tinker_path: c for c in rest.list_checkpoints(run_id).result().checkpoints}
    assert set(ckpts) == {state, sampler}
    assert ckpts[state].checkpoint_type == "training" and ckpts[state].checkpoint_id == "weights/a"
    assert ckpts[state].user_metadata == {"step": "0"} and ckpts[state].expires_at is not None
    assert ckpts[sampler].checkpoint_type == "sampler" and ckpts[sampler].size_bytes > 0
    mine = rest.list_user_checkpoints(limit=100).result()
    assert {state, sampler} <= {c.tinker_path for c in mine.checkpoints}

    info = rest.get_weights_info_by_tinker_path(state).result()
    assert (info.base_model, info.is_lora, info.lora_rank) == (tinker_server.base_model, True, 4)
    with pytest.raises(tinker.NotFoundError):
        rest.get_weights_info_by_tinker_path(f"tinker://{run_id}/weights/nope").result()

    rest.publish_checkpoint_from_tinker_path(state).result()
    assert {c.tinker_path: c.public for c in rest.list_checkpoints(run_id).result().checkpoints}[
        state
    ]
    rest.unpublish_checkpoint_from_tinker_path(state).result()
    rest.set_checkpoint_ttl_from_tinker_path(state, None).result()
    after = {c.tinker_path: c for c in rest.list_checkpoints(run_id).result().checkpoints}
    assert not after[state].public and after[state].expires_at is None

    # save_state keeps an existing name unless told to overwrite it.
    with pytest.raises(tinker.RequestFailedError, match="overwrite"):
        trainer.save_state("a").result()
    assert trainer.save_state("a", overwrite=True).result().path == state

    rest.delete_checkpoint_from_tinker_path(sampler).result()
    assert [c.tinker_path for c in rest.list_checkpoints(run_id).result().checkpoints] == [state]
    with pytest.raises(tinker.NotFoundError):
        service.create_sampling_client(model_path=sampler).result()
    with pytest.raises(tinker.NotFoundError):
        rest.delete_checkpoint_from_tinker_path(sampler).result()


def test_checkpoint_ttl_expires(tinker_server: TinkerServer) -> None:
    service, rest = _clients(tinker_server)
    trainer = service.create_lora_training_client(tinker_server.base_model, rank=4).result()
    short = trainer.save_weights_for_sampler("short", ttl_seconds=1).result().path
    assert short in [
        c.tinker_path for c in rest.list_checkpoints(trainer.model_id).result().checkpoints
    ]
    time.sleep(1.2)
    assert rest.list_checkpoints(trainer.model_id).result().checkpoints == []
    with pytest.raises(tinker.NotFoundError):
        service.create_sampling_client(model_path=short).result()


@pytest.mark.filterwarnings("ignore:.*search_sessions.*")
def test_sessions(tinker_server: TinkerServer) -> None:
    service = tinker.ServiceClient(
        base_url=tinker_server.base_url,
        api_key=API_KEY,
        user_metadata={"team": "rest"},
        display_name="Session Search Probe",
    )
    rest = tinker.RestClient(base_url=tinker_server.base_url, api_key=API_KEY)
    trainer = service.create_lora_training_client(tinker_server.base_model, rank=4).result()
    session_id = trainer.model_id.split(":train:")[0]
    assert session_id in rest.list_sessions(limit=100).result().sessions
    got = rest.get_session(session_id).result()
    assert got.training_run_ids == [trainer.model_id]
    assert got.display_name == "Session Search Probe" and got.user_metadata == {"team": "rest"}
    found = rest.search_sessions(types.SessionSearchRequest(display_name="search probe")).result()
    assert [s.session_id for s in found.sessions] == [session_id]
    assert found.sessions[0].status.type == "active"
    service.close("success")
    query = types.SessionSearchRequest(
        user_metadata={"team": "rest"},
        statuses=[types.ClientFinishedSessionStatusQuery(reasons=["success"])],
    )
    finished = rest.search_sessions(query).result().sessions
    assert [s.session_id for s in finished] == [session_id]
    r = httpx.post(
        f"{tinker_server.base_url}/api/v1/session_heartbeat",
        json={"session_id": session_id},
        headers=AUTH,
    )
    assert r.status_code == 410


def test_hosted_only_endpoints_say_why(tinker_server: TinkerServer) -> None:
    service, rest = _clients(tinker_server)
    trainer = service.create_lora_training_client(tinker_server.base_model, rank=4).result()
    path = trainer.save_state("x").result().path
    with pytest.raises(tinker.BadRequestError, match="not supported by the local tinker server"):
        rest.copy_weights(path, "some-project").result()
    with pytest.raises(tinker.BadRequestError, match="object storage"):
        rest.get_external_weights_urls(f"tinker://{trainer.model_id}/external_weights/e").result()
    with pytest.raises(tinker.BadRequestError, match="projects"):
        rest.assign_session_project(trainer.model_id.split(":train:")[0], "p").result()
    # A refused training request still uses up its seq_id: the model goes on working.
    with pytest.raises(tinker.BadRequestError, match="object storage"):
        trainer.save_weights_external("e").result()
    assert trainer.save_state("after").result().path.endswith("/weights/after")
    r = httpx.get(f"{tinker_server.base_url}/api/v1/audit", headers=AUTH)
    assert r.status_code == 400 and "audit" in r.json()["detail"]
    usage_url = f"{tinker_server.base_url}/api/v1/billing/usage/checkpoints/current"
    usage = httpx.get(usage_url, headers=AUTH).json()
    assert usage["data"][0]["checkpoint_count"] >= 1
