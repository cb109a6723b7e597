"""Read-only SQL over a SQLite file, as a tool.

Three independent guards keep the database unchanged: the file is opened with `mode=ro`, the
connection sets `PRAGMA query_only`, and an authorizer allows only reads. A progress handler
interrupts queries past their time budget; results are capped in rows and characters.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyrl_sdk.tools.core import Tool, tool

_ALLOWED_ACTIONS = {
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_FUNCTION,
    sqlite3.SQLITE_RECURSIVE,  # WITH RECURSIVE is still a read
}
# SQLite passes the pragma name for SQLITE_PRAGMA; read-only pragmas that tools commonly use.
_ALLOWED_PRAGMAS = {"table_info", "table_xinfo", "index_list", "index_info", "foreign_key_list"}


class SQLRefused(ValueError):
    """The statement is not a single read-only query, or it ran out of time."""


@dataclass(frozen=True)
class QueryResult:
    """Rows of a read-only query."""

    columns: list[str]
    """Column names, in order."""
    rows: list[tuple[Any, ...]]
    """At most `max_rows` rows."""
    truncated: bool
    """True when the query returned more rows than were kept."""


class SQLiteReadOnly:
    """A read-only connection to one SQLite file."""

    def __init__(self, path: str | Path, *, timeout_s: float = 5.0, max_rows: int = 50):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"SQLite database not found: {self.path}")
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self._conn: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            conn.execute("PRAGMA query_only = ON")
            conn.set_authorizer(_authorize)
            self._conn = conn
        return self._conn

    def query(self, sql: str) -> QueryResult:
        """Run one read-only statement. Raises `SQLRefused` for anything else."""
        conn = self._connect()
        deadline = time.monotonic() + self.timeout_s
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            cursor = conn.execute(sql)
            rows = cursor.fetchmany(self.max_rows + 1)
        except sqlite3.DatabaseError as e:
            message = str(e)
            if "interrupted" in message:
                raise SQLRefused(f"query exceeded the {self.timeout_s:g} s time limit") from None
            if "not authorized" in message or "readonly" in message or "query_only" in message:
                raise SQLRefused("only read-only SELECT queries are allowed") from None
            raise SQLRefused(message) from None
        except sqlite3.ProgrammingError as e:  # e.g. several statements at once
            raise SQLRefused(str(e)) from None
        finally:
            conn.set_progress_handler(None, 0)
        columns = [d[0] for d in cursor.description or ()]
        return QueryResult(columns, rows[: self.max_rows], len(rows) > self.max_rows)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _authorize(action: int, arg1: str | None, *_: Any) -> int:
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and arg1 in _ALLOWED_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def format_rows(result: QueryResult, max_chars: int = 9000) -> str:
    """A plain-text table (header, then one ` | `-separated line per row)."""
    if not result.columns:
        return "(no result set)"
    lines = [" | ".join(result.columns)]
    lines += [" | ".join("NULL" if v is None else str(v) for v in row) for row in result.rows]
    if not result.rows:
        lines.append("(0 rows)")
    if result.truncated:
        lines.append(
            f"... (more than {len(result.rows)} rows; showing the first {len(result.rows)})"
        )
    text = "\n".join(lines)
    return text if len(text) <= max_chars else text[:max_chars] + "\n... (output truncated)"


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
