"""The server's SQLite state: request futures, plus sessions, training runs, checkpoints and
samplers, so that a restarted server knows what existed before it.

Futures: every submitted request gets a row (`pending`); the worker stores its result (`done`,
JSON) or its error (`failed`); a client may cancel a sampling request (`cancelled`). Long-polls
wait on an in-process `asyncio.Event`. The records of this process's requests are also kept in
memory (every pending one, and the last `FutureStore.keep` settled ones): a poll reads its
result there, as Python objects, without a query or a JSON round trip, and a settling worker
wakes the poller before it writes the row (the write is for restarts, not for the poll). When a
server starts on an existing database, rows still `pending` from the previous process become
`lost`, and polling them returns an error naming the restart instead of an unknown id.

Registry: one row per session, training run (model id), checkpoint (tinker:// path) and
sampler. Weights live in directories under the state dir; the rows say what they are, when
they expire, and from which saved state a training run can be rebuilt after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import sqlite3
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Generic, TypeVar

DB_NAME = "tinker.sqlite"
"""File name of the database inside the server's state dir."""


class FutureState(StrEnum):
    """Lifecycle of a request."""

    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"
    LOST = "lost"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class FutureRecord:
    """One request's row."""

    request_id: str
    """The id the client polls with."""
    kind: str
    """The request type: create_model, forward_backward, optim_step, sample, ..."""
    model_id: str | None
    """The training run it belongs to (None for sampling)."""
    state: FutureState
    """Where the request is in its lifecycle."""
    result: Any
    """The JSON result when done, or `{"error", "category"}` when failed, lost or cancelled."""


def _connect(path: Path | str) -> sqlite3.Connection:
    db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    # No fsync per commit (WAL stays consistent; only an OS crash can drop the last commits):
    # with the default FULL, the 4-5 writes of each training call cost ~2 ms each here, the
    # largest part of the server's per-call overhead.
    db.execute("PRAGMA synchronous=NORMAL")
    return db


class FutureStore:
    """SQLite-backed futures with asyncio waiters for long-polling (thread-safe writes)."""

    def __init__(self, path: Path | str, keep: int = 1024):
        self.keep = keep
        """How many settled records stay in memory (older ones are read back from SQLite)."""
        self._db = _connect(path)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS futures (request_id TEXT PRIMARY KEY, kind TEXT NOT NULL,"
            " model_id TEXT, state TEXT NOT NULL, result TEXT, created REAL, finished REAL)"
        )
        self._lock = threading.Lock()
        self._events: dict[str, asyncio.Event] = {}
        """Pollers' wake-ups of the pending requests."""
        self._records: dict[str, FutureRecord] = {}
        """This process's pending records and its last `keep` settled ones."""
        self._settled: deque[str] = deque()
        """The settled ids in `_records`, oldest first."""
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
            self._records[request_id] = FutureRecord(
                request_id, kind, model_id, FutureState.PENDING, None
            )
            self._events[request_id] = asyncio.Event()
        return request_id

    def finish(self, request_id: str, result: Any, *, failed: bool = False) -> None:
        """Store a result (any thread) and wake the pollers; a no-op unless still pending."""
        state = FutureState.FAILED if failed else FutureState.DONE
        self._settle(request_id, state, result)

    def cancel(
        self, request_id: str, reason: str = "the request was cancelled by the client"
    ) -> bool:
        """Mark a pending request cancelled (any thread), saying why; False if it had
        already settled."""
        error = {"error": reason, "category": "user"}
        return self._settle(request_id, FutureState.CANCELLED, error)

    def _settle(self, request_id: str, state: FutureState, result: Any) -> bool:
        """Settle a pending request: in memory and its poller woken first, then the row."""
        with self._lock:
            record = self._records.get(request_id)
            if record is None or record.state is not FutureState.PENDING:
                return False  # unknown to this process, or settled already
            self._records[request_id] = dataclasses.replace(record, state=state, result=result)
            self._settled.append(request_id)
            while len(self._settled) > self.keep:
                self._records.pop(self._settled.popleft(), None)
            event = self._events.pop(request_id, None)
        if event is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(event.set)
        encoded = json.dumps(result)
        with self._lock:
            self._db.execute(
                "UPDATE futures SET state=?, result=?, finished=? WHERE request_id=? AND state=?",
                (state.value, encoded, time.time(), request_id, FutureState.PENDING),
            )
        return True

    def get(self, request_id: str) -> FutureRecord | None:
        """The current record of `request_id`, or None if unknown."""
        record = self._records.get(request_id)
        if record is not None:
            return record
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

    def ids(self, kind: str, state: FutureState) -> list[str]:
        """Ids of the requests of `kind` in `state`, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT request_id FROM futures WHERE kind=? AND state=? ORDER BY created",
                (kind, state.value),
            ).fetchall()
        return [r[0] for r in rows]

    async def wait(self, request_id: str, timeout: float) -> FutureRecord | None:
        """The row once it is no longer pending, or the pending row after `timeout` seconds."""
        record = self.get(request_id)
        if record is None or record.state is not FutureState.PENDING:
            return record
        event = self._events.get(request_id)  # None: settled since the read above
        if event is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout)
        return self.get(request_id)

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()


# -- registry -------------------------------------------------------------------------------


class CheckpointKind(StrEnum):
    """The kinds of saved weights, named as in tinker:// paths."""

    TRAINING = "weights"
    """`save_state`: trained weights plus optimizer state."""
    SAMPLER = "sampler_weights"
    """`save_weights_for_sampler`: weights only."""

    @property
    def api_type(self) -> str:
        """The SDK's `Checkpoint.checkpoint_type` for this kind."""
        return "training" if self is CheckpointKind.TRAINING else "sampler"


