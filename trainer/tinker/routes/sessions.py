"""Client sessions: create, heartbeat, finish, and the REST views (list, get, search)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.routes.deps import API, Service, send

router = APIRouter(prefix=API)


@router.post("/create_session")
async def create_session(req: wire.CreateSessionRequest, svc: Service) -> JSONResponse:
    return send(svc.create_session(req))


@router.post("/session_heartbeat")
async def heartbeat(req: wire.SessionRequest, svc: Service) -> JSONResponse:
    return send(svc.heartbeat(req))


@router.post("/sessions/{session_id}/finish")
async def finish_session(
    session_id: str, req: wire.FinishSessionRequest, svc: Service
) -> JSONResponse:
    return send(svc.finish_session(session_id, req))


@router.get("/sessions")
async def list_sessions(svc: Service, limit: int = 20, offset: int = 0) -> JSONResponse:
    return send(svc.list_sessions(limit, offset))


@router.get("/sessions/{session_id}")
async def get_session(session_id: str, svc: Service) -> JSONResponse:
    return send(svc.session_info(session_id))


@router.post("/sessions/search")
async def search_sessions(req: wire.SessionSearchRequest, svc: Service) -> JSONResponse:
    return send(svc.search_sessions(req))
