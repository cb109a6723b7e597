"""Read-only SQL execution over SQLAlchemy-style URLs, with time limits that interrupt queries.

`open_database(target)` accepts a SQLite file path, `sqlite:///path`, `duckdb:///path`, or any
other SQLAlchemy URL (e.g. `postgresql+psycopg://user@host/db`). Every backend refuses anything
but one read-only query, with layered guards:

1. a static check (`check_statement`): exactly one statement, and not a write, DDL, ATTACH,
   transaction control or a PRAGMA assignment;
2. the engine's own read-only mode: SQLite files open with `mode=ro`, `PRAGMA query_only` and
   an authorizer that allows only reads; DuckDB opens `read_only` with external access off and
   its configuration locked; other dialects run in a `READ ONLY` transaction that is rolled back.

Time limits interrupt the running query: SQLite through a progress handler, DuckDB through
`interrupt()` from a timer, PostgreSQL through `statement_timeout`, others through the DBAPI
connection's `cancel()` from a timer where the driver has one.
"""

from __future__ import annotations

import abc
import enum
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = [
    "DuckDBDatabase",
    "QueryOutcome",
    "QueryStatus",
    "ReadOnlyDatabase",
    "SQLAlchemyDatabase",
    "SQLRefused",
    "SQLiteDatabase",
    "check_statement",
    "min_table_chars",
    "open_database",
    "render_table",
    "split_statements",
]


class SQLRefused(ValueError):
    """A statement that is not a single read-only query."""


class QueryStatus(enum.Enum):
    """How a query ended."""

    OK = "ok"
    """It ran; `rows` holds the result."""
    ERROR = "error"
    """The database raised (syntax error, unknown column, ...)."""
    TIMEOUT = "timeout"
    """It ran past its time limit and was interrupted."""
    REFUSED = "refused"
    """It was not a single read-only query and did not run (or was stopped by a guard)."""


@dataclass(frozen=True)
class QueryOutcome:
    """The result of one query."""

    status: QueryStatus
    """How it ended."""
    columns: tuple[str, ...] = ()
    """Result column names, in order (empty unless `status` is OK)."""
    rows: tuple[tuple[Any, ...], ...] = ()
    """Result rows in the order the database returned them (at most `max_rows`)."""
    message: str = ""
    """The error, refusal or timeout message (empty when OK)."""
    truncated: bool = False
    """True when the query returned more than `max_rows` rows and only those were kept."""
    duration_s: float = 0.0
    """Wall time spent executing and fetching."""

    @property
    def ok(self) -> bool:
        return self.status is QueryStatus.OK


# ---- the static guard ---------------------------------------------------------------------------

_TOKENS = re.compile(
    r"'(?:[^']|'')*'?"  # string literal (possibly unterminated)
    r'|"(?:[^"]|"")*"?'  # quoted identifier
    r"|`[^`]*`?|\[[^\]]*\]?"  # MySQL / SQL Server quoted identifiers
    r"|--[^\n]*|/\*.*?(?:\*/|\Z)"  # comments
    r"|;",
    re.DOTALL,
)
_FIRST_WORD = re.compile(r"[\s(]*([A-Za-z_]+)")
_READ_KEYWORDS = frozenset({"SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA", "TABLE", "SHOW"})
_WRITE_HINT = {
    "ATTACH": "ATTACH is not allowed",
    "DETACH": "DETACH is not allowed",
    "PRAGMA": "PRAGMA changes are not allowed",
}


def split_statements(sql: str) -> list[str]:
    """Split on `;` outside literals and comments; drop statements that are only whitespace or
    comments. Used to refuse several statements in one query."""
    if ";" not in sql:
        return [sql] if _strip_comments(sql).strip() else []
    pieces: list[str] = []
    start = 0
    for match in _TOKENS.finditer(sql):
        if match.group() == ";":
            pieces.append(sql[start : match.start()])
            start = match.end()
    pieces.append(sql[start:])
    return [p for p in pieces if _strip_comments(p).strip()]


def _strip_comments(sql: str) -> str:
    if "--" not in sql and "/*" not in sql:
        return sql
    return _TOKENS.sub(lambda m: " " if m.group()[:2] in ("--", "/*") else m.group(), sql)


