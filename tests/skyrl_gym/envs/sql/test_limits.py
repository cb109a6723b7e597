"""The SQL caps (`tools.sql_limits`) on every backend and path: rows, result bytes, memory
growth, observation length; queries under the caps are unchanged (the caps' own parts:
tests/tools/test_sql_limits.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyrl_gym.cli import app
from skyrl_gym.envs.sql.env import SQLEnv
from skyrl_gym.envs.sql.metrics import MatchStatus, Metric, execution_match
from skyrl_gym.envs.sql_basic.env import SQLBasicEnv
from skyrl_sdk.tools.sql_limits import (
    SQLCap,
    SQLLimits,
)
from skyrl_sdk.tools.sqldb import (
    QueryStatus,
    SQLAlchemyDatabase,
    SQLiteDatabase,
    open_database,
)
from skyrl_sdk.tools.sqlite import SQLiteReadOnly, SQLRefused, format_rows
from tests.skyrl_gym.envs.sql.conftest import make_sqlite

ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
SMALL = SQLLimits(max_rows=3, max_result_bytes=1000, max_memory_growth_bytes=32 * 2**20)


def test_sqlite_caps(tmp_path: Path) -> None:
    path = make_sqlite(tmp_path / "shop.sqlite")
    db = SQLiteDatabase(path, SMALL)
    assert db.execute("SELECT id FROM person WHERE id <= 3").rows == ((1,), (2,), (3,))
    rows = db.execute("SELECT id FROM person ORDER BY id")
    assert rows.status is QueryStatus.TOO_LARGE and rows.cap is SQLCap.ROWS
    assert rows.rows == ((1,), (2,), (3,)) and "more than 3 rows" in rows.message
    big = db.execute("SELECT hex(randomblob(400)) FROM person")
    assert big.status is QueryStatus.TOO_LARGE and big.cap is SQLCap.BYTES and len(big.rows) == 1
    value = db.execute("SELECT zeroblob(5000)")  # one value past the byte cap is never built
    assert value.status is QueryStatus.TOO_LARGE and value.cap is SQLCap.BYTES
    started = time.perf_counter()
    sort = db.execute(f"{ENDLESS} SELECT x FROM c ORDER BY x DESC", timeout_s=20)
    assert sort.status is QueryStatus.TOO_LARGE and sort.cap is SQLCap.MEMORY, sort
    assert time.perf_counter() - started < 15 and "32 MiB" in sort.message
    assert db.execute("SELECT COUNT(*) FROM person").rows == ((5,),)  # still usable
    db.close()


def test_duckdb_caps(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "caps.duckdb"
    duckdb.connect(str(path)).close()
    db = open_database(path, SQLLimits(max_rows=1000, max_memory_growth_bytes=64 * 2**20))
    endless = db.execute(f"{ENDLESS} SELECT x, x FROM c")
    assert endless.status is QueryStatus.TOO_LARGE and endless.cap is SQLCap.ROWS
    assert len(endless.rows) == 1000
    sort = db.execute("SELECT range FROM range(1000000000) ORDER BY range DESC", timeout_s=20)
    assert sort.status is QueryStatus.TOO_LARGE and sort.cap is SQLCap.MEMORY, sort
    assert not (tmp_path / "caps.duckdb.tmp").exists()  # nothing spilled next to the data
    assert db.execute("SELECT 42").rows == ((42,),)
    db.close()


def test_sqlalchemy_caps(tmp_path: Path) -> None:
    """The generic SQLAlchemy path (here over SQLite's driver) fetches under the same caps."""
    path = make_sqlite(tmp_path / "shop.sqlite")
    db = SQLAlchemyDatabase(f"sqlite:///{path}", SQLLimits(max_rows=100))
    endless = db.execute(f"{ENDLESS} SELECT x, x FROM c")
    assert endless.status is QueryStatus.TOO_LARGE and len(endless.rows) == 100
    assert db.execute("SELECT name FROM person WHERE id = 1").rows == (("Ann",),)
    db.close()


def test_comparisons_under_caps_are_unchanged_and_over_caps_fail(tmp_path: Path) -> None:
    path = make_sqlite(tmp_path / "shop.sqlite")
    db = SQLiteDatabase(path, SMALL)
    gold = "SELECT name FROM person WHERE age > 30"
    for metric in Metric:
        assert execution_match(metric, gold, gold, [db]).correct
        too_many = execution_match(metric, "SELECT name FROM person", gold, [db])
        assert too_many.status is MatchStatus.PRED_TOO_LARGE and "row cap" in (too_many.error or "")
        broken_gold = execution_match(metric, gold, "SELECT name FROM person", [db])
        assert broken_gold.status is MatchStatus.GOLD_ERROR and "row cap" in (
            broken_gold.error or ""
        )
    db.close()


def test_sql_env_observation_limits(tmp_path: Path) -> None:
    make_sqlite(tmp_path / "shop" / "shop.sqlite")
    task = {"task_id": "t", "question": "q", "db_id": "shop", "gold_sql": "SELECT 1"}
    limits = SQLLimits(max_result_bytes=5000, max_observation_chars=500)
    env = SQLEnv(tasks=[task], db_root=tmp_path, limits=limits)
    env.reset(options={"task": task})

    def explore(sql: str) -> str:
        return env.step(f"<think>x</think><sql>{sql}</sql>")[0][0]["content"]

    long_value = explore("SELECT hex(randomblob(1000))")
    # two 2000-character lines (the header is right-aligned to the value), cut to 500
    assert "[... truncated: 3,501 more characters ...]" in long_value
    capped = explore(f"{ENDLESS} SELECT x, hex(randomblob(1000)) FROM c")
    assert "[... truncated: query stopped: the result" in capped and "4.9 KiB" in capped
    too_big = explore("SELECT zeroblob(6000)")
    assert "Error executing SQL: query stopped:" in too_big
    assert "Ann" in explore("SELECT name FROM person")  # small results as before
    env.close()


def test_sql_basic_tool_limits() -> None:
    env = SQLBasicEnv(limits=SQLLimits(max_result_bytes=4000))
    env.reset(seed=0)
    content = env.step("<sql>SELECT hex(randomblob(1500)) FROM orders</sql>")[0][0]["content"]
    assert "[... truncated:" in content and "result size cap" in content
    refused = env.step("<sql>SELECT zeroblob(5000)</sql>")[0][0]["content"]
    assert "SQLRefused" in refused and "3.9 KiB" in refused
    env.close()


def test_sqlite_read_only_tool_marks_capped_rows(tmp_path: Path) -> None:
    path = make_sqlite(tmp_path / "shop.sqlite")
    db = SQLiteReadOnly(path, max_rows=50, limits=SQLLimits(max_rows=2))
    result = db.query("SELECT name FROM person ORDER BY id")
    assert result.rows == [("Ann",), ("Bob",)] and result.capped_by is not None
    assert "row cap" in format_rows(result)
    with pytest.raises(SQLRefused, match="time limit"):
        SQLiteReadOnly(path, timeout_s=0.2).query(f"{ENDLESS} SELECT COUNT(*) FROM c")
    db.close()


def test_cli_cap_options_and_report(tmp_path: Path) -> None:
    root = tmp_path / "data"
    make_sqlite(root / "shop" / "shop.sqlite")
    dev = [
        {"db_id": "shop", "question": "a", "query": "SELECT name FROM person WHERE age > 30"},
        {"db_id": "shop", "question": "b", "query": "SELECT name FROM city"},
    ]
    (root / "dev.json").write_text(json.dumps(dev))
    preds = tmp_path / "pred.sql"
    preds.write_text("SELECT name FROM person WHERE age > 30\nSELECT name FROM person\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [
        "text2sql", "eval", "--dataset", str(root / "dev.json"), "--predictions", str(preds),
        "--out", str(out), "--max-rows", "3", "--metric", "bird",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    assert [i["status"] for i in data["items"]] == ["correct", "pred_too_large"]
    assert data["limits"]["max_rows"] == 3 and data["statuses"] == {
        "correct": 1,
        "pred_too_large": 1,
    }
    bad = CliRunner().invoke(app, [
        "text2sql", "eval", "--dataset", str(root / "dev.json"), "--predictions", str(preds),
        "--out", str(out), "--max-rows", "0",
    ])  # fmt: skip
    assert bad.exit_code == 2 and "max_rows" in bad.output
