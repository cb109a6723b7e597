"""Client sessions: create, heartbeat, finish, and the REST views (list, get, search)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, HTTPException

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.errors import Status
from skyrl_sdk.trainer.tinker.routes.deps import API, Service
from skyrl_sdk.trainer.tinker.service import TinkerService
from skyrl_sdk.trainer.tinker.store import SessionRow
from skyrl_sdk.trainer.tinker.views import iso, str_metadata

router = APIRouter(prefix=API)


@router.post("/create_session")
async def create_session(req: wire.CreateSessionRequest, svc: Service) -> dict[str, Any]:
    return svc.create_session(req).body()


@router.post("/session_heartbeat")
async def heartbeat(req: wire.SessionRequest, svc: Service) -> dict[str, Any]:
    if svc.session(req.session_id).finished is not None:
        raise HTTPException(Status.GONE, f"session {req.session_id} has finished")
    return {"type": "session_heartbeat"}


@router.post("/sessions/{session_id}/finish")
async def finish_session(
    session_id: str, req: wire.FinishSessionRequest, svc: Service
) -> dict[str, Any]:
    svc.session(session_id)
    finished = {"reason": req.reason or {"type": "success"}, "detail": req.detail}
    svc.registry.sessions.update(session_id, finished=finished)
    return {"status": "ok"}


@router.get("/sessions")
async def list_sessions(svc: Service, limit: int = 20, offset: int = 0) -> dict[str, Any]:
    rows = svc.registry.sessions.select(order="created DESC", limit=limit, offset=offset)
    return {"sessions": [r.session_id for r in rows]}


@router.get("/sessions/{session_id}")
async def get_session(session_id: str, svc: Service) -> dict[str, Any]:
    row = svc.session(session_id)
    runs = svc.registry.runs.select("session_id=?", (session_id,))
    samplers = svc.registry.samplers.select("session_id=?", (session_id,))
    return {
        "training_run_ids": [r.model_id for r in runs],
        "sampler_ids": [s.sampler_id for s in samplers],
        "user_metadata": str_metadata(row.user_metadata),
        "display_name": row.display_name,
    }


@router.post("/sessions/search")
async def search_sessions(req: wire.SessionSearchRequest, svc: Service) -> dict[str, Any]:
    where, params = "1", []
    if req.cursor is not None:
        try:
            last = datetime.fromisoformat(str(req.cursor["last_created_at"])).timestamp()
            last_id = str(req.cursor["last_session_id"])
        except (KeyError, ValueError) as e:
            raise HTTPException(400, f"bad cursor: {e}") from e
        where = "(created < ? OR (created = ? AND session_id < ?))"
        params = [last, last, last_id]
    rows = svc.registry.sessions.select(where, tuple(params), order="created DESC, session_id DESC")
    found = [r for r in rows if _matches(r, req)]
    page = found[: req.limit]
    more = len(found) > req.limit
    cursor = (
        {"last_created_at": iso(page[-1].created), "last_session_id": page[-1].session_id}
        if more
        else None
    )
    return {"sessions": [_summary(svc, r) for r in page], "next_cursor": cursor}


def _summary(svc: TinkerService, row: SessionRow) -> dict[str, Any]:
    """A session as the SDK's `SessionSummary`."""
    ckpts = svc.registry.checkpoints.select(
        "model_id IN (SELECT model_id FROM training_runs WHERE session_id=?)",
        (row.session_id,),
    )
    return {
        "session_id": row.session_id,
        "created_at": iso(row.created),
        "owner": "local",
        "project_id": row.project_id or "local",
        "status": _status(row),
        "checkpoints_count": len(ckpts),
        "display_name": row.display_name,
        "user_metadata": str_metadata(row.user_metadata),
        "checkpoint_storage_bytes": sum(c.size_bytes for c in ckpts),
    }


def _status(row: SessionRow) -> dict[str, Any]:
    """The SDK's `SessionStatus` of a session: active, or finished by its client."""
    if row.finished is None:
        return {"type": "active"}
    reason = row.finished.get("reason") or {"type": "success"}
    return {"type": "client_finished", "reason": reason, "detail": row.finished.get("detail")}


def _matches(row: SessionRow, req: wire.SessionSearchRequest) -> bool:
    """Whether a session passes a search's filters (see `tinker.types.SessionSearchRequest`)."""
    if req.session_id is not None or req.display_name is not None:
        by_id = req.session_id is not None and row.session_id == req.session_id
        words = (req.display_name or "").lower().split()
        name = (row.display_name or "").lower()
        by_name = req.display_name is not None and all(w in name for w in words)
        if not (by_id or by_name):
            return False
    meta = str_metadata(row.user_metadata)
    if any(meta.get(k) != v for k, v in req.user_metadata.items()):
        return False
    if req.statuses is not None:
        status = _status(row)
        for query in req.statuses:
            if query.get("type") != status["type"]:
                continue
            reasons = query.get("reasons")
            if reasons is None or status.get("reason", {}).get("type") in reasons:
                return True
        return False
    return True
