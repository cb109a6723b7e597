"""Text-to-SQL datasets as task rows, and where each row's database lives.

A task row of the `sql` env is a JSON object with:
`task_id`, `index` (position in the source file), `question`, `db_id`, `gold_sql`, and optionally
`evidence` (BIRD's external knowledge), `schema` (DDL text shown to the model; read from the
database when absent), `difficulty`, `data` (`spider`, `bird`, `synsql`: the SkyRL-SQL database
layout) and `db` (a database file path or a SQLAlchemy URL; relative paths are under `db_root`).

Loaders read the original formats:
- Spider: `dev.json` (+ `tables.json` for the schema), databases at `<root>/<db_id>/<db_id>.sqlite`;
- BIRD: `dev.json` with `question_id`, `evidence`, `SQL`, `difficulty`; databases in `dev_databases/`;
- SkyRL-SQL / SynSQL: rows with `db_id`, `question`, `sql` (or `reward_spec.ground_truth`),
  `schema`, `external_knowledge`, `data`; databases in OmniSQL's layout.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypedDict

from skyrl_gym.tasks import TaskError, TaskRow, load_tasks
from skyrl_sdk.tools.sqldb import ReadOnlyDatabase, SQLiteDatabase

__all__ = [
    "DatasetFormat",
    "SpiderTable",
    "database_schema",
    "detect_format",
    "load_bird",
    "load_dataset",
    "load_skyrl_sql",
    "load_spider",
    "resolve_database",
    "spider_schema",
    "suite_databases",
]


class _SpiderTableNames(TypedDict):
    """The keys every Spider `tables.json` entry has (`SpiderTable` adds the optional ones)."""

    db_id: str
    """The database the entry describes."""
    table_names_original: list[str]
    """Table names as in the database, by table index."""
    column_names_original: list[tuple[int, str]]
    """`[table index, column name]` pairs (JSON lists), by column index; table -1 is `*`."""


# Two classes, not `NotRequired`: under `from __future__ import annotations` a TypedDict's keys
# are only told apart at runtime by `total`.
class SpiderTable(_SpiderTableNames, total=False):
    """One entry of Spider's `tables.json`: a database's tables, columns and keys."""

    table_names: list[str]
    """Readable table names (unused: the original names are what queries use)."""
    column_names: list[tuple[int, str]]
    """Readable `[table index, column name]` pairs (unused, as `table_names`)."""
    column_types: list[str]
    """Column types by column index (`text`, `number`, ...); all `text` when absent."""
    primary_keys: list[int | list[int]]
    """Primary-key column indices; a list of indices is a composite key."""
    foreign_keys: list[tuple[int, int]]
    """`[column index, referenced column index]` pairs (JSON lists)."""


REQUIRED_FIELDS: tuple[str, ...] = ("question", "db_id", "gold_sql")
"""Fields every `sql` task row has besides `task_id`."""

SKYRL_LAYOUT: dict[str, str] = {
    "synsql": "SynSQL-2.5M/databases",
    "spider": "spider/database",
    "bird": "bird/train/train_databases",
}
"""Sub-folder of the OmniSQL data root holding each SkyRL-SQL `data` kind's databases."""


class DatasetFormat(enum.StrEnum):
    """The file formats `load_dataset` understands."""

    TASKS = "tasks"
    """Our JSONL task rows."""
    SPIDER = "spider"
    """Spider `dev.json` / `train_spider.json`."""
    BIRD = "bird"
    """BIRD `dev.json` / mini-dev json."""
    SKYRL = "skyrl"
    """SkyRL-SQL / SynSQL json or JSONL rows."""


def _read_json_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    stripped = text.lstrip()
    if stripped.startswith("["):
        data = json.loads(text)
    else:  # JSONL
        data = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise TaskError(f"{path}: expected a JSON list (or JSONL) of objects")
    return data


