"""The bundled offline Text-to-SQL benchmark, built on first use into the cache folder.

`bundled_root()` builds (once per version of the build script and questions) and returns the
folder; `bundled_tasks()` returns its task rows. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from skyrl_gym.cache import build_once, cache_dir
from skyrl_gym.tasks import TaskRow, load_tasks

HERE = Path(__file__).parent

__all__ = ["bundled_root", "bundled_tasks", "cache_dir"]


def _version() -> str:
    digest = hashlib.sha256()
    for name in ("build.py", "questions.py"):
        digest.update((HERE / name).read_bytes())
    return digest.hexdigest()[:12]


@cache
def bundled_root() -> Path:
    """The built benchmark folder (Spider layout: `database/<db_id>/<db_id>.sqlite`, `dev.json`,
    `tasks.jsonl`, `gold.sql`), building it if needed."""
    from skyrl_gym.envs.sql.bundled.build import build

    return build_once(cache_dir() / "text2sql-bundled" / _version(), build)


@cache
def bundled_tasks() -> tuple[TaskRow, ...]:
    """The bundled questions as `sql` task rows (their `db` paths are relative to the root)."""
    return tuple(load_tasks(bundled_root() / "tasks.jsonl", ("question", "db_id", "gold_sql")))
