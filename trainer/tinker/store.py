"""Requests and their futures, recorded in SQLite so a restarted server can say what happened.

Every submitted request gets a row (`pending`); the worker stores its result (`done`, JSON) or
its error (`failed`). Long-polls wait on an in-process `asyncio.Event`. When a server starts on
an existing database, rows still `pending` from the previous process become `lost`, and polling
them returns an error naming the restart instead of an unknown id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any


class FutureState(StrEnum):
    """Lifecycle of a request."""

    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"
    LOST = "lost"


@dataclass(frozen=True)
class FutureRecord:
    """One request's row."""

    request_id: str
    kind: str
    """The request type: create_model, forward_backward, optim_step, sample, ..."""
    model_id: str | None
    state: FutureState
    result: Any
    """The JSON result when done, or `{"error", "category"}` when failed or lost."""


class FutureStore:
    """SQLite-backed futures with asyncio waiters for long-polling (thread-safe writes)."""

    def __init__(self, path: Path | str):
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS futures (request_id TEXT PRIMARY KEY, kind TEXT NOT NULL,"
            " model_id TEXT, state TEXT NOT NULL, result TEXT, created REAL, finished REAL)"
        )
        self._lock = threading.Lock()
        self._events: dict[str, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        lost = json.dumps(
            {"error": "the server restarted before this request finished", "category": "server"}
        )
        with self._lock:
            self._db.execute(
                "UPDATE futures SET state=?, result=? WHERE state=?",
                (FutureState.LOST.value, lost, FutureState.PENDING.value),
            )

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach the event loop that long-polls run on."""
        self._loop = loop

    def create(self, kind: str, model_id: str | None) -> str:
        """Record a new pending request; returns its id."""
        request_id = f"req-{uuid.uuid4().hex[:16]}"
        with self._lock:
            self._db.execute(
                "INSERT INTO futures VALUES (?,?,?,?,?,?,?)",
                (request_id, kind, model_id, FutureState.PENDING.value, None, time.time(), None),
            )
        self._events[request_id] = asyncio.Event()
        return request_id

    def finish(self, request_id: str, result: Any, *, failed: bool = False) -> None:
        """Store a result (any thread) and wake the pollers."""
        state = FutureState.FAILED if failed else FutureState.DONE
        with self._lock:
            self._db.execute(
                "UPDATE futures SET state=?, result=?, finished=? WHERE request_id=?",
                (state.value, json.dumps(result), time.time(), request_id),
            )
        event = self._events.get(request_id)
        if event is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(event.set)

    def get(self, request_id: str) -> FutureRecord | None:
        """The current row of `request_id`, or None if unknown."""
        with self._lock:
            row = self._db.execute(
                "SELECT request_id, kind, model_id, state, result FROM futures WHERE request_id=?",
                (request_id,),
            ).fetchone()
        if row is None:
            return None
        return FutureRecord(
            row[0], row[1], row[2], FutureState(row[3]), json.loads(row[4]) if row[4] else None
        )

    async def wait(self, request_id: str, timeout: float) -> FutureRecord | None:
        """The row once it is no longer pending, or the pending row after `timeout` seconds."""
        record = self.get(request_id)
        if record is None or record.state is not FutureState.PENDING:
            return record
        event = self._events.get(request_id)
        if event is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout)
        return self.get(request_id)

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()