def detect_format(path: str | Path) -> DatasetFormat:
    """Guess a dataset file's format from its first row's keys."""
    path = Path(path)
    rows = _read_json_rows(path)
    if not rows:
        raise TaskError(f"{path}: the dataset is empty")
    keys = set(rows[0])
    if {"task_id", "gold_sql"} <= keys:
        return DatasetFormat.TASKS
    if "SQL" in keys:
        return DatasetFormat.BIRD
    if "query" in keys:
        return DatasetFormat.SPIDER
    if "sql" in keys or "reward_spec" in keys:
        return DatasetFormat.SKYRL
    raise TaskError(f"{path}: cannot tell the dataset format from the keys {sorted(keys)}")


def spider_schema(table: SpiderTable) -> str:
    """CREATE TABLE statements for one `tables.json` entry (types, primary and foreign keys)."""
    tables = table["table_names_original"]
    columns = table["column_names_original"]
    types = table.get("column_types", ["text"] * len(columns))
    primary = set()
    for key in table.get("primary_keys", []):
        primary.update(key if isinstance(key, list) else [key])
    foreign: dict[int, list[str]] = {}
    for src, dst in table.get("foreign_keys", []):
        t_src, _ = columns[src]
        t_dst, c_dst = columns[dst]
        foreign.setdefault(t_src, []).append(
            f"FOREIGN KEY ({columns[src][1]}) REFERENCES {tables[t_dst]}({c_dst})"
        )
    statements = []
    for t_index, name in enumerate(tables):
        lines = [
            f"{c_name} {types[i]}" + (" PRIMARY KEY" if i in primary else "")
            for i, (t, c_name) in enumerate(columns)
            if t == t_index
        ]
        lines += foreign.get(t_index, [])
        statements.append(f"CREATE TABLE {name} (\n  " + ",\n  ".join(lines) + "\n);")
    return "\n".join(statements)


def _tables_by_db(tables_json: str | Path | None) -> dict[str, SpiderTable]:
    if tables_json is None:
        return {}
    return {t["db_id"]: t for t in json.loads(Path(tables_json).read_text(encoding="utf-8"))}


def load_spider(
    path: str | Path, *, tables_json: str | Path | None = None, split: str = "dev"
) -> list[TaskRow]:
    """Spider `dev.json` rows as task rows (schema from `tables_json` when given)."""
    path = Path(path)
    if tables_json is None and (path.parent / "tables.json").is_file():
        tables_json = path.parent / "tables.json"
    tables = _tables_by_db(tables_json)
    rows = []
    for i, item in enumerate(_read_json_rows(path)):
        row: TaskRow = {
            "task_id": f"spider-{split}-{i}",
            "index": i,
            "question": item["question"],
            "db_id": item["db_id"],
            "gold_sql": item["query"],
            "data": "spider",
        }
        if item["db_id"] in tables:
            row["schema"] = spider_schema(tables[item["db_id"]])
        for key in ("difficulty", "hardness"):
            if key in item:
                row["difficulty"] = item[key]
        rows.append(row)
    return rows


def load_bird(path: str | Path) -> list[TaskRow]:
    """BIRD `dev.json` (or mini-dev) rows as task rows."""
    rows = []
    for i, item in enumerate(_read_json_rows(Path(path))):
        qid = item.get("question_id", i)
        row: TaskRow = {
            "task_id": f"bird-{qid}",
            "index": i,
            "question_id": qid,
            "question": item["question"],
            "db_id": item["db_id"],
            "gold_sql": item["SQL"],
            "data": "bird",
        }
        if item.get("evidence"):
            row["evidence"] = item["evidence"]
        if "difficulty" in item:
            row["difficulty"] = item["difficulty"]
        rows.append(row)
    return rows


def load_skyrl_sql(path: str | Path) -> list[TaskRow]:
    """SkyRL-SQL / SynSQL rows (raw json, or the converted rows with `reward_spec`)."""
    rows = []
    for i, item in enumerate(_read_json_rows(Path(path))):
        gold = item.get("sql")
        if gold is None:
            gold = (item.get("reward_spec") or {}).get("ground_truth")
        question = item.get("question")
        if question is None and isinstance(item.get("prompt"), list):
            question = item["prompt"][-1]["content"]
        if gold is None or question is None or "db_id" not in item:
            raise TaskError(f"{path}: row {i} lacks db_id, question or gold SQL")
        data = item.get("data", "synsql")
        index = (item.get("extra_info") or {}).get("index", i)
        row: TaskRow = {
            "task_id": f"skyrl-{data}-{index}",
            "index": i,
            "question": question,
            "db_id": item["db_id"],
            "gold_sql": gold,
            "data": data,
        }
        if item.get("schema"):
            row["schema"] = item["schema"]
        if item.get("external_knowledge"):
            row["evidence"] = item["external_knowledge"]
        rows.append(row)
    return rows