def check_statement(sql: str) -> str:
    """Return the single statement in `sql` (without a trailing `;`), or raise `SQLRefused`
    with a sentence saying why it will not run."""
    statements = split_statements(sql)
    if not statements:
        raise SQLRefused("refused: the query is empty")
    if len(statements) > 1:
        raise SQLRefused(
            f"refused: only one statement per query is allowed (found {len(statements)})"
        )
    statement = statements[0]
    match = _FIRST_WORD.match(_strip_comments(statement))
    word = match.group(1).upper() if match else ""
    if word == "PRAGMA" and "=" in _strip_comments(statement):
        raise SQLRefused("refused: PRAGMA changes are not allowed; the database is read-only")
    if word not in _READ_KEYWORDS:
        reason = _WRITE_HINT.get(word, f"{word or 'this'} statements are not allowed")
        raise SQLRefused(
            f"refused: {reason}; the database is read-only and only a single SELECT query may run"
        )
    return statement.strip()


# ---- backends -----------------------------------------------------------------------------------


class ReadOnlyDatabase(abc.ABC):
    """One read-only database. `execute` never raises for a bad query: the outcome says why.

    Instances are safe to share between threads (queries run one at a time).
    """

    url: str
    """Where the data lives, as a SQLAlchemy-style URL."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def execute(
        self, sql: str, *, timeout_s: float = 30.0, max_rows: RowLimit = None
    ) -> QueryOutcome:
        """Run one read-only query within `timeout_s` seconds, keeping at most `max_rows` rows
        (a number, or a function of the result's column names; None keeps every row)."""
        started = time.perf_counter()
        try:
            statement = check_statement(sql)
        except SQLRefused as e:
            return QueryOutcome(QueryStatus.REFUSED, message=str(e))
        with self._lock:
            outcome = self._run(statement, timeout_s, max_rows)
        return QueryOutcome(
            outcome.status,
            outcome.columns,
            outcome.rows,
            outcome.message,
            outcome.truncated,
            time.perf_counter() - started,
        )

    @abc.abstractmethod
    def _run(self, statement: str, timeout_s: float, max_rows: RowLimit) -> QueryOutcome:
        """Execute one statement that passed `check_statement`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the connection. Safe to call twice."""

    def __enter__(self) -> ReadOnlyDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


RowLimit = int | Callable[[tuple[str, ...]], int] | None
"""Rows to keep: a number, a function of the column names, or None for all."""


def _fetch(cursor: Any, max_rows: RowLimit) -> tuple[list[tuple[Any, ...]], bool]:
    if callable(max_rows):
        max_rows = max_rows(tuple(d[0] for d in cursor.description or ()))
    if max_rows is None:
        return [tuple(r) for r in cursor.fetchall()], False
    rows = cursor.fetchmany(max_rows + 1)
    return [tuple(r) for r in rows[:max_rows]], len(rows) > max_rows


_SQLITE_ALLOWED = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, 33}  # 33: RECURSIVE
)
_SQLITE_READ_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list"}
)
_SQLITE_REFUSAL_HINTS = ("not authorized", "readonly", "read-only", "query_only", "prohibited")


def _sqlite_authorizer(action: int, arg1: str | None, arg2: str | None, *_: Any) -> int:
    if action in _SQLITE_ALLOWED:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and arg1 in _SQLITE_READ_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


