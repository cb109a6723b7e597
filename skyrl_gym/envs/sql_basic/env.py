"""`sql-basic`: answer questions about a bundled shop database through a read-only `sql` tool."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import ClassVar

from skyrl_gym.cache import build_once, cache_dir
from skyrl_gym.envs.math.env import parse_number
from skyrl_gym.tasks import TaskRow, load_tasks
from skyrl_gym.tool_env import ToolEnv, Tooling
from skyrl_sdk.tools import ToolFormat
from skyrl_sdk.tools.sql_limits import SQLLimits
from skyrl_sdk.tools.sqlite import SQLiteReadOnly, sql_tool

HERE = Path(__file__).parent
SCHEMA_FILE = HERE / "schema.sql"
TASKS_FILE = HERE / "tasks.jsonl"


@cache
def bundled_database() -> Path:
    """Build the shop database from `schema.sql` once (keyed by the script's hash) and return it."""
    script = SCHEMA_FILE.read_text()
    digest = hashlib.sha256(script.encode()).hexdigest()[:12]

    def build(path: Path) -> None:
        conn = sqlite3.connect(path)
        try:
            conn.executescript(script)
            conn.commit()
        finally:
            conn.close()

    return build_once(cache_dir() / "sql-basic" / f"shop-{digest}.sqlite", build)


@cache
def bundled_tasks() -> tuple[TaskRow, ...]:
    return tuple(load_tasks(TASKS_FILE, SQLBasicEnv.required_fields))


def answers_match(given: str, gold: str) -> bool:
    """Numbers compare numerically (to 1e-6 relative), text case- and space-insensitively."""
    a, b = parse_number(given), parse_number(gold)
    if a is not None and b is not None:
        return abs(a - b) <= 1e-6 * max(1.0, abs(b))
    return " ".join(given.lower().split()) == " ".join(gold.lower().split())


class SQLBasicEnv(ToolEnv):
    """Explore the schema and data with `sql`, then `answer` with a single value.

    Every query runs read-only under `limits` (default `DEFAULT_SQL_LIMITS`: row, byte, memory
    and time caps) and `timeout_s`; its observation shows at most 50 rows and 9000 characters.
    """

    required_fields: ClassVar[tuple[str, ...]] = ("question", "answer")
    system_prompt: ClassVar[str] = (
        "Answer the question about a SQLite shop database (tables: customers, products, orders). "
        "Query it with the sql tool (read-only), then give a single value with the answer tool."
    )

    def __init__(
        self,
        tasks: Sequence[TaskRow] | None = None,
        database: str | Path | None = None,
        tool_format: str | ToolFormat = "xml",
        timeout_s: float = 5.0,
        limits: SQLLimits | None = None,
    ):
        self.db = SQLiteReadOnly(database or bundled_database(), timeout_s=timeout_s, limits=limits)
        tooling = Tooling.build([sql_tool(self.db)], tool_format, self.system_prompt)
        super().__init__(bundled_tasks() if tasks is None else tasks, tooling)

    def prompt(self, task: TaskRow) -> str:
        return task["question"]

    def score(self, task: TaskRow, answer: str) -> float:
        return float(answers_match(answer, str(task["answer"])))

    def close(self) -> None:
        self.db.close()
