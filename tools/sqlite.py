"""Read-only SQL over a SQLite file, as a tool.

Three independent guards keep the database unchanged: the file is opened with `mode=ro`, the
connection sets `PRAGMA query_only`, and an authorizer allows only reads. Every query runs
under the caps of `skyrl_sdk.tools.sql_limits.SQLLimits` (rows, result bytes, memory growth and
time, enforced as in `skyrl_sdk.tools.sqldb`); results are also cut to `max_rows` rows and the
text to `max_chars` characters, with a visible marker.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyrl_sdk.tools.core import Tool, tool
from skyrl_sdk.tools.sql_limits import (
    DEFAULT_SQL_LIMITS,
    SQLCap,
    SQLLimits,
    cap_message,
    clip_text,
    truncation_marker,
)
from skyrl_sdk.tools.sqldb import QueryInterrupted, connect_sqlite_read_only, run_sqlite_guarded


class SQLRefused(ValueError):
    """The statement is not a single read-only query, ran out of time, or hit a cap."""


@dataclass(frozen=True)
class QueryResult:
    """Rows of a read-only query."""

    columns: list[str]
    """Column names, in order."""
    rows: list[tuple[Any, ...]]
    """At most `max_rows` rows."""
    truncated: bool
    """True when the query returned more rows than were kept."""
    capped_by: str | None = None
    """When a cap (result bytes or rows) cut the rows short: which, as a sentence."""


class SQLiteReadOnly:
    """A read-only connection to one SQLite file, its queries under `limits`."""

    def __init__(
        self,
        path: str | Path,
        *,
        timeout_s: float = 5.0,
        max_rows: int = 50,
        limits: SQLLimits | None = None,
    ):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"SQLite database not found: {self.path}")
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self.limits = limits or DEFAULT_SQL_LIMITS
        self._conn: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = connect_sqlite_read_only(self.path, self.limits)
        return self._conn

    def query(self, sql: str) -> QueryResult:
        """Run one read-only statement. Raises `SQLRefused` for anything else, and for a query
        stopped by its time limit or a cap before it produced a row."""
        conn = self._connect()
        try:
            columns, fetched = run_sqlite_guarded(
                conn, sql, self.limits, self.timeout_s, self.max_rows
            )
        except QueryInterrupted as e:
            if e.cap is SQLCap.TIME:
                raise SQLRefused(f"query exceeded the {self.timeout_s:g} s time limit") from None
            raise SQLRefused(f"query stopped: {cap_message(e.cap, self.limits)}") from None
        except sqlite3.DatabaseError as e:
            message = str(e)
            if "interrupted" in message:
                raise SQLRefused(f"query exceeded the {self.timeout_s:g} s time limit") from None
            if "not authorized" in message or "readonly" in message or "query_only" in message:
                raise SQLRefused("only read-only SELECT queries are allowed") from None
            raise SQLRefused(message) from None
        except sqlite3.ProgrammingError as e:  # e.g. several statements at once
            raise SQLRefused(str(e)) from None
        except MemoryError:
            raise SQLRefused(f"query stopped: {cap_message(SQLCap.MEMORY, self.limits)}") from None
        capped_by = None
        if fetched.cap is not None:
            capped_by = cap_message(fetched.cap, self.limits)
            if not fetched.rows:
                raise SQLRefused(f"query stopped: {capped_by}")
        return QueryResult(list(columns), fetched.rows, fetched.truncated, capped_by)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def format_rows(result: QueryResult, max_chars: int = 9000) -> str:
    """A plain-text table (header, then one ` | `-separated line per row), at most `max_chars`
    characters plus a `[... truncated: ...]` marker."""
    if not result.columns:
        return "(no result set)"
    # The rows are bounded by the byte cap, so building the whole text first is bounded too.
    lines = [" | ".join(result.columns)]
    lines += [" | ".join("NULL" if v is None else str(v) for v in row) for row in result.rows]
    if not result.rows:
        lines.append("(0 rows)")
    text = clip_text("\n".join(lines), max_chars)
    if result.capped_by is not None:
        text += "\n" + truncation_marker(f"rows not shown; {result.capped_by}")
    elif result.truncated:
        text += f"\n... (more than {len(result.rows)} rows; showing the first {len(result.rows)})"
    return text


def sql_tool(db: SQLiteReadOnly) -> Tool:
    """The `sql` tool over `db`."""

    @tool(name="sql")
    def run_sql(query: str) -> str:
        """Run one read-only SQL query (SQLite dialect) and return the rows.

        Args:
            query: A single SELECT statement.
        """
        return format_rows(db.query(query))

    return run_sql
