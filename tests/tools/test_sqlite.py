"""The read-only SQLite tool: reads and caps rows, refuses writes, times out runaway queries."""

import hashlib
import sqlite3

import pytest

from skyrl_sdk.tools.sqlite import SQLiteReadOnly, SQLRefused, sql_tool


@pytest.fixture
def shop_db(tmp_path):
    path = tmp_path / "shop.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE t (id INTEGER, name TEXT);"
            "INSERT INTO t VALUES (1, 'a'), (2, NULL), (3, 'c');"
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) "
            "INSERT INTO t SELECT i + 10, 'bulk' FROM n;"
        )
    conn.close()
    return path


def test_sql_tool_reads_and_caps_rows(shop_db):
    db = SQLiteReadOnly(shop_db, max_rows=5)
    run = sql_tool(db)
    out = run(query="SELECT id, name FROM t WHERE id < 4 ORDER BY id")
    assert out.splitlines() == ["id | name", "1 | a", "2 | NULL", "3 | c"]
    capped = run(query="SELECT * FROM t")
    assert "more than 5 rows" in capped
    db.close()


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM t",
        "UPDATE t SET name = 'x'",
        "INSERT INTO t VALUES (9, 'z')",
        "DROP TABLE t",
        "CREATE TABLE u (x)",
        "ATTACH DATABASE ':memory:' AS other",
        "PRAGMA query_only = OFF",
        "PRAGMA journal_mode = DELETE",
        "SELECT 1; DELETE FROM t",
    ],
)
def test_sql_tool_refuses_writes_and_leaves_the_file_unchanged(shop_db, statement):
    before = hashlib.sha256(shop_db.read_bytes()).hexdigest()
    db = SQLiteReadOnly(shop_db)
    with pytest.raises(SQLRefused):
        db.query(statement)
    assert db.query("SELECT COUNT(*) FROM t").rows == [(203,)]
    db.close()
    assert hashlib.sha256(shop_db.read_bytes()).hexdigest() == before


def test_sql_timeout_interrupts_a_runaway_query(shop_db):
    db = SQLiteReadOnly(shop_db, timeout_s=0.3)
    runaway = (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT COUNT(*) FROM n"
    )
    with pytest.raises(SQLRefused, match="time limit"):
        db.query(runaway)
    assert db.query("SELECT 1").rows == [(1,)]  # the connection still works


def test_missing_database_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="SQLite database not found"):
        SQLiteReadOnly(tmp_path / "nope.sqlite")
