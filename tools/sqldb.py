"""Read-only SQL execution over SQLAlchemy-style URLs, with time limits that interrupt queries.

`open_database(target)` accepts a SQLite file path, `sqlite:///path`, `duckdb:///path`, or any
other SQLAlchemy URL (e.g. `postgresql+psycopg://user@host/db`). Every backend refuses anything
but one read-only query, with layered guards:

1. a static check (`check_statement`): exactly one statement, and not a write, DDL, ATTACH,
   transaction control or a PRAGMA assignment;
2. the engine's own read-only mode: SQLite files open with `mode=ro`, `PRAGMA query_only` and
   an authorizer that allows only reads; DuckDB opens `read_only` with external access off and
   its configuration locked; other dialects run in a `READ ONLY` transaction that is rolled back.

Every query also runs under the caps of `skyrl_sdk.tools.sql_limits.SQLLimits` (given when
the database is opened): a row cap and a byte cap on the result, a bound on how much the
process's memory may grow while it runs, and its time limit. Limits interrupt the running
query: SQLite through a progress handler and a watchdog thread calling `interrupt()`, DuckDB
through `interrupt()` from the watchdog (plus its own `memory_limit`), PostgreSQL through
`statement_timeout` (rows come through a server-side cursor), others through the DBAPI
connection's `cancel()` from the watchdog where the driver has one. A query stopped by a cap
ends with `QueryStatus.TOO_LARGE` and a message naming the cap.
"""

from __future__ import annotations

import abc
import enum
import re
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from skyrl_sdk.tools.sql_limits import (
    DEFAULT_SQL_LIMITS,
    Fetched,
    QueryGuard,
    RowKeep,
    SQLCap,
    SQLLimits,
    cap_message,
    fetch_capped,
)

__all__ = [
    "DuckDBDatabase",
    "QueryInterrupted",
    "QueryOutcome",
    "QueryStatus",
    "ReadOnlyDatabase",
    "SQLAlchemyDatabase",
    "SQLNotAStatement",
    "SQLRefused",
    "SQLiteDatabase",
    "check_statement",
    "connect_sqlite_read_only",
    "min_table_chars",
    "open_database",
    "render_table",
    "run_sqlite_guarded",
    "split_statements",
]


class SQLRefused(ValueError):
    """A statement that is not a single read-only query."""


