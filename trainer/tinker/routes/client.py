"""Client bootstrap: config, capabilities, health and telemetry."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.routes.deps import API, Service, send

router = APIRouter(prefix=API)


@router.post("/client/config")
async def client_config() -> JSONResponse:
    return send(wire.ClientConfig())


@router.post("/client/dynamic_config")
async def dynamic_config() -> JSONResponse:
    return send(wire.DynamicConfig())


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/get_server_capabilities")
async def capabilities(svc: Service) -> JSONResponse:
    return send(svc.capabilities())


@router.post("/telemetry")
async def telemetry() -> dict[str, str]:
    return {"status": "accepted"}
