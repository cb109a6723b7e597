"""Client sessions of the Tinker service: create, heartbeat, finish, and the REST views
(list, get, search) as the SDK's shapes."""

from __future__ import annotations

import itertools
import time
import uuid
from datetime import datetime

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.errors import ServiceError, Status
from skyrl_sdk.trainer.tinker.store import Registry, SessionRow
from skyrl_sdk.trainer.tinker.views import iso, str_metadata


class Sessions:
    """The sessions in the registry."""

    def __init__(self, registry: Registry):
        self.registry = registry
        self.session_ids = itertools.count(1)

    def session(self, session_id: str) -> SessionRow:
        """The session's row (404 if unknown)."""
        row = self.registry.sessions.get(session_id)
        if row is None:
            raise ServiceError(Status.NOT_FOUND, f"unknown session {session_id!r}")
        return row

    def create_session(self, req: wire.CreateSessionRequest) -> wire.CreateSessionReply:
        """Record a new client session."""
        session_id = f"sess-{next(self.session_ids)}-{uuid.uuid4().hex[:8]}"
        self.registry.sessions.put(
            SessionRow(
                session_id=session_id,
                created=time.time(),
                tags=list(req.tags),
                user_metadata=dict(req.user_metadata or {}),
                display_name=req.display_name,
                project_id=req.project_id,
                finished=None,
            )
        )
        return wire.CreateSessionReply(session_id=session_id)

    def heartbeat(self, req: wire.SessionRequest) -> wire.HeartbeatReply:
        """A live session's heartbeat (410 once its client finished it: the SDK stops)."""
        if self.session(req.session_id).finished is not None:
            raise ServiceError(Status.GONE, f"session {req.session_id} has finished")
        return wire.HeartbeatReply()

    def finish(self, session_id: str, req: wire.FinishSessionRequest) -> wire.StatusOk:
        """Record that the client finished the session, and why."""
        self.session(session_id)
        finished = {"reason": req.reason or {"type": "success"}, "detail": req.detail}
        self.registry.sessions.update(session_id, finished=finished)
        return wire.StatusOk()

    def list_sessions(self, limit: int, offset: int) -> wire.SessionIds:
        """A page of session ids, newest first."""
        rows = self.registry.sessions.select(order="created DESC", limit=limit, offset=offset)
        return wire.SessionIds(sessions=[r.session_id for r in rows])

    def session_info(self, session_id: str) -> wire.SessionInfo:
        """The SDK's `GetSessionResponse` (404 if unknown)."""
        row = self.session(session_id)
        runs = self.registry.runs.select("session_id=?", (session_id,))
        samplers = self.registry.samplers.select("session_id=?", (session_id,))
        return wire.SessionInfo(
            training_run_ids=[r.model_id for r in runs],
            sampler_ids=[s.sampler_id for s in samplers],
            user_metadata=str_metadata(row.user_metadata),
            display_name=row.display_name,
        )

    def search(self, req: wire.SessionSearchRequest) -> wire.SessionSearchReply:
        """The sessions passing a search's filters, a page at a time (400: bad cursor)."""
        where, params = "1", []
        if req.cursor is not None:
            try:
                last = datetime.fromisoformat(str(req.cursor["last_created_at"])).timestamp()
                last_id = str(req.cursor["last_session_id"])
            except (KeyError, ValueError) as e:
                raise ServiceError(Status.BAD_REQUEST, f"bad cursor: {e}") from e
            where = "(created < ? OR (created = ? AND session_id < ?))"
            params = [last, last, last_id]
        rows = self.registry.sessions.select(
            where, tuple(params), order="created DESC, session_id DESC"
        )
        found = [r for r in rows if _matches(r, req)]
        page = found[: req.limit]
        cursor = (
            wire.SessionCursor(
                last_created_at=iso(page[-1].created), last_session_id=page[-1].session_id
            )
            if len(found) > req.limit
            else None
        )
        return wire.SessionSearchReply(
            sessions=[self._summary(r) for r in page], next_cursor=cursor
        )

    def _summary(self, row: SessionRow) -> wire.SessionSummary:
        """A session as the SDK's `SessionSummary`."""
        ckpts = self.registry.checkpoints.select(
            "model_id IN (SELECT model_id FROM training_runs WHERE session_id=?)",
            (row.session_id,),
        )
        return wire.SessionSummary(
            session_id=row.session_id,
            created_at=iso(row.created),
            owner="local",
            project_id=row.project_id or "local",
            status=status_of(row),
            checkpoints_count=len(ckpts),
            display_name=row.display_name,
            user_metadata=str_metadata(row.user_metadata),
            checkpoint_storage_bytes=sum(c.size_bytes for c in ckpts),
        )


def status_of(row: SessionRow) -> wire.ActiveStatus | wire.FinishedStatus:
    """The SDK's `SessionStatus` of a session: active, or finished by its client."""
    if row.finished is None:
        return wire.ActiveStatus()
    reason = row.finished.get("reason") or {"type": "success"}
    return wire.FinishedStatus(reason=reason, detail=row.finished.get("detail"))


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
        status = status_of(row)
        reason = status.reason.get("type") if isinstance(status, wire.FinishedStatus) else None
        for query in req.statuses:
            if query.get("type") != status.type:
                continue
            reasons = query.get("reasons")
            if reasons is None or reason in reasons:
                return True
        return False
    return True