class SQLiteDatabase(ReadOnlyDatabase):
    """A SQLite file opened read-only (`mode=ro`, `query_only`, a read-only authorizer).

    Text that is not valid UTF-8 is decoded with errors ignored, as the Spider evaluator does
    (the query is run again with a lenient decoder when the strict, fast one fails).
    """

    progress_every: int = 10_000
    """SQLite VM instructions between two checks of the deadline."""

    def __init__(self, path: str | Path):
        super().__init__()
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"SQLite database not found: {self.path}")
        self.url = f"sqlite:///{self.path}"
        conn = sqlite3.connect(
            f"file:{quote(str(self.path.resolve()))}?mode=ro", uri=True, check_same_thread=False
        )
        conn.execute("PRAGMA query_only = ON")
        conn.set_authorizer(_sqlite_authorizer)
        self._conn: sqlite3.Connection | None = conn

    def _run(self, statement: str, timeout_s: float, max_rows: RowLimit) -> QueryOutcome:
        outcome = self._run_once(statement, timeout_s, max_rows)
        if outcome.status is QueryStatus.ERROR and "decode" in outcome.message and self._conn:
            self._conn.text_factory = _lenient_text
            try:
                return self._run_once(statement, timeout_s, max_rows)
            finally:
                if self._conn is not None:
                    self._conn.text_factory = str
        return outcome

    def _run_once(self, statement: str, timeout_s: float, max_rows: RowLimit) -> QueryOutcome:
        conn = self._conn
        if conn is None:
            return QueryOutcome(QueryStatus.ERROR, message="the database is closed")
        deadline = time.monotonic() + timeout_s
        conn.set_progress_handler(lambda: time.monotonic() > deadline, self.progress_every)
        try:
            cursor = conn.execute(statement)
            rows, truncated = _fetch(cursor, max_rows)
            columns = tuple(d[0] for d in cursor.description or ())
            return QueryOutcome(QueryStatus.OK, columns, tuple(rows), truncated=truncated)
        except (sqlite3.Error, sqlite3.Warning) as e:
            message = str(e)
            if "interrupted" in message:
                return QueryOutcome(
                    QueryStatus.TIMEOUT, message=f"query exceeded the {timeout_s:g} s time limit"
                )
            if any(hint in message for hint in _SQLITE_REFUSAL_HINTS):
                return QueryOutcome(
                    QueryStatus.REFUSED,
                    message=f"refused: the database is read-only ({message})",
                )
            return QueryOutcome(QueryStatus.ERROR, message=message)
        except (OverflowError, ValueError, MemoryError) as e:
            return QueryOutcome(QueryStatus.ERROR, message=f"{type(e).__name__}: {e}")
        finally:
            conn.set_progress_handler(None, 0)
            if conn.in_transaction:
                conn.rollback()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _lenient_text(data: bytes) -> str:
    return data.decode(errors="ignore")


_DUCKDB_INSTANCES: dict[str, Any] = {}
_DUCKDB_LOCK = threading.Lock()


class DuckDBDatabase(ReadOnlyDatabase):
    """A DuckDB file opened `read_only`, external access off, configuration locked.

    DuckDB allows one configuration per file per process, so connections to the same file share
    one database instance (each executor gets its own cursor)."""

    def __init__(self, path: str | Path):
        super().__init__()
        import duckdb

        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"DuckDB database not found: {self.path}")
        self.url = f"duckdb:///{self.path}"
        key = str(self.path.resolve())
        with _DUCKDB_LOCK:
            base = _DUCKDB_INSTANCES.get(key)
            if base is None:
                base = duckdb.connect(
                    key,
                    read_only=True,
                    config={"enable_external_access": False, "autoinstall_known_extensions": False},
                )
                base.execute("SET lock_configuration = true")
                _DUCKDB_INSTANCES[key] = base
        self._error = duckdb.Error
        self._interrupted = getattr(duckdb, "InterruptException", ())
        self._conn: Any = base.cursor()

    def _run(self, statement: str, timeout_s: float, max_rows: RowLimit) -> QueryOutcome:
        conn = self._conn
        if conn is None:
            return QueryOutcome(QueryStatus.ERROR, message="the database is closed")
        fired = threading.Event()

        def interrupt() -> None:
            fired.set()
            conn.interrupt()

        timer = threading.Timer(timeout_s, interrupt)
        timer.daemon = True
        timer.start()
        try:
            conn.execute(statement)
            rows, truncated = _fetch(conn, max_rows)
            columns = tuple(d[0] for d in conn.description or ())
            return QueryOutcome(QueryStatus.OK, columns, tuple(rows), truncated=truncated)
        except Exception as e:
            if fired.is_set() or (self._interrupted and isinstance(e, self._interrupted)):
                return QueryOutcome(
                    QueryStatus.TIMEOUT, message=f"query exceeded the {timeout_s:g} s time limit"
                )
            message = f"{type(e).__name__}: {e}" if not isinstance(e, self._error) else str(e)
            lowered = message.lower()
            if "read-only" in lowered or "read only" in lowered or "permission" in lowered:
                return QueryOutcome(
                    QueryStatus.REFUSED, message=f"refused: the database is read-only ({message})"
                )
            return QueryOutcome(QueryStatus.ERROR, message=message)
        finally:
            timer.cancel()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class SQLAlchemyDatabase(ReadOnlyDatabase):
    """Any SQLAlchemy URL (PostgreSQL, MySQL, ...): each query runs in a fresh `READ ONLY`
    transaction that is always rolled back. PostgreSQL enforces the limit with
    `statement_timeout`; other drivers are cancelled from a timer when they support it."""

    def __init__(self, url: str):
        super().__init__()
        from sqlalchemy import create_engine
        from sqlalchemy.pool import NullPool

        self.url = url
        self._engine: Any = create_engine(url, poolclass=NullPool)
        self._postgres = self._engine.dialect.name == "postgresql"

    def _run(self, statement: str, timeout_s: float, max_rows: RowLimit) -> QueryOutcome:
        if self._engine is None:
            return QueryOutcome(QueryStatus.ERROR, message="the database is closed")
        try:
            raw = self._engine.raw_connection()
        except Exception as e:
            return QueryOutcome(QueryStatus.ERROR, message=f"cannot connect: {e}")
        timer = None
        fired = threading.Event()
        try:
            cursor = raw.cursor()
            if self._postgres:
                cursor.execute("SET TRANSACTION READ ONLY")
                cursor.execute(f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}")
            else:
                cancel = getattr(raw.driver_connection, "cancel", None)
                if cancel is not None:

                    def fire() -> None:
                        fired.set()
                        cancel()

                    timer = threading.Timer(timeout_s, fire)
                    timer.daemon = True
                    timer.start()
            cursor.execute(statement)
            rows, truncated = _fetch(cursor, max_rows)
            columns = tuple(d[0] for d in cursor.description or ())
            return QueryOutcome(QueryStatus.OK, columns, tuple(rows), truncated=truncated)
        except Exception as e:
            message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            lowered = message.lower()
            if fired.is_set() or "statement timeout" in lowered or "canceling statement" in lowered:
                return QueryOutcome(
                    QueryStatus.TIMEOUT, message=f"query exceeded the {timeout_s:g} s time limit"
                )
            if "read-only" in lowered or "read only" in lowered:
                return QueryOutcome(
                    QueryStatus.REFUSED, message=f"refused: the database is read-only ({message})"
                )
            return QueryOutcome(QueryStatus.ERROR, message=message)
        finally:
            if timer is not None:
                timer.cancel()
            try:
                raw.rollback()
            finally:
                raw.close()

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


