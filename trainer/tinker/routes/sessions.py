"""Client sessions: create, heartbeat, finish, and the REST views (list, get, search)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.routes.deps import API, Service

router = APIRouter(prefix=API)


@router.post("/create_session")
async def create_session(req: wire.CreateSessionRequest, svc: Service) -> dict[str, Any]:
    return svc.create_session(req).body()


@router.post("/session_heartbeat")
async def heartbeat(req: wire.SessionRequest, svc: Service) -> dict[str, Any]:
    return svc.heartbeat(req).body()


@router.post("/sessions/{session_id}/finish")
async def finish_session(
    session_id: str, req: wire.FinishSessionRequest, svc: Service
) -> dict[str, Any]:
    return svc.finish_session(session_id, req).body()


@router.get("/sessions")
async def list_sessions(svc: Service, limit: int = 20, offset: int = 0) -> dict[str, Any]:
    return svc.list_sessions(limit, offset).body()


@router.get("/sessions/{session_id}")
async def get_session(session_id: str, svc: Service) -> dict[str, Any]:
    return svc.session_info(session_id).body()


@router.post("/sessions/search")
async def search_sessions(req: wire.SessionSearchRequest, svc: Service) -> dict[str, Any]:
    return svc.search_sessions(req).body()
