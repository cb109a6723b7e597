"""Caps on every SQL query the SDK runs for a model or a grader: rows, bytes, memory and time.

One `SQLLimits` (by default `DEFAULT_SQL_LIMITS`) is used by every path that runs SQL: the `sql`
env's exploration queries and its reward (solution and gold), the `sql-basic` env's `sql` tool,
and `skyrl text2sql eval` (predictions and gold). A query that hits a cap ends with a clear
outcome (a truncated result with a visible marker, an error observation, or a failed
comparison); it never takes the process down.

How each cap is enforced:

- **rows and bytes** (`fetch_capped`): results are fetched in small batches, counting rows and
  the bytes of their text and blobs (8 per other value); fetching stops at the first row past a
  cap, so at most one batch past the cap is ever held. SQLite also refuses any single string or
  blob larger than the byte cap (`SQLITE_LIMIT_LENGTH`), so one value cannot exceed it.
- **memory** (`QueryGuard`): the process's resident memory when the query starts is the base; a
  query that grows it by more than the budget is interrupted. SQLite's progress handler checks
  it (and the deadline) every few thousand VM instructions, and a watchdog thread checks every
  few milliseconds and calls the connection's `interrupt()`, which also stops work that
  allocates a lot within few instructions (sorting rows of large blobs). SQLite keeps temporary
  tables and sort runs in memory (`PRAGMA temp_store = MEMORY`) so they count against this
  budget instead of filling the disk. DuckDB gets `memory_limit`, `threads` and no spilling
  (`max_temp_directory_size`). Resident memory is read from `/proc/self/statm`; where that file
  does not exist (not Linux), only the engine's own limits and the row/byte caps apply.
- **time**: the deadline is checked by the same progress handler and watchdog (PostgreSQL uses
  `statement_timeout`).

The memory base is the whole process: growth from anything else running at the same time
(another query in another thread, a trainer loading data) counts too, so a query may be stopped
early; the bound errs on that side. What can still pass it: what a query allocates within one
watchdog interval, and single values of engines without a length limit (a DuckDB value is
bounded by its `memory_limit`; a PostgreSQL row arrives whole, up to the server's 1 GB per
value, before the byte cap sees it).
"""

from __future__ import annotations

import contextlib
import enum
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_SQL_LIMITS",
    "Fetched",
    "QueryGuard",
    "SQLCap",
    "SQLLimits",
    "cap_message",
    "clip_text",
    "fetch_capped",
    "format_bytes",
    "rss_bytes",
    "truncation_marker",
]

MiB = 1024 * 1024