class SQLNotAStatement(ValueError):
    """A query whose first word starts no SQL statement (a typo, or prose): a syntax error,
    reported as `QueryStatus.ERROR`, not a refusal (it could not have written anything)."""


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
    TOO_LARGE = "too_large"
    """It hit a cap (`cap`: rows, result bytes or memory) and was stopped; `rows` holds the rows
    fetched before the cap, which are not the whole result."""


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
    cap: SQLCap | None = None
    """The cap that stopped the query (set when `status` is TOO_LARGE)."""

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
# Statements of SQLite, DuckDB and PostgreSQL that are not reads: refused. A first word that
# is neither these nor a read keyword starts no statement at all (`SELEC`, prose), which the
# databases would reject as a syntax error; it is reported as one.
_OTHER_STATEMENT_KEYWORDS = frozenset(
    {
        "ABORT", "ALTER", "ANALYZE", "ATTACH", "BEGIN", "CALL", "CHECKPOINT", "CLOSE",
        "CLUSTER", "COMMENT", "COMMIT", "COPY", "CREATE", "DEALLOCATE", "DECLARE", "DELETE",
        "DESCRIBE", "DETACH", "DISCARD", "DO", "DROP", "END", "EXECUTE", "EXPORT", "FETCH",
        "FORCE", "FROM", "GRANT", "IMPORT", "INSERT", "INSTALL", "LISTEN", "LOAD", "LOCK",
        "MERGE", "MOVE", "NOTIFY", "PIVOT", "PREPARE", "REASSIGN", "REFRESH", "REINDEX",
        "RELEASE", "RENAME", "REPLACE", "RESET", "REVOKE", "ROLLBACK", "SAVEPOINT",
        "SECURITY", "SET", "START", "SUMMARIZE", "TRUNCATE", "UNLISTEN", "UNPIVOT", "UPDATE",
        "UPSERT", "USE", "VACUUM",
    }
)  # fmt: skip
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
    with a sentence saying why it will not run (`SQLNotAStatement` when its first word starts
    no SQL statement)."""
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
    if word not in _READ_KEYWORDS and word not in _OTHER_STATEMENT_KEYWORDS:
        text = _strip_comments(statement).strip()
        start = text.split(None, 1)[0][:40] if text else ""
        raise SQLNotAStatement(f'syntax error: "{start}" does not start an SQL statement')
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
    limits: SQLLimits
    """The caps every query on this database runs under."""

    def __init__(self, limits: SQLLimits | None = None) -> None:
        self._lock = threading.Lock()
        self.limits = limits or DEFAULT_SQL_LIMITS

    def execute(
        self, sql: str, *, timeout_s: float | None = None, max_rows: RowLimit = None
    ) -> QueryOutcome:
        """Run one read-only query within `timeout_s` seconds (default: `limits.timeout_s`),
        keeping at most `max_rows` rows (a number, or a function of the result's column names;
        None keeps every row up to the row cap). A result past the row or byte cap, or a query
        that grows memory past its budget, ends with `QueryStatus.TOO_LARGE`."""
        started = time.perf_counter()
        try:
            statement = check_statement(sql)
        except SQLRefused as e:
            return QueryOutcome(QueryStatus.REFUSED, message=str(e))
        except SQLNotAStatement as e:
            return QueryOutcome(QueryStatus.ERROR, message=str(e))
        limit = self.limits.timeout_s if timeout_s is None else timeout_s
        with self._lock:
            outcome = self._run(statement, limit, max_rows)
        return QueryOutcome(
            outcome.status,
            outcome.columns,
            outcome.rows,
            outcome.message,
            outcome.truncated,
            time.perf_counter() - started,
            outcome.cap,
        )

    def _outcome(self, columns: tuple[str, ...], fetched: Fetched) -> QueryOutcome:
        """The outcome of a fetch: OK, or TOO_LARGE with the rows fetched before the cap."""
        if fetched.cap is None:
            return QueryOutcome(
                QueryStatus.OK, columns, tuple(fetched.rows), truncated=fetched.truncated
            )
        return self._capped(fetched.cap, columns, fetched.rows)

    def _capped(
        self, cap: SQLCap, columns: tuple[str, ...] = (), rows: list[tuple[Any, ...]] | None = None
    ) -> QueryOutcome:
        return QueryOutcome(
            QueryStatus.TOO_LARGE,
            columns,
            tuple(rows or ()),
            message=f"query stopped: {cap_message(cap, self.limits)}",
            truncated=True,
            cap=cap,
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


RowLimit = RowKeep
"""Rows to keep: a number, a function of the column names, or None for all (up to the row cap)."""


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


def connect_sqlite_read_only(path: Path, limits: SQLLimits) -> sqlite3.Connection:
    """A connection to a SQLite file that can only read, under `limits`: `mode=ro`,
    `PRAGMA query_only`, an authorizer that allows only reads, no string or blob larger than the
    byte cap, and temporary tables and sorts kept in memory (where the memory cap sees them)
    rather than in temporary files (where nothing would bound them)."""
    conn = sqlite3.connect(
        f"file:{quote(str(path.resolve()))}?mode=ro", uri=True, check_same_thread=False
    )
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, min(limits.max_result_bytes, 2**31 - 1))
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute("PRAGMA query_only = ON")
    conn.set_authorizer(_sqlite_authorizer)
    return conn


def run_sqlite_guarded(
    conn: sqlite3.Connection,
    statement: str,
    limits: SQLLimits,
    timeout_s: float,
    keep: RowKeep,
    progress_every: int = 10_000,
) -> tuple[tuple[str, ...], Fetched]:
    """Execute `statement` on `conn` and fetch its rows under `limits` and `timeout_s`.

    Returns (columns, rows fetched; `Fetched.cap` says whether the row, byte or memory cap cut
    them). Raises the `sqlite3` error of a failed query, and `QueryInterrupted` when the deadline
    or a cap stopped it while it ran."""
    guard = QueryGuard(limits, timeout_s, conn.interrupt)
    conn.set_progress_handler(guard.should_stop, progress_every)
    try:
        with guard:
            cursor = conn.execute(statement)
            fetched = fetch_capped(cursor, limits, keep, guard)
            columns = tuple(d[0] for d in cursor.description or ())
            cursor.close()
            return columns, fetched
    except sqlite3.Error as e:
        if "interrupted" in str(e) and guard.hit is not None:
            raise QueryInterrupted(guard.hit) from e
        if "string or blob too big" in str(e):
            raise QueryInterrupted(SQLCap.BYTES) from e
        raise
    finally:
        conn.set_progress_handler(None, 0)
        if conn.in_transaction:
            conn.rollback()


class QueryInterrupted(Exception):
    """A query stopped by its time limit or a cap."""

    def __init__(self, cap: SQLCap):
        super().__init__(cap.value)
        self.cap = cap
        """Which limit stopped it (`SQLCap.TIME` for the deadline)."""


class SQLiteDatabase(ReadOnlyDatabase):
    """A SQLite file opened read-only (`mode=ro`, `query_only`, a read-only authorizer), under
    the caps of `limits` (see `connect_sqlite_read_only`).

    Text that is not valid UTF-8 is decoded with errors ignored, as the Spider evaluator does
    (the query is run again with a lenient decoder when the strict, fast one fails).
    """

    progress_every: int = 10_000
    """SQLite VM instructions between two checks of the deadline and the memory budget."""

    def __init__(self, path: str | Path, limits: SQLLimits | None = None):
        super().__init__(limits)
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"SQLite database not found: {self.path}")
        self.url = f"sqlite:///{self.path}"
        self._conn: sqlite3.Connection | None = connect_sqlite_read_only(self.path, self.limits)

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
        try:
            columns, fetched = run_sqlite_guarded(
                conn, statement, self.limits, timeout_s, max_rows, self.progress_every
            )
            return self._outcome(columns, fetched)
        except QueryInterrupted as e:
            if e.cap is SQLCap.TIME:
                return QueryOutcome(
                    QueryStatus.TIMEOUT, message=f"query exceeded the {timeout_s:g} s time limit"
                )
            return self._capped(e.cap)
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
        except MemoryError:
            return self._capped(SQLCap.MEMORY)
        except (OverflowError, ValueError) as e:
            return QueryOutcome(QueryStatus.ERROR, message=f"{type(e).__name__}: {e}")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _lenient_text(data: bytes) -> str:
    return data.decode(errors="ignore")


_DUCKDB_INSTANCES: dict[str, Any] = {}
_DUCKDB_LOCK = threading.Lock()


class DuckDBDatabase(ReadOnlyDatabase):
    """A DuckDB file opened `read_only`, external access off, configuration locked, with
    `memory_limit` (the memory cap), `threads` and `max_temp_directory_size` from `limits`.

    DuckDB allows one configuration per file per process, so connections to the same file share
    one database instance (each executor gets its own cursor); its engine limits are those of
    the first opener, while the row, byte and time caps are each connection's own."""

    def __init__(self, path: str | Path, limits: SQLLimits | None = None):
        super().__init__(limits)
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
                    config={
                        "enable_external_access": False,
                        "autoinstall_known_extensions": False,
                        "memory_limit": f"{self.limits.max_memory_growth_bytes}B",
                        "threads": self.limits.duckdb_threads,
                        "max_temp_directory_size": f"{self.limits.duckdb_temp_bytes}B",
                        # No spill directory at all unless spilling is allowed: with a 0-byte
                        # cap DuckDB may still create `<db>.tmp` next to the data.
                        **({} if self.limits.duckdb_temp_bytes else {"temp_directory": ""}),
                    },
                )
                base.execute("SET lock_configuration = true")
                _DUCKDB_INSTANCES[key] = base
        self._error = duckdb.Error
        self._interrupted = getattr(duckdb, "InterruptException", ())
        self._out_of_memory = getattr(duckdb, "OutOfMemoryException", ())
        self._conn: Any = base.cursor()

    def _run(self, statement: str, timeout_s: float, max_rows: RowLimit) -> QueryOutcome:
        conn = self._conn
        if conn is None:
            return QueryOutcome(QueryStatus.ERROR, message="the database is closed")
        guard = QueryGuard(self.limits, timeout_s, conn.interrupt)
        try:
            with guard:
                conn.execute(statement)
                fetched = fetch_capped(conn, self.limits, max_rows, guard)
                columns = tuple(d[0] for d in conn.description or ())
            return self._outcome(columns, fetched)
        except Exception as e:
            interrupted = bool(self._interrupted) and isinstance(e, self._interrupted)
            if guard.hit is SQLCap.MEMORY or (
                self._out_of_memory and isinstance(e, self._out_of_memory)
            ):
                return self._capped(SQLCap.MEMORY)
            if guard.hit is SQLCap.TIME or interrupted:
                return QueryOutcome(
                    QueryStatus.TIMEOUT, message=f"query exceeded the {timeout_s:g} s time limit"
                )
            if isinstance(e, MemoryError):
                return self._capped(SQLCap.MEMORY)
            message = f"{type(e).__name__}: {e}" if not isinstance(e, self._error) else str(e)
            lowered = message.lower()
            if "read-only" in lowered or "read only" in lowered or "permission" in lowered:
                return QueryOutcome(
                    QueryStatus.REFUSED, message=f"refused: the database is read-only ({message})"
                )
            return QueryOutcome(QueryStatus.ERROR, message=message)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


