"""Spider / BIRD / SkyRL-SQL files into task rows, and where their databases are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyrl_gym.envs.sql.loaders import (
    DatasetFormat,
    detect_format,
    load_dataset,
    resolve_database,
    suite_databases,
)
from skyrl_gym.tasks import TaskError
from tests.skyrl_gym.envs.sql.conftest import make_sqlite

TABLES = [{
    "db_id": "shop",
    "table_names_original": ["city", "person"],
    "column_names_original": [[-1, "*"], [0, "id"], [0, "name"], [1, "id"], [1, "name"], [1, "city_id"]],
    "column_types": ["text", "number", "text", "number", "text", "number"],
    "primary_keys": [1, 3],
    "foreign_keys": [[5, 1]],
}]  # fmt: skip


def test_spider(tmp_path: Path) -> None:
    dev = [{"db_id": "shop", "question": "How many people?", "query": "SELECT count(*) FROM person",
            "query_toks": [], "sql": {}}]  # fmt: skip
    (tmp_path / "dev.json").write_text(json.dumps(dev))
    (tmp_path / "tables.json").write_text(json.dumps(TABLES))
    assert detect_format(tmp_path / "dev.json") is DatasetFormat.SPIDER
    (row,) = load_dataset(tmp_path / "dev.json")
    assert row["task_id"] == "spider-dev-0" and row["gold_sql"] == "SELECT count(*) FROM person"
    assert row["db_id"] == "shop" and row["index"] == 0 and row["data"] == "spider"
    assert "CREATE TABLE person" in row["schema"]
    assert "FOREIGN KEY (city_id) REFERENCES city(id)" in row["schema"]
    assert "id number PRIMARY KEY" in row["schema"]


def test_bird(tmp_path: Path) -> None:
    dev = [{"question_id": 7, "db_id": "shop", "question": "Oldest?", "evidence": "old = max age",
            "SQL": "SELECT name FROM person ORDER BY age DESC LIMIT 1", "difficulty": "simple"}]  # fmt: skip
    (tmp_path / "dev.json").write_text(json.dumps(dev))
    (row,) = load_dataset(tmp_path / "dev.json")
    assert row["task_id"] == "bird-7" and row["question_id"] == 7
    assert row["evidence"] == "old = max age" and row["difficulty"] == "simple"


def test_skyrl_rows_raw_and_converted(tmp_path: Path) -> None:
    raw = [{"db_id": "shop", "question": "q", "sql": "SELECT 1", "schema": "CREATE TABLE t (x);",
            "external_knowledge": "", "data": "synsql"}]  # fmt: skip
    (tmp_path / "raw.json").write_text(json.dumps(raw))
    (row,) = load_dataset(tmp_path / "raw.json")
    assert row["task_id"] == "skyrl-synsql-0" and row["schema"] == "CREATE TABLE t (x);"
    converted = {"db_id": "shop", "data": "spider", "prompt": [{"role": "user", "content": "Q?"}],
                 "reward_spec": {"method": "rule", "ground_truth": "SELECT 2"},
                 "extra_info": {"index": 12}}  # fmt: skip
    (tmp_path / "conv.jsonl").write_text(json.dumps(converted) + "\n")
    (row,) = load_dataset(tmp_path / "conv.jsonl")
    assert row["gold_sql"] == "SELECT 2" and row["task_id"] == "skyrl-spider-12"


def test_unknown_format_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text(json.dumps([{"foo": 1}]))
    with pytest.raises(TaskError, match="cannot tell the dataset format"):
        load_dataset(tmp_path / "x.json")


def test_resolve_database_layouts(tmp_path: Path) -> None:
    spider = make_sqlite(tmp_path / "shop" / "shop.sqlite")
    assert resolve_database({"db_id": "shop"}, tmp_path) == str(spider)
    omni = make_sqlite(tmp_path / "SynSQL-2.5M" / "databases" / "x" / "x.sqlite")
    assert resolve_database({"db_id": "x", "data": "synsql"}, tmp_path) == str(omni)
    assert resolve_database({"db_id": "x", "db": "a/b.sqlite"}, tmp_path) == str(
        tmp_path / "a/b.sqlite"
    )
    assert resolve_database({"db_id": "x", "db": "postgresql://h/db"}, None) == "postgresql://h/db"
    with pytest.raises(FileNotFoundError, match="no database for db_id 'nope'"):
        resolve_database({"db_id": "nope"}, tmp_path)
    make_sqlite(tmp_path / "shop" / "shop_2.sqlite")
    assert [Path(p).name for p in suite_databases(str(spider))] == ["shop.sqlite", "shop_2.sqlite"]
