"""Client sessions of the Tinker service: create one, look one up."""

from __future__ import annotations

import itertools
import time
import uuid

from skyrl_sdk.trainer.tinker import wire
from skyrl_sdk.trainer.tinker.errors import ServiceError, Status
from skyrl_sdk.trainer.tinker.store import Registry, SessionRow


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
