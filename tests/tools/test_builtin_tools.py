"""Toolset execution, the calculator, and the read-only SQLite tool."""

import hashlib
import sqlite3

import pytest

from skyrl_sdk.tools import ToolCall, Toolset, tool
from skyrl_sdk.tools.calculator import CalculatorError, calculator, evaluate
from skyrl_sdk.tools.sqlite import SQLiteReadOnly, SQLRefused, sql_tool


@tool
def explode(x: int) -> str:
    """Always fails."""
    raise RuntimeError(f"boom {x}")


@tool
def echo(text: str) -> str:
    """Echo."""
    return text


def test_toolset_turns_every_failure_into_an_error_result():
    tools = Toolset([explode, echo], max_output_chars=10)
    assert tools.execute(ToolCall("explode", {"x": 1})).output == "Error: RuntimeError: boom 1"
    unknown = tools.execute(ToolCall("nope", {}))
    assert (
        unknown.is_error
        and "no tool named 'nope'" in unknown.output
        and "echo, explode" in unknown.output
    )
    assert tools.execute(ToolCall("echo", {"text": 5})).is_error
    long = tools.execute(ToolCall("echo", {"text": "y" * 50}))
    assert long.output.startswith("y" * 10) and "[truncated 40 characters]" in long.output


def test_toolset_async_execution_matches_sync():
    import asyncio

    tools = Toolset([explode, echo])
    result = asyncio.run(tools.aexecute(ToolCall("echo", {"text": "hi"})))
    assert result.output == "hi" and not result.is_error
    assert asyncio.run(tools.aexecute(ToolCall("explode", {"x": 2}))).is_error


def test_toolset_rejects_duplicate_names():
    with pytest.raises(ValueError, match="two tools are named 'echo'"):
        Toolset([echo, echo])


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("(3 + 4) * 12", "84"),
        ("7 / 2", "3.5"),
        ("2 ** 10", "1024"),
        ("-5 // 2", "-3"),
        ("10 / 4 * 2", "5"),
    ],
)
def test_calculator(expression, value):
    assert calculator(expression=expression) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('true')", "unsupported syntax"),
        ("1 / 0", "division by zero"),
        ("9 ** 99999", "too large"),
        ("1 +", "not an arithmetic expression"),
        ("1" * 600, "longer than"),
    ],
)
def test_calculator_refuses_non_arithmetic(expression, message):
    with pytest.raises(CalculatorError, match=message):
        evaluate(expression)


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
