"""Training runs and their checkpoints (list, delete, publish, TTL), weights info, storage use."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from fastapi.responses import JSONResponse

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.routes.deps import API, Service, send
from skyrl_sdk.trainer.tinker.routes.unsupported import EXTERNAL_WHY, not_here

router = APIRouter(prefix=API)


@router.get("/training_runs")
async def list_training_runs(
    svc: Service, limit: int = 20, offset: int = 0, project_id: str | None = None
) -> JSONResponse:
    return send(svc.list_training_runs(limit, offset, project_id))


@router.get("/training_runs/{model_id}")
async def get_training_run(model_id: str, svc: Service) -> JSONResponse:
    return send(svc.get_training_run(model_id))


@router.get("/training_runs/{model_id}/checkpoints")
async def list_checkpoints(model_id: str, svc: Service) -> JSONResponse:
    return send(svc.list_run_checkpoints(model_id))


@router.get("/checkpoints")
async def list_user_checkpoints(svc: Service, limit: int = 100, offset: int = 0) -> JSONResponse:
    return send(svc.list_checkpoints(limit, offset))


# -- one checkpoint: tinker://{model_id}/{kind}/{name} ---------------------------------------


def _hosted_only(kind: str) -> None:
    """Exported weights need hosted storage: 400 saying so (before any lookup)."""
    if kind == "external_weights":
        raise not_here(EXTERNAL_WHY)


@router.delete("/training_runs/{model_id}/checkpoints/{kind}/{name}")
async def delete_checkpoint(model_id: str, kind: str, name: str, svc: Service) -> JSONResponse:
    _hosted_only(kind)
    return send(svc.delete_run_checkpoint(model_id, kind, name))


@router.delete("/training_runs/{model_id}/checkpoints/{checkpoint_id}")
async def delete_bare_checkpoint(model_id: str, checkpoint_id: str) -> JSONResponse:
    raise HTTPException(
        400,
        f"checkpoint ids look like weights/<name> or sampler_weights/<name>, got {checkpoint_id!r}",
    )


@router.post("/training_runs/{model_id}/checkpoints/{kind}/{name}/publish")
async def publish(model_id: str, kind: str, name: str, svc: Service) -> JSONResponse:
    _hosted_only(kind)
    return send(svc.publish_checkpoint(model_id, kind, name, public=True))


@router.delete("/training_runs/{model_id}/checkpoints/{kind}/{name}/publish")
async def unpublish(model_id: str, kind: str, name: str, svc: Service) -> JSONResponse:
    _hosted_only(kind)
    return send(svc.publish_checkpoint(model_id, kind, name, public=False))


@router.put("/training_runs/{model_id}/checkpoints/{kind}/{name}/ttl")
async def set_ttl(
    model_id: str, kind: str, name: str, req: wire.TtlRequest, svc: Service
) -> JSONResponse:
    _hosted_only(kind)
    return send(svc.set_checkpoint_ttl(model_id, kind, name, req))


@router.post("/weights_info")
async def weights_info(req: wire.WeightsInfoRequest, svc: Service) -> JSONResponse:
    return send(svc.weights_info(req))


@router.get("/billing/usage/checkpoints/current")
async def checkpoint_storage(svc: Service, project_id: str | None = None) -> JSONResponse:
    return send(svc.checkpoint_storage(project_id))