@dataclass(frozen=True)
class SQLLimits:
    """The caps on one query. Every field has a default that suits Text-to-SQL benchmarks (Spider,
    BIRD) and agent exploration; a query under every cap behaves exactly as without caps."""

    max_rows: int = 10_000
    """Rows a result may have. A query returning more is stopped at the first extra row: an
    exploration shows the rows fetched with a truncation marker; a solution, prediction or gold
    query fails (reward 0, status `pred_too_large`), since a partial result cannot be compared."""
    max_result_bytes: int = 16 * MiB
    """Bytes a result may hold (lengths of text and blobs, 8 per number or NULL); also the
    largest single string or blob SQLite may build while running the query. Past it, the query
    stops as for `max_rows`."""
    max_memory_growth_bytes: int = 256 * MiB
    """How much the process's resident memory may grow while one query runs (sorts, temporary
    tables, recursive CTE queues, fetched rows). Past it, the query is interrupted and fails.
    Also DuckDB's `memory_limit`."""
    timeout_s: float = 30.0
    """Time limit of a query when the caller gives none (the envs and metrics pass their own:
    5 s per exploration, 30 s per reward query, 60 s per Spider query)."""
    max_observation_chars: int = 32_768
    """Characters of a query result an observation may show; a longer one is cut, with a
    `[... truncated: N more characters ...]` marker."""
    duckdb_threads: int = 1
    """Threads a DuckDB database may use for a query."""
    duckdb_temp_bytes: int = 0
    """Disk DuckDB may spill to when a query passes `max_memory_growth_bytes` (0: none; the
    query fails instead of writing next to the database)."""
    watch_interval_s: float = 0.002
    """How often the watchdog thread checks memory and deadlines of running queries."""

    def __post_init__(self) -> None:
        for name in ("max_rows", "max_result_bytes", "max_memory_growth_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"SQLLimits.{name} must be at least 1, got {getattr(self, name)}")
        if self.timeout_s <= 0 or self.watch_interval_s <= 0:
            raise ValueError("SQLLimits.timeout_s and watch_interval_s must be positive")
        if self.max_observation_chars < 100:
            raise ValueError("SQLLimits.max_observation_chars must be at least 100")


DEFAULT_SQL_LIMITS = SQLLimits()
"""The caps every SQL path uses unless it is given others."""


class SQLCap(enum.Enum):
    """Which cap stopped a query."""

    ROWS = "rows"
    """The result had more than `max_rows` rows."""
    BYTES = "bytes"
    """The result held more than `max_result_bytes` bytes (or built a value that large)."""
    MEMORY = "memory"
    """The process's memory grew by more than `max_memory_growth_bytes` during the query."""
    TIME = "time"
    """The query ran past its deadline."""


def format_bytes(n: int) -> str:
    """`16 MiB`, `1.5 GiB`, `512 bytes`."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            value = n / size
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


def cap_message(cap: SQLCap, limits: SQLLimits, timeout_s: float | None = None) -> str:
    """One sentence saying which cap stopped the query, for observations and reports."""
    if cap is SQLCap.ROWS:
        return (
            f"the result has more than {limits.max_rows:,} rows (the row cap); "
            "add a LIMIT or aggregate"
        )
    if cap is SQLCap.BYTES:
        return (
            f"the result (or a value the query built) is larger than "
            f"{format_bytes(limits.max_result_bytes)} (the result size cap)"
        )
    if cap is SQLCap.MEMORY:
        return (
            f"the query used more than {format_bytes(limits.max_memory_growth_bytes)} of memory "
            "(the memory cap) and was stopped"
        )
    limit = limits.timeout_s if timeout_s is None else timeout_s
    return f"query exceeded the {limit:g} s time limit"


def truncation_marker(detail: str) -> str:
    """The visible marker put where an observation was cut: `[... truncated: DETAIL ...]`."""
    return f"[... truncated: {detail} ...]"


def clip_text(text: str, max_chars: int) -> str:
    """`text` if it fits in `max_chars`, else its first characters and a marker saying how many
    more there were (the result, marker included, is at most `max_chars` + 60 characters)."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n{truncation_marker(f'{len(text) - max_chars:,} more characters')}"


# ---- memory -------------------------------------------------------------------------------------

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_STATM: dict[str, int] = {}  # {"pid": pid, "fd": fd}: /proc/<pid>/statm kept open (pread is cheap)
_STATM_LOCK = threading.Lock()


def rss_bytes() -> int | None:
    """The process's resident memory in bytes, or None where `/proc/self/statm` does not exist."""
    pid = os.getpid()
    fd = _STATM.get("fd") if _STATM.get("pid") == pid else None
    if fd is None:
        with _STATM_LOCK:
            if _STATM.get("pid") != pid:  # first call, or a forked child (the fd names the parent)
                try:
                    _STATM["fd"] = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    _STATM["fd"] = -1
                _STATM["pid"] = pid
            fd = _STATM["fd"]
    if fd < 0:
        return None
    try:
        return int(os.pread(fd, 128, 0).split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


class QueryGuard:
    """The deadline and memory budget of one running query.

    Use it as a context manager around executing and fetching. `should_stop()` is the SQLite
    progress handler (true: abort the query); while the guard is active, a watchdog thread
    also checks it every `limits.watch_interval_s` and calls `interrupt` when the query must
    stop. Afterwards `hit` says why it stopped (`SQLCap.TIME` or `SQLCap.MEMORY`), or is None.
    """

    def __init__(
        self,
        limits: SQLLimits,
        timeout_s: float,
        interrupt: Callable[[], Any] | None = None,
    ) -> None:
        self.limits = limits
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.base_rss = rss_bytes()
        self.hit: SQLCap | None = None
        self._interrupt = interrupt
        self._lock = threading.Lock()

    def _check(self, rss: int | None) -> SQLCap | None:
        if self.hit is not None:
            return self.hit
        if time.monotonic() > self.deadline:
            self.hit = SQLCap.TIME
        elif (
            rss is not None
            and self.base_rss is not None
            and rss - self.base_rss > self.limits.max_memory_growth_bytes
        ):
            self.hit = SQLCap.MEMORY
        return self.hit

    def should_stop(self) -> bool:
        """Whether the query must stop now (its deadline passed or memory grew past the budget)."""
        return self._check(rss_bytes()) is not None

    def memory_exceeded(self) -> bool:
        """Check memory now (after fetching a batch); records `SQLCap.MEMORY` when past budget."""
        return self._check(rss_bytes()) is SQLCap.MEMORY

    def _watch(self, rss: int | None) -> None:
        """Called by the watchdog: interrupt the query if it must stop."""
        if self._check(rss) is None:
            return
        # Under the lock, so `__exit__` (and a close of the connection after it) waits for it.
        with self._lock:
            interrupt, self._interrupt = self._interrupt, None  # interrupt once
            if interrupt is not None:
                # A connection closing under us has nothing left to stop.
                with contextlib.suppress(Exception):
                    interrupt()

    def __enter__(self) -> QueryGuard:
        _WATCHDOG.add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _WATCHDOG.discard(self)
        with self._lock:  # after this the watchdog never touches the connection again
            self._interrupt = None


class _Watchdog:
    """One daemon thread per process that polls the active guards; it sleeps on a condition
    while no query runs, so idle processes pay nothing."""

    def __init__(self) -> None:
        self._guards: weakref.WeakSet[QueryGuard] = weakref.WeakSet()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def add(self, guard: QueryGuard) -> None:
        with self._cond:
            if self._thread is None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="skyrl-sql-watchdog", daemon=True
                )
                self._thread.start()
            self._guards.add(guard)
            self._cond.notify()

    def discard(self, guard: QueryGuard) -> None:
        with self._cond:
            self._guards.discard(guard)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._guards:
                    self._cond.wait()
                guards = list(self._guards)
                interval = min(g.limits.watch_interval_s for g in guards)
            rss = rss_bytes()
            for guard in guards:
                guard._watch(rss)
            del guards
            time.sleep(interval)


_WATCHDOG = _Watchdog()


def _reset_after_fork() -> None:
    global _WATCHDOG
    _WATCHDOG = _Watchdog()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


# ---- fetching -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fetched:
    """Rows fetched under the caps."""

    rows: list[tuple[Any, ...]]
    """The rows kept, in order."""
    truncated: bool
    """More rows existed than were kept (the caller's own row count, or a cap)."""
    cap: SQLCap | None
    """The cap that stopped fetching (`ROWS`, `BYTES` or `MEMORY`), or None."""


RowKeep = int | Callable[[tuple[str, ...]], int] | None
"""Rows the caller wants: a number, a function of the column names, or None for all."""

_SIZED = (str, bytes, bytearray, memoryview)
_MAX_BATCH = 1024


def _batch_bytes(batch: Sequence[Sequence[Any]]) -> Iterator[int]:
    for row in batch:
        n = 0
        for value in row:
            n += len(value) if isinstance(value, _SIZED) else 8
        yield n


def fetch_capped(
    cursor: Any,
    limits: SQLLimits,
    keep: RowKeep = None,
    guard: QueryGuard | None = None,
) -> Fetched:
    """Fetch rows from a DB-API cursor until the result ends, `keep` rows are kept, or a cap
    (rows, bytes, or the guard's memory budget) is reached.

    Batches start at one row and grow while rows stay small, so a result of huge values is never
    fetched more than one row past the byte cap."""
    rows: list[tuple[Any, ...]] = []
    wanted: int | None = keep if isinstance(keep, int) else None
    resolved = not callable(keep)
    total = 0
    largest = 1
    batch_size = 1
    while True:
        batch = cursor.fetchmany(batch_size)
        if not resolved:  # some drivers (server-side cursors) describe columns only now
            wanted = keep(tuple(d[0] for d in cursor.description or ()))  # type: ignore[operator]
            resolved = True
        if not batch:
            return Fetched(rows, False, None)
        for row, size in zip(batch, _batch_bytes(batch), strict=True):
            if wanted is not None and len(rows) >= wanted:
                return Fetched(rows, True, None)
            if len(rows) >= limits.max_rows:
                return Fetched(rows, True, SQLCap.ROWS)
            total += size
            if total > limits.max_result_bytes:
                return Fetched(rows, True, SQLCap.BYTES)
            largest = max(largest, size)
            rows.append(tuple(row))
        if guard is not None and guard.memory_exceeded():
            return Fetched(rows, True, SQLCap.MEMORY)
        # Never ask for more rows than could still be kept (nor, for big rows, than fit).
        need = limits.max_rows - len(rows) + 1
        if wanted is not None:
            need = min(need, wanted - len(rows) + 1)
        room = (limits.max_result_bytes - total) // largest
        batch_size = max(1, min(_MAX_BATCH, room, need, batch_size * 4))