def open_database(target: str | Path) -> ReadOnlyDatabase:
    """Open a database read-only from a file path or a SQLAlchemy URL.

    A path ending in `.duckdb`/`.ddb` opens with DuckDB, any other path as SQLite;
    `sqlite:///p` and `duckdb:///p` name files; other URLs go through SQLAlchemy.
    """
    text = str(target)
    if "://" not in text:
        path = Path(text)
        if path.suffix.lower() in (".duckdb", ".ddb"):
            return DuckDBDatabase(path)
        return SQLiteDatabase(path)
    scheme = text.split("://", 1)[0].split("+", 1)[0].lower()
    if scheme in ("sqlite", "duckdb"):
        from sqlalchemy.engine import make_url

        database = make_url(text).database
        if not database or database == ":memory:":
            raise ValueError(f"{text!r}: a read-only {scheme} URL must name a database file")
        return SQLiteDatabase(database) if scheme == "sqlite" else DuckDBDatabase(database)
    return SQLAlchemyDatabase(text)


def render_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], *, float_digits: int = 6
) -> str:
    """A pandas-like fixed-width table (`DataFrame.to_string(index=False)` layout): a header
    line, then one line per row, each column right-aligned to its widest cell."""
    cells = [[_cell(v, float_digits) for v in row] for row in rows]
    header = [str(c) for c in columns] or [str(i) for i in range(len(cells[0]) if cells else 0)]
    widths = [len(h) for h in header]
    for row in cells:
        for i, cell in enumerate(row[: len(widths)]):
            if len(cell) > widths[i]:
                widths[i] = len(cell)
    lines = [" ".join(h.rjust(w) for h, w in zip(header, widths, strict=False))]
    lines += [" ".join(c.rjust(w) for c, w in zip(row, widths, strict=False)) for row in cells]
    return "\n".join(lines)


def min_table_chars(columns: Sequence[str], n_rows: int) -> int:
    """A lower bound on `len(render_table(columns, rows))` for `n_rows` rows: every line is at
    least as wide as the header (each cell at least one character)."""
    width = sum(max(len(str(c)), 1) for c in columns) + max(len(columns) - 1, 0)
    return (n_rows + 1) * (width + 1) - 1


def _cell(value: Any, float_digits: int) -> str:
    if value is None:
        return "None"
    if isinstance(value, str):
        return value.replace("\n", " ") if "\n" in value else value
    if isinstance(value, float):
        text = f"{value:.{float_digits}f}".rstrip("0")
        return text + "0" if text.endswith(".") else text
    if isinstance(value, bytes):
        return value.hex()
    return str(value)
