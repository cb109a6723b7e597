"""Training models: create, describe, unload."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.routes.deps import API, Service

router = APIRouter(prefix=API)


@router.post("/create_model")
async def create_model(req: wire.CreateModelRequest, svc: Service) -> dict[str, Any]:
    return svc.create_model(req).body()


@router.post("/get_info")
async def get_info(req: wire.ModelRequest, svc: Service) -> dict[str, Any]:
    return svc.get_info(req.model_id).body()


@router.post("/unload_model")
async def unload_model(req: wire.ModelRequest, svc: Service) -> dict[str, Any]:
    return svc.unload_model(req.model_id).body()
