"""Training runs and their checkpoints (list, delete, publish, TTL), weights info, storage use."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, HTTPException

from skyrl_sdk.trainer.tinker import lora as lora_records
from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.backend import read_meta
from skyrl_sdk.trainer.tinker.errors import refusal
from skyrl_sdk.trainer.tinker.routes.deps import API, Service
from skyrl_sdk.trainer.tinker.routes.unsupported import EXTERNAL_WHY, not_here
from skyrl_sdk.trainer.tinker.service import TinkerService
from skyrl_sdk.trainer.tinker.store import CheckpointKind, RunRow
from skyrl_sdk.trainer.tinker.views import checkpoint_json

router = APIRouter(prefix=API)


def _cursor(offset: int, limit: int, total: int) -> dict[str, int]:
    return {"offset": offset, "limit": limit, "total_count": total}


def _run_or_404(svc: TinkerService, model_id: str) -> RunRow:
    run = svc.registry.runs.get(model_id)
    if run is None:
        raise HTTPException(404, f"unknown training run {model_id!r}")
    return run


@router.get("/training_runs")
async def list_training_runs(
    svc: Service, limit: int = 20, offset: int = 0, project_id: str | None = None
) -> dict[str, Any]:
    svc.purge_expired()
    where, params = "1", ()
    if project_id is not None:
        where = "session_id IN (SELECT session_id FROM sessions WHERE project_id=?)"
        params = (project_id,)
    runs = svc.registry.runs
    rows = runs.select(where, params, order="created DESC", limit=limit, offset=offset)
    return {
        "training_runs": [svc.training_run(r).body() for r in rows],
        "cursor": _cursor(offset, limit, runs.count(where, params)),
    }


@router.get("/training_runs/{model_id}")
async def get_training_run(model_id: str, svc: Service) -> dict[str, Any]:
    svc.purge_expired()
    return svc.training_run(_run_or_404(svc, model_id)).body()


@router.get("/training_runs/{model_id}/checkpoints")
async def list_checkpoints(model_id: str, svc: Service) -> dict[str, Any]:
    _run_or_404(svc, model_id)
    svc.purge_expired()
    rows = svc.registry.checkpoints.select("model_id=?", (model_id,), order="created")
    return {"checkpoints": [checkpoint_json(r) for r in rows], "cursor": None}


@router.get("/checkpoints")
async def list_user_checkpoints(svc: Service, limit: int = 100, offset: int = 0) -> dict[str, Any]:
    svc.purge_expired()
    rows = svc.registry.checkpoints.select(order="created DESC", limit=limit, offset=offset)
    return {
        "checkpoints": [checkpoint_json(r) for r in rows],
        "cursor": _cursor(offset, limit, svc.registry.checkpoints.count()),
    }


# -- one checkpoint: tinker://{model_id}/{kind}/{name} ---------------------------------------


def _checkpoint_path(svc: TinkerService, model_id: str, kind: str, name: str) -> str:
    """The tinker:// path of an existing checkpoint (400 malformed, 404 unknown)."""
    if kind not in (k.value for k in CheckpointKind):
        if kind == "external_weights":
            raise not_here(EXTERNAL_WHY)
        raise HTTPException(
            400,
            f"checkpoint ids look like weights/<name> or sampler_weights/<name>, got {kind}/{name}",
        )
    try:
        svc.files.directory(model_id, kind, name)  # names checked: 400, not a path lookup
    except ValueError as e:
        raise HTTPException(400, str(e)) from e
    path = f"tinker://{model_id}/{kind}/{name}"
    svc.purge_expired()
    if svc.registry.checkpoints.get(path) is None:
        raise HTTPException(404, f"no checkpoint at {path}")
    return path


@router.delete("/training_runs/{model_id}/checkpoints/{kind}/{name}")
async def delete_checkpoint(model_id: str, kind: str, name: str, svc: Service) -> dict[str, Any]:
    path = _checkpoint_path(svc, model_id, kind, name)
    svc.delete_checkpoint(path)
    return {"deleted": path}


@router.delete("/training_runs/{model_id}/checkpoints/{checkpoint_id}")
async def delete_bare_checkpoint(model_id: str, checkpoint_id: str) -> dict[str, Any]:
    raise HTTPException(
        400,
        f"checkpoint ids look like weights/<name> or sampler_weights/<name>, got {checkpoint_id!r}",
    )


@router.post("/training_runs/{model_id}/checkpoints/{kind}/{name}/publish")
async def publish(model_id: str, kind: str, name: str, svc: Service) -> dict[str, Any]:
    path = _checkpoint_path(svc, model_id, kind, name)
    svc.registry.checkpoints.update(path, public=True)
    return {"tinker_path": path, "public": True}


@router.delete("/training_runs/{model_id}/checkpoints/{kind}/{name}/publish")
async def unpublish(model_id: str, kind: str, name: str, svc: Service) -> dict[str, Any]:
    path = _checkpoint_path(svc, model_id, kind, name)
    svc.registry.checkpoints.update(path, public=False)
    return {"tinker_path": path, "public": False}


@router.put("/training_runs/{model_id}/checkpoints/{kind}/{name}/ttl")
async def set_ttl(
    model_id: str, kind: str, name: str, req: wire.TtlRequest, svc: Service
) -> dict[str, Any]:
    path = _checkpoint_path(svc, model_id, kind, name)
    expires = None if req.ttl_seconds is None else time.time() + req.ttl_seconds
    svc.registry.checkpoints.update(path, expires_at=expires)
    return {"tinker_path": path, "expires_at": expires}


@router.post("/weights_info")
async def weights_info(req: wire.WeightsInfoRequest, svc: Service) -> dict[str, Any]:
    try:
        _, directory = svc.files.resolve(req.tinker_path)
        meta = read_meta(directory)
    except (ValueError, KeyError) as e:
        raise refusal(e) from e
    lora = lora_records.read(meta.get("lora"))
    info: dict[str, Any] = {
        "base_model": meta["base_model"],
        "optimizer_config": {"type": "adamw"},
        "is_lora": lora is not None,
    }
    if lora is not None:
        info.update(lora_records.sdk_fields(lora))
    return info


@router.get("/billing/usage/checkpoints/current")
async def checkpoint_storage(svc: Service, project_id: str | None = None) -> dict[str, Any]:
    svc.purge_expired()
    rows = svc.registry.checkpoints.select()
    size = sum(r.size_bytes for r in rows)
    item = {
        "project_id": project_id,
        "checkpoint_count": len(rows),
        "size_bytes": size,
        "size_gigabytes": size / 1e9,
    }
    return {"effective_rate_usd_per_gigabyte_month": None, "data": [item]}
