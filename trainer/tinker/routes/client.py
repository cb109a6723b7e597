"""Client bootstrap: config, capabilities, health and telemetry."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from skyrl_sdk.trainer.tinker.routes.deps import API, Service

router = APIRouter(prefix=API)


@router.post("/client/config")
async def client_config() -> dict[str, Any]:
    return {"pjwt_auth_enabled": False}


@router.post("/client/dynamic_config")
async def dynamic_config() -> dict[str, Any]:
    return {"refresh_interval_sec": 300, "sample_cancel_enabled": True}


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/get_server_capabilities")
async def capabilities(svc: Service) -> dict[str, Any]:
    return svc.capabilities().body()


@router.post("/telemetry")
async def telemetry() -> dict[str, str]:
    return {"status": "accepted"}
