"""Training models: create, describe, unload."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.routes.deps import API, Service, send

router = APIRouter(prefix=API)


@router.post("/create_model")
async def create_model(req: wire.CreateModelRequest, svc: Service) -> JSONResponse:
    return send(svc.create_model(req))


@router.post("/get_info")
async def get_info(req: wire.ModelRequest, svc: Service) -> JSONResponse:
    return send(svc.get_info(req.model_id))


@router.post("/unload_model")
async def unload_model(req: wire.ModelRequest, svc: Service) -> JSONResponse:
    return send(svc.unload_model(req.model_id))
