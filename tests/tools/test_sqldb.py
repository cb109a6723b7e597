"""The read-only executor: guards, clear refusals, timeouts that interrupt, backends."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from skyrl_sdk.tools.sqldb import (
    DuckDBDatabase,
    QueryStatus,
    SQLiteDatabase,
    SQLRefused,
    check_statement,
    open_database,
    split_statements,
)
from tests.skyrl_gym.envs.sql.conftest import digest, make_sqlite

ENDLESS = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT COUNT(*) FROM r"
WRITES = [
    ("DELETE FROM person", "DELETE statements are not allowed"),
    ("INSERT INTO city VALUES (9, 'X', 'Y')", "INSERT statements are not allowed"),
    ("UPDATE person SET age = 1", "UPDATE statements are not allowed"),
    ("DROP TABLE person", "DROP statements are not allowed"),
    ("CREATE TABLE t (x)", "CREATE statements are not allowed"),
    ("ATTACH DATABASE 'other.db' AS o", "ATTACH is not allowed"),
    ("PRAGMA journal_mode = WAL", "PRAGMA changes are not allowed"),
    ("PRAGMA user_version = 7", "PRAGMA changes are not allowed"),
    ("SELECT 1; DELETE FROM person", "only one statement per query"),
    ("VACUUM", "VACUUM statements are not allowed"),
    ("BEGIN", "BEGIN statements are not allowed"),
    ("WITH x AS (SELECT 1) DELETE FROM person", "read-only"),
    ("PRAGMA writable_schema", "read-only"),
    ("", "the query is empty"),
]


def test_split_statements_respects_literals_and_comments() -> None:
    assert split_statements("SELECT ';' FROM t") == ["SELECT ';' FROM t"]
    assert split_statements("SELECT 1; -- done") == ["SELECT 1"]
    assert len(split_statements("SELECT 1; SELECT 2;")) == 2
    assert split_statements('SELECT "a;b" FROM t /* ; */') == ['SELECT "a;b" FROM t /* ; */']
    assert check_statement("  select 1 ;  ") == "select 1"
    with pytest.raises(SQLRefused, match="found 2"):
        check_statement("SELECT 1; SELECT 2")


@pytest.mark.parametrize(("sql", "reason"), WRITES)
def test_sqlite_refuses_writes_and_file_is_unchanged(tmp_path: Path, sql: str, reason: str) -> None:
    path = make_sqlite(tmp_path / "shop.sqlite")
    before = digest(path)
    with open_database(path) as db:
        outcome = db.execute(sql)
        assert outcome.status is QueryStatus.REFUSED, outcome
        assert reason in outcome.message
        assert db.execute("SELECT COUNT(*) FROM person").rows == ((5,),)
    assert digest(path) == before
    assert not (tmp_path / "other.db").exists()


def test_sqlite_reads_errors_and_row_limits(tmp_path: Path) -> None:
    db = SQLiteDatabase(make_sqlite(tmp_path / "shop.sqlite"))
    ok = db.execute("SELECT name, age FROM person ORDER BY id", max_rows=2)
    assert ok.ok and ok.columns == ("name", "age") and ok.rows == (("Ann", 31), ("Bob", 25))
    assert ok.truncated
    assert db.execute("PRAGMA table_info(person)").ok  # read-only introspection is fine
    bad = db.execute("SELECT nope FROM person")
    assert bad.status is QueryStatus.ERROR and "no such column" in bad.message
    db.close()
    db.close()  # idempotent


def test_sqlite_timeout_really_interrupts(tmp_path: Path) -> None:
    db = SQLiteDatabase(make_sqlite(tmp_path / "shop.sqlite"))
    started = time.perf_counter()
    outcome = db.execute(ENDLESS, timeout_s=0.2)
    elapsed = time.perf_counter() - started
    assert outcome.status is QueryStatus.TIMEOUT and "0.2 s" in outcome.message
    assert elapsed < 2.0
    assert db.execute("SELECT 1").rows == ((1,),)  # the connection still works


def test_sqlite_invalid_utf8_is_decoded_leniently(tmp_path: Path) -> None:
    path = make_sqlite(tmp_path / "bytes.sqlite", "CREATE TABLE t (x TEXT);")
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO t VALUES (CAST(X'61FF62' AS TEXT))")
    conn.commit()
    conn.close()
    with open_database(path) as db:
        assert db.execute("SELECT x FROM t").rows == (("ab",),)


def test_duckdb_backend(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "shop.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE person (id INTEGER, name TEXT)")
    conn.execute("INSERT INTO person VALUES (1, 'Ann'), (2, 'Bob')")
    conn.close()
    before = digest(path)
    db = open_database(f"duckdb:///{path}")
    assert isinstance(db, DuckDBDatabase)
    assert db.execute("SELECT name FROM person ORDER BY id").rows == (("Ann",), ("Bob",))
    for sql in ("DELETE FROM person", "SELECT 1; SELECT 2", f"ATTACH '{tmp_path}/x.db' AS x"):
        assert db.execute(sql).status is QueryStatus.REFUSED
    refused = db.execute("WITH a AS (SELECT 1) INSERT INTO person SELECT 3, 'x'")
    assert refused.status in (QueryStatus.REFUSED, QueryStatus.ERROR)
    started = time.perf_counter()
    slow = db.execute(
        "SELECT COUNT(*) FROM range(100000000000) a, range(100000) b WHERE a.range + b.range = 7",
        timeout_s=0.3,
    )
    assert slow.status is QueryStatus.TIMEOUT and time.perf_counter() - started < 5
    db.close()
    assert digest(path) == before


def test_open_database_dispatch(tmp_path: Path) -> None:
    path = make_sqlite(tmp_path / "shop.sqlite")
    assert isinstance(open_database(f"sqlite:///{path}"), SQLiteDatabase)
    with pytest.raises(FileNotFoundError):
        open_database(tmp_path / "missing.sqlite")
    with pytest.raises(ValueError, match="must name a database file"):
        open_database("sqlite://")


def test_postgres_by_url() -> None:
    """Runs against a real server when SKYRL_TEST_POSTGRES_URL names one (a scratch database:
    the test creates and drops a table)."""
    import os

    url = os.environ.get("SKYRL_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("set SKYRL_TEST_POSTGRES_URL=postgresql+psycopg://... to run")
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS skyrl_person"))
        conn.execute(text("CREATE TABLE skyrl_person (name text, age int)"))
        conn.execute(text("INSERT INTO skyrl_person VALUES ('Ann', 31), ('Bob', 25)"))
    try:
        db = open_database(url)
        assert db.execute("SELECT name FROM skyrl_person ORDER BY age").rows == (("Bob",), ("Ann",))
        writes = ("DELETE FROM skyrl_person", "WITH x AS (SELECT 1) DELETE FROM skyrl_person")
        for sql in writes:
            assert db.execute(sql).status is QueryStatus.REFUSED
        started = time.perf_counter()
        assert db.execute("SELECT pg_sleep(5)", timeout_s=0.3).status is QueryStatus.TIMEOUT
        assert time.perf_counter() - started < 3
        assert db.execute("SELECT COUNT(*) FROM skyrl_person").rows == ((2,),)
        # Rows stream through a server-side cursor: an endless result stops at the row cap.
        endless = db.execute(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x, x FROM c"
        )
        assert endless.status is QueryStatus.TOO_LARGE and len(endless.rows) == 10_000
        keep = db.execute("SELECT g FROM generate_series(1, 100) AS g", max_rows=lambda c: 3)
        assert keep.ok and keep.rows == ((1,), (2,), (3,)) and keep.truncated
        db.close()
    finally:
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE skyrl_person"))
        engine.dispose()


@pytest.mark.parametrize("sql", ["SELEC name FROM person", "The answer is 3", "name FROM person"])
def test_a_query_that_is_not_sql_is_a_syntax_error_not_a_refusal(tmp_path: Path, sql: str) -> None:
    """A typo in the first word (or prose) is no write: it fails as an error, which the metrics
    score `pred_error`; statements that do write stay refused (`WRITES`)."""
    with open_database(make_sqlite(tmp_path / "shop.sqlite")) as db:
        outcome = db.execute(sql)
    assert outcome.status is QueryStatus.ERROR, outcome
    assert "syntax error" in outcome.message and "refused" not in outcome.message
