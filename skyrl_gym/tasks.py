"""Task rows and datasets (JSONL, or parquet through the optional `parquet` extra).

A task row is a plain JSON object with a stable `task_id` and whatever fields its env needs
(question, gold answer, database id, ...). Datasets are JSONL files, one row per line, or
parquet files.

SkyRL's dataset rows are accepted too: a row with a `prompt` (a list of chat messages) and no
`task_id`, usually with `env_class`, `reward_spec`, `extra_info` and `data_source`. Such a row
gets `task_id` = its 0-based position in the file (as a string, like SkyRL's row uid) and is
otherwise kept as it is; `skyrl_row_parts` splits it into the prompt and the `extras` SkyRL
passes to the env's constructor (the row without `prompt`, `env_class` and `task_id`).

An env without a task list (the Gymnasium way: its state drawn from the seed) is played by
seeds: `seed_task(n)` is the row of seed `n` (`task_id` `seed-<n>`), and `reset_kwargs(row)`
says how an episode starts, `reset(seed=n)` for a seed row and `reset(options={"task": row})`
for any other.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from skyrl_sdk.tools.messages import is_message

TaskRow = dict[str, Any]

SKYRL_PROMPT_KEY = "prompt"
"""The field of a SkyRL row holding the opening conversation."""
SKYRL_ENV_CLASS_KEY = "env_class"
"""The field of a SkyRL row naming the env id it is played in."""
PARQUET_EXTRA = "parquet"
"""The optional dependency group that reads parquet datasets (pyarrow)."""
SEED_KEY = "seed"
"""The field of a seed row (`seed_task`) holding the seed its episode resets with."""
SEED_TASK_PREFIX = "seed-"
"""`task_id` prefix of a seed row: seed 3 is task `seed-3`."""


class TaskError(ValueError):
    """A task row or dataset file is malformed. The message names the row and the field."""


def validate_task(row: object, required: Sequence[str] = (), where: str = "") -> TaskRow:
    """Return `row` if it is a dict with a string or int `task_id` and every `required` field.

    `where` (an env name, a file and line) prefixes the error message.
    """
    if not isinstance(row, dict):
        raise TaskError(
            f"{_prefix(where)}a task row must be a JSON object, got {type(row).__name__}"
        )
    task_id = row.get("task_id")
    if task_id.__class__ not in (str, int) or task_id == "":  # exact types: bool is not an id
        raise TaskError(f"{_prefix(where)}task row has no usable 'task_id' (got {task_id!r})")
    for name in required:  # a plain loop: this runs on every reset
        if name not in row:
            fields = ", ".join(repr(f) for f in required if f not in row)
            raise TaskError(f"{_prefix(where)}task {task_id!r} is missing field(s) {fields}")
    return row


def _prefix(where: str) -> str:
    # Built only for an error message: validate_task runs on every reset.
    return f"{where}: " if where else ""


def is_skyrl_row(row: object) -> bool:
    """True for a SkyRL dataset row: a dict with a `prompt` list and no `task_id` of its own."""
    return (
        isinstance(row, dict)
        and "task_id" not in row
        and isinstance(row.get(SKYRL_PROMPT_KEY), list)
    )


def from_skyrl_row(row: TaskRow, index: int, where: str = "") -> TaskRow:
    """A SkyRL row as a task row: its fields, plus `task_id` = `str(index)`.

    The prompt must be a non-empty list of chat messages; the error names the message.
    """
    prefix = f"{where}: " if where else ""
    prompt = row[SKYRL_PROMPT_KEY]
    if not prompt:
        raise TaskError(f"{prefix}SkyRL row has an empty 'prompt' (a list of chat messages)")
    for i, message in enumerate(prompt):
        if not is_message(message):
            raise TaskError(
                f"{prefix}SkyRL row 'prompt' message {i} is not a chat message "
                f"(a dict with role system/user/assistant/tool and str content): {message!r:.200}"
            )
    env_class = row.get(SKYRL_ENV_CLASS_KEY)
    if env_class is not None and not isinstance(env_class, str):
        raise TaskError(f"{prefix}SkyRL row 'env_class' must be a string, got {env_class!r:.100}")
    return {"task_id": str(index), **row}


def skyrl_row_parts(row: TaskRow) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(prompt, extras) of a row, as SkyRL's dataset hands them to an env.

    `extras` is the row without `prompt`, `env_class` and `task_id` (e.g. `reward_spec`,
    `extra_info`, `data_source`); both are the row's own objects, not copies.
    """
    prompt = row.get(SKYRL_PROMPT_KEY)
    if not isinstance(prompt, list):
        raise TaskError(
            f"task {row.get('task_id')!r} has no 'prompt' list of chat messages "
            "(a SkyRL env's episode starts from the row's prompt)"
        )
    skip = (SKYRL_PROMPT_KEY, SKYRL_ENV_CLASS_KEY, "task_id")
    return prompt, {k: v for k, v in row.items() if k not in skip}


