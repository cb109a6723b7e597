"""Task rows and JSONL datasets.

A task row is a plain JSON object with a stable `task_id` and whatever fields its env needs
(question, gold answer, database id, ...). Datasets are JSONL files, one row per line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TaskRow = dict[str, Any]


class TaskError(ValueError):
    """A task row or dataset file is malformed. The message names the row and the field."""


def validate_task(row: object, required: Sequence[str] = (), where: str = "") -> TaskRow:
    """Return `row` if it is a dict with a string or int `task_id` and every `required` field.

    `where` (an env name, a file and line) prefixes the error message.
    """
    prefix = f"{where}: " if where else ""
    if not isinstance(row, dict):
        raise TaskError(f"{prefix}a task row must be a JSON object, got {type(row).__name__}")
    task_id = row.get("task_id")
    if task_id.__class__ not in (str, int) or task_id == "":  # exact types: bool is not an id
        raise TaskError(f"{prefix}task row has no usable 'task_id' (got {task_id!r})")
    for name in required:  # a plain loop: this runs on every reset
        if name not in row:
            fields = ", ".join(repr(f) for f in required if f not in row)
            raise TaskError(f"{prefix}task {task_id!r} is missing field(s) {fields}")
    return row


def load_tasks(path: str | Path, required: Sequence[str] = ()) -> list[TaskRow]:
    """Read a JSONL dataset; every error names the file and line."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"dataset not found: {path}")
    rows: list[TaskRow] = []
    seen: set[object] = set()
    with path.open(encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            validate_task(row, required, f"{path}:{lineno}")
            if row["task_id"] in seen:
                raise TaskError(f"{path}:{lineno}: duplicate task_id {row['task_id']!r}")
            seen.add(row["task_id"])
            rows.append(row)
    return rows