def load_dataset(
    path: str | Path,
    *,
    format: DatasetFormat | str | None = None,
    tables_json: str | Path | None = None,
) -> list[TaskRow]:
    """Any supported dataset file as task rows, in file order (`index` = position)."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"dataset not found: {path}")
    kind = DatasetFormat(format) if format else detect_format(path)
    if kind is DatasetFormat.TASKS:
        rows = load_tasks(path, REQUIRED_FIELDS)
        for i, row in enumerate(rows):
            row.setdefault("index", i)
        return rows
    if kind is DatasetFormat.SPIDER:
        return load_spider(path, tables_json=tables_json)
    if kind is DatasetFormat.BIRD:
        return load_bird(path)
    return load_skyrl_sql(path)


def _candidates(row: TaskRow, db_root: Path | None) -> Iterable[Path]:
    db_id = str(row["db_id"])
    if db_root is None:
        return
    layout = SKYRL_LAYOUT.get(str(row.get("data", "")))
    roots = [db_root / layout, db_root] if layout else [db_root]
    for root in roots:
        for name in (f"{db_id}/{db_id}.sqlite", f"{db_id}.sqlite", f"{db_id}/{db_id}.duckdb"):
            yield root / name
        yield root / f"{db_id}.duckdb"


def resolve_database(row: TaskRow, db_root: str | Path | None) -> str:
    """The path or URL of a row's database: `row["db"]` (relative to `db_root`), else the
    first existing `<db_root>/[<layout>/]<db_id>/<db_id>.sqlite`-style file."""
    root = Path(db_root) if db_root is not None else None
    given = row.get("db")
    if given:
        given = str(given)
        if "://" in given or Path(given).is_absolute() or root is None:
            return given
        return str(root / given)
    tried = list(_candidates(row, root))
    for candidate in tried:
        if candidate.is_file():
            return str(candidate)
    if root is None:
        raise FileNotFoundError(
            f"task {row.get('task_id')!r} names no database: give db_root or a 'db' field"
        )
    listing = ", ".join(str(p) for p in tried[:3])
    raise FileNotFoundError(f"no database for db_id {row['db_id']!r} (tried {listing}, ...)")


def suite_databases(main: str) -> list[str]:
    """Spider's test suite: the main database first, then every other `*.sqlite` in its folder."""
    if "://" in main:
        return [main]
    path = Path(main)
    others = sorted(p for p in path.parent.glob("*.sqlite") if p.resolve() != path.resolve())
    return [main, *map(str, others)]


def database_schema(db: ReadOnlyDatabase) -> str:
    """The DDL of every table and view, read from the database itself."""
    if isinstance(db, SQLiteDatabase):
        sql = (
            "SELECT sql FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        )
    elif db.url.startswith("duckdb"):
        sql = "SELECT sql FROM duckdb_tables() UNION ALL SELECT sql FROM duckdb_views() WHERE NOT internal"
    else:
        outcome = db.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema NOT IN ('information_schema', 'pg_catalog') "
            "ORDER BY table_name, ordinal_position",
            timeout_s=30,
        )
        tables: dict[str, list[str]] = {}
        for table, column, kind in outcome.rows:
            tables.setdefault(table, []).append(f"{column} {kind}")
        return "\n".join(
            f"CREATE TABLE {t} (\n  " + ",\n  ".join(c) + "\n);" for t, c in tables.items()
        )
    outcome = db.execute(sql, timeout_s=30)
    if not outcome.ok:
        raise RuntimeError(f"cannot read the schema of {db.url}: {outcome.message}")
    return "\n".join(str(r[0]).strip().rstrip(";") + ";" for r in outcome.rows)


def rows_for_db(rows: Sequence[TaskRow], db_id: str) -> list[TaskRow]:
    """The rows of one database, in order."""
    return [r for r in rows if r["db_id"] == db_id]