def seed_task(seed: int) -> TaskRow:
    """The row of an episode that starts with `reset(seed=seed)`: `task_id` `seed-<seed>`."""
    return {"task_id": f"{SEED_TASK_PREFIX}{seed}", SEED_KEY: seed}


def seed_tasks(num: int, offset: int = 0) -> list[TaskRow]:
    """Rows of seeds `offset .. offset + num - 1` (`seed_task` each)."""
    return [seed_task(s) for s in range(offset, offset + num)]


def task_seed(row: TaskRow) -> int | None:
    """The seed of a seed row (`seed_task`), None for any other row.

    Only a row that is exactly `seed_task(n)` counts, so a dataset row that happens to carry a
    `seed` field of its own is still played as a task.
    """
    seed = row.get(SEED_KEY)
    if (
        seed.__class__ is int  # exact: bool is not a seed
        and len(row) == 2
        and row.get("task_id") == f"{SEED_TASK_PREFIX}{seed}"
    ):
        return seed  # type: ignore[return-value]
    return None


def reset_kwargs(row: TaskRow) -> dict[str, Any]:
    """Keyword arguments of the `reset` that starts `row`'s episode: `{"seed": n}` for a seed
    row, else `{"options": {"task": row}}`."""
    seed = task_seed(row)
    return {"seed": seed} if seed is not None else {"options": {"task": row}}


def load_tasks(path: str | Path, required: Sequence[str] = ()) -> list[TaskRow]:
    """Read a JSONL (or `.parquet`) dataset; every error names the file and row.

    SkyRL rows (see the module docstring) get their position as `task_id`.
    """
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"dataset not found: {path}")
    if path.suffix.lower() == ".parquet":
        return to_task_rows(_read_parquet(path), required, f"{path}: row ")
    return to_task_rows(_read_jsonl(path), required, f"{path}:")


def to_task_rows(
    rows: Iterable[tuple[int, object]],
    required: Sequence[str] = (),
    where: str = "",
) -> list[TaskRow]:
    """Validate `(position, row)` pairs; SkyRL rows get `task_id` = their 0-based index.

    `where` followed by the position names a row in errors (`file.jsonl:LINE`).
    """
    out: list[TaskRow] = []
    seen: set[object] = set()
    for index, (position, row) in enumerate(rows):
        label = f"{where}{position}"
        if is_skyrl_row(row):
            row = from_skyrl_row(row, index, label)  # type: ignore[arg-type]
        validate_task(row, required, label)
        task_id = row["task_id"]  # type: ignore[index]
        if task_id in seen:
            raise TaskError(f"{label}: duplicate task_id {task_id!r}")
        seen.add(task_id)
        out.append(row)  # type: ignore[arg-type]
    return out


def _read_jsonl(path: Path) -> Iterable[tuple[int, object]]:
    with path.open(encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None


def _read_parquet(path: Path) -> list[tuple[int, object]]:
    try:
        import pyarrow.parquet as pq  # optional: only parquet datasets need it
    except ImportError:
        raise TaskError(
            f"{path}: reading parquet needs pyarrow, from the {PARQUET_EXTRA!r} extra: "
            f"pip install 'skyrl-sdk[{PARQUET_EXTRA}]'"
        ) from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for a corrupt or non-parquet file
        raise TaskError(f"{path}: not a readable parquet file ({type(e).__name__}: {e})") from None
    return list(enumerate(table.to_pylist()))