_SERVER_SIDE_FIRST_WORDS = frozenset({"SELECT", "WITH", "VALUES", "TABLE"})
_WRITE_WORDS = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE)\b", re.IGNORECASE)


class SQLAlchemyDatabase(ReadOnlyDatabase):
    """Any SQLAlchemy URL (PostgreSQL, MySQL, ...): each query runs in a fresh `READ ONLY`
    transaction that is always rolled back. PostgreSQL enforces the time limit with
    `statement_timeout` and streams rows through a server-side (named) cursor, so the row and
    byte caps stop the transfer; other drivers are cancelled from the watchdog when they support
    it, and may read a whole result client-side before the caps see it."""

    def __init__(self, url: str, limits: SQLLimits | None = None):
        super().__init__(limits)
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
        cancel = getattr(raw.driver_connection, "cancel", None)
        guard = QueryGuard(self.limits, timeout_s, cancel)
        try:
            with guard:
                cursor = raw.cursor()
                if self._postgres:
                    cursor.execute("SET TRANSACTION READ ONLY")
                    cursor.execute(f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}")
                    cursor = self._server_side_cursor(raw, statement) or cursor
                cursor.execute(statement)
                fetched = fetch_capped(cursor, self.limits, max_rows, guard)
                columns = tuple(d[0] for d in cursor.description or ())
            return self._outcome(columns, fetched)
        except Exception as e:
            message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            lowered = message.lower()
            if guard.hit is SQLCap.MEMORY or isinstance(e, MemoryError):
                return self._capped(SQLCap.MEMORY)
            timed_out = "statement timeout" in lowered or "canceling statement" in lowered
            if guard.hit is SQLCap.TIME or timed_out:
                return QueryOutcome(
                    QueryStatus.TIMEOUT, message=f"query exceeded the {timeout_s:g} s time limit"
                )
            if "read-only" in lowered or "read only" in lowered:
                return QueryOutcome(
                    QueryStatus.REFUSED, message=f"refused: the database is read-only ({message})"
                )
            return QueryOutcome(QueryStatus.ERROR, message=message)
        finally:
            try:
                raw.rollback()
            finally:
                raw.close()

    @staticmethod
    def _server_side_cursor(raw: Any, statement: str) -> Any:
        """A named (server-side) cursor for a query PostgreSQL can declare one for, so rows
        arrive in batches as `fetch_capped` asks for them; None when the driver has none.

        A `WITH` that writes cannot be declared as a cursor (a syntax error, not a refusal): it
        runs on a plain cursor, where the read-only transaction refuses it before any row."""
        match = _FIRST_WORD.match(_strip_comments(statement))
        if not match or match.group(1).upper() not in _SERVER_SIDE_FIRST_WORDS:
            return None
        code = _TOKENS.sub(" ", statement)  # without literals, quoted names and comments
        if _WRITE_WORDS.search(code):
            return None
        try:
            return raw.cursor(name=f"skyrl_{threading.get_ident()}")
        except TypeError:  # a driver without named cursors (pg8000, ...)
            return None

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


def open_database(target: str | Path, limits: SQLLimits | None = None) -> ReadOnlyDatabase:
    """Open a database read-only from a file path or a SQLAlchemy URL, its queries under
    `limits` (default `DEFAULT_SQL_LIMITS`).

    A path ending in `.duckdb`/`.ddb` opens with DuckDB, any other path as SQLite;
    `sqlite:///p` and `duckdb:///p` name files; other URLs go through SQLAlchemy.
    """
    text = str(target)
    if "://" not in text:
        path = Path(text)
        if path.suffix.lower() in (".duckdb", ".ddb"):
            return DuckDBDatabase(path, limits)
        return SQLiteDatabase(path, limits)
    scheme = text.split("://", 1)[0].split("+", 1)[0].lower()
    if scheme in ("sqlite", "duckdb"):
        from sqlalchemy.engine import make_url

        database = make_url(text).database
        if not database or database == ":memory:":
            raise ValueError(f"{text!r}: a read-only {scheme} URL must name a database file")
        if scheme == "sqlite":
            return SQLiteDatabase(database, limits)
        return DuckDBDatabase(database, limits)
    return SQLAlchemyDatabase(text, limits)


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