@dataclass(frozen=True)
class SessionRow:
    """A client session (`create_session`)."""

    session_id: str
    """The id the SDK sends with its requests."""
    created: float
    """Unix time of creation."""
    tags: list[str]
    """Tags the client sent."""
    user_metadata: dict[str, Any]
    """Metadata the client attached."""
    display_name: str | None
    """Optional human-readable name."""
    project_id: str | None
    """Project the client named (recorded only; a local server has no projects)."""
    finished: dict[str, Any] | None
    """The client's finish reason (`sessions/{id}/finish`), None while active."""


@dataclass(frozen=True)
class RunRow:
    """A training run: one trainable model id and how to rebuild it after a restart."""

    model_id: str
    """`{session_id}:train:{model_seq_id}`, also the training run id."""
    session_id: str
    """The session that created it."""
    base_model: str
    """Name of the served base model."""
    lora: dict[str, Any] | None
    """LoRA settings (`LoraSpec` fields), None for full-weight training."""
    user_metadata: dict[str, Any]
    """Metadata the client attached at creation."""
    created: float
    """Unix time of creation."""
    last_request: float
    """Unix time of the last request that reached the model."""
    next_seq: int
    """The seq_id after the highest one accepted: where a restored model's queue resumes."""
    version: int
    """Completed requests that changed the model (forward_backward, optim_step, load)."""
    restore_dir: str | None
    """Saved state to rebuild from, relative to the state dir (None: the fresh base model)."""
    restore_version: int
    """`version` when that state was saved; a rebuild is exact only if it equals `version`."""
    restore_optimizer: bool
    """Whether the saved state includes the optimizer state."""
    restore_grads: bool
    """Whether the saved state includes accumulated gradients (shutdown autosaves do)."""
    unloaded: bool
    """Set by `unload_model`: the model is gone for good."""


@dataclass(frozen=True)
class CheckpointRow:
    """Saved weights, addressed by their tinker:// path."""

    tinker_path: str
    """`tinker://{model_id}/{kind}/{name}`."""
    model_id: str
    """The training run that saved it."""
    kind: str
    """A `CheckpointKind` value."""
    name: str
    """The name the client gave."""
    created: float
    """Unix time it was (last) written."""
    size_bytes: int
    """Bytes on disk."""
    public: bool
    """Set by publish, cleared by unpublish (a flag only: a local server has one user)."""
    expires_at: float | None
    """Unix time after which it is deleted (None: never)."""
    user_metadata: dict[str, Any]
    """Metadata the client attached."""
    optimizer: bool
    """Whether the optimizer state was saved too."""


@dataclass(frozen=True)
class SamplerRow:
    """A sampling session and where its weights come from."""

    sampler_id: str
    """The sampling_session_id the SDK sends."""
    session_id: str
    """The session that created it."""
    base_model: str
    """The served base model underneath."""
    model_path: str | None
    """The tinker:// path it samples from (None: base weights or an in-memory snapshot)."""
    snapshot_of: str | None
    """Model id whose in-memory weights it copied (`save_weights_and_get_sampling_client`);
    such a sampler cannot be rebuilt after a restart."""
    created: float
    """Unix time of creation."""


Row = TypeVar("Row")


class _Table(Generic[Row]):
    """A table holding one frozen dataclass per row; dict and list fields are stored as JSON."""

    def __init__(
        self, db: sqlite3.Connection, lock: threading.Lock, name: str, cls: type[Row], key: str
    ):
        self._db, self._lock, self.name, self._cls, self._key = db, lock, name, cls, key
        self._fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        self._json = {
            f.name
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if "dict" in str(f.type) or "list" in str(f.type)
        }
        self._bool = {f.name for f in dataclasses.fields(cls) if str(f.type) == "bool"}  # type: ignore[arg-type]
        cols = ", ".join(self._fields)
        with lock:
            db.execute(f"CREATE TABLE IF NOT EXISTS {name} ({cols}, PRIMARY KEY ({key}))")

    def _encode(self, name: str, value: Any) -> Any:
        return json.dumps(value) if name in self._json else value

    def _decode(self, row: tuple[Any, ...]) -> Row:
        values = {}
        for name, value in zip(self._fields, row, strict=True):
            if name in self._json:
                value = json.loads(value) if value is not None else None
            elif name in self._bool:
                value = bool(value)
            values[name] = value
        return self._cls(**values)

    def put(self, row: Row) -> None:
        """Insert or replace `row`."""
        values = [self._encode(n, getattr(row, n)) for n in self._fields]
        marks = ",".join("?" * len(values))
        with self._lock:
            self._db.execute(f"INSERT OR REPLACE INTO {self.name} VALUES ({marks})", values)

    def get(self, key: str) -> Row | None:
        """The row with primary key `key`, or None."""
        rows = self.select(f"{self._key}=?", (key,))
        return rows[0] if rows else None

    def update(self, key: str, **changes: Any) -> None:
        """Change some fields of the row with primary key `key`."""
        sets = ", ".join(f"{n}=?" for n in changes)
        values = [self._encode(n, v) for n, v in changes.items()]
        with self._lock:
            self._db.execute(f"UPDATE {self.name} SET {sets} WHERE {self._key}=?", [*values, key])

    def delete(self, key: str) -> None:
        """Remove the row with primary key `key` (if any)."""
        with self._lock:
            self._db.execute(f"DELETE FROM {self.name} WHERE {self._key}=?", (key,))

    def select(
        self,
        where: str = "1",
        params: tuple[Any, ...] = (),
        *,
        order: str = "created",
        limit: int = -1,
        offset: int = 0,
    ) -> list[Row]:
        """Rows matching `where`, ordered, one page."""
        cols = ", ".join(self._fields)
        sql = f"SELECT {cols} FROM {self.name} WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?"
        with self._lock:
            rows = self._db.execute(sql, (*params, limit, offset)).fetchall()
        return [self._decode(r) for r in rows]

    def count(self, where: str = "1", params: tuple[Any, ...] = ()) -> int:
        """How many rows match `where`."""
        with self._lock:
            return int(
                self._db.execute(
                    f"SELECT COUNT(*) FROM {self.name} WHERE {where}", params
                ).fetchone()[0]
            )


class Registry:
    """Sessions, training runs, checkpoints and samplers (thread-safe)."""

    def __init__(self, path: Path | str):
        self._db = _connect(path)
        self._lock = threading.Lock()
        self.sessions = _Table(self._db, self._lock, "sessions", SessionRow, "session_id")
        self.runs = _Table(self._db, self._lock, "training_runs", RunRow, "model_id")
        self.checkpoints = _Table(self._db, self._lock, "checkpoints", CheckpointRow, "tinker_path")
        self.samplers = _Table(self._db, self._lock, "samplers", SamplerRow, "sampler_id")

    def latest_checkpoint(self, model_id: str, kind: CheckpointKind) -> CheckpointRow | None:
        """The newest checkpoint of `kind` saved by `model_id`."""
        rows = self.checkpoints.select(
            "model_id=? AND kind=?", (model_id, kind.value), order="created DESC", limit=1
        )
        return rows[0] if rows else None

    def expired(self, now: float) -> list[CheckpointRow]:
        """Checkpoints whose TTL has run out."""
        return self.checkpoints.select("expires_at IS NOT NULL AND expires_at <= ?", (now,))

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()
