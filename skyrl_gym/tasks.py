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

`TaskRow` is the type of a row: `task_id` plus the optional fields the SDK's envs, loaders and
SkyRL adapter read, each documented. It is a `TypedDict`, so a row is a plain `dict` at runtime
and every key a dataset adds beyond those travels with the row unchanged (to the env's
`start`, `score`, the SkyRL adapter's extras).
"""

# No `from __future__ import annotations` here: `TypedDict` reads `NotRequired` from evaluated
# annotations (with string ones every key would count as required at runtime).

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from skyrl_sdk.tools.messages import Messages, is_message

__all__ = [
    "PARQUET_EXTRA",
    "SEED_KEY",
    "SEED_TASK_PREFIX",
    "SKYRL_ENV_CLASS_KEY",
    "SKYRL_PROMPT_KEY",
    "ResetKwargs",
    "RewardSpec",
    "TaskError",
    "TaskRow",
    "from_skyrl_row",
    "is_skyrl_row",
    "load_tasks",
    "reset_kwargs",
    "seed_task",
    "seed_tasks",
    "skyrl_row_parts",
    "task_seed",
    "to_task_rows",
    "validate_task",
]


class RewardSpec(TypedDict, total=False):
    """A SkyRL row's `reward_spec`: how its env grades the episode."""

    method: str
    """The grading method (`rule`, ...)."""
    ground_truth: Any
    """The gold answer the method compares against (a string, a list, ... per env)."""


class TaskRow(TypedDict):
    """One task: a JSON object with a stable `task_id` and the fields its env reads.

    Only `task_id` is required (`validate_task` checks it, and each env's `required_fields`).
    The optional keys below are the ones the SDK's own envs, dataset loaders and SkyRL adapter
    read; a row may carry any other key as well: it is a plain `dict` at runtime, and extra
    keys reach the env untouched (a type checker wants them declared in a `TaskRow` subclass,
    as PEP 728's `extra_items` is not in `typing` before Python 3.15). SWE rows are SWE-bench
    instances: their fields are `skyrl_gym.envs.swe.instances.SWEInstance`'s.
    """

    task_id: str | int
    """The row's stable id, unique in its dataset. A string; an int from a JSONL file is
    accepted too (readers that need text use `str(row["task_id"])`); a SkyRL row gets its
    0-based position as a string, a seed row `seed-<n>`."""

    # -- common fields ------------------------------------------------------------------------
    question: NotRequired[str]
    """The question the episode asks (math, python, search, sql, sql_basic)."""
    answer: NotRequired[str]
    """The gold answer (math, python, sql_basic; search takes it when `answers` is absent)."""
    answers: NotRequired[list[str]]
    """Several accepted gold answers (search)."""
    golden_answers: NotRequired[list[str]]
    """Search-R1's name for `answers` (search)."""
    solution: NotRequired[str]
    """A reference solution (python code, terminal shell script); never shown to the model."""
    seed: NotRequired[int]
    """The seed of a seed row (`seed_task`), or of a generated task (terminal_gen)."""
    split: NotRequired[str]
    """The split a generated row belongs to (`train`, `heldout`, ...)."""
    index: NotRequired[int]
    """The row's position in its dataset file (text2sql loaders)."""

    # -- SkyRL dataset rows (see the module docstring) ----------------------------------------
    prompt: NotRequired[Messages]
    """The opening conversation of a SkyRL row."""
    env_class: NotRequired[str]
    """The env id a SkyRL row is played in."""
    data_source: NotRequired[str]
    """The dataset a SkyRL row comes from."""
    reward_spec: NotRequired[RewardSpec]
    """How a SkyRL row is graded."""
    extra_info: NotRequired[dict[str, Any]]
    """Free-form fields a SkyRL row passes to its env (its `index`, tool hints, ...)."""

    # -- text-to-SQL (sql, sql_basic; skyrl_gym.envs.sql.loaders) ------------------------------
    db_id: NotRequired[str]
    """The database the question is asked of (Spider, BIRD, SynSQL)."""
    db: NotRequired[str]
    """The database's path (relative to the env's `db_root` unless absolute) or URL; without
    it the database is found from `db_id`."""
    gold_sql: NotRequired[str]
    """The gold query; the reward compares results against its result."""
    sql: NotRequired[str]
    """The gold query of a sql_basic row."""
    wrong_sql: NotRequired[str]
    """A plausible query whose result differs from the gold one (bundled sql tasks: the
    evaluation tests grade it as a wrong answer)."""
    schema: NotRequired[str]
    """The database's `CREATE TABLE` statements, when the row brings them."""
    evidence: NotRequired[str]
    """BIRD's external knowledge, shown with the question."""
    difficulty: NotRequired[str]
    """The dataset's difficulty label (Spider's hardness, BIRD's difficulty)."""
    question_id: NotRequired[int | str]
    """BIRD's question id."""
    data: NotRequired[str]
    """The dataset a text2sql row was loaded from (`spider`, `bird`, `synsql`, ...)."""

    # -- terminal, terminal_gen, harbor ---------------------------------------------------------
    instruction: NotRequired[str]
    """The shell task, as told to the model (terminal)."""
    files: NotRequired[dict[str, str]]
    """Files (relative path -> content) the episode's workspace starts with (terminal)."""
    check: NotRequired[str]
    """The shell command whose exit status grades the workspace (terminal)."""
    check_files: NotRequired[dict[str, str]]
    """Files only the grading sandbox sees (terminal)."""
    family: NotRequired[str]
    """The generator family of a terminal_gen row."""
    path: NotRequired[str]
    """The Harbor task folder a row is played from (harbor, terminal_gen)."""

    # -- small bundled envs ---------------------------------------------------------------------
    expression: NotRequired[str]
    """The arithmetic expression behind a math question."""
    doc_id: NotRequired[str]
    """The corpus passage that answers a search question."""
    kind: NotRequired[str]
    """A search question's kind (how it was generated)."""
    key: NotRequired[str]
    """The key to look up (lookup)."""
    value: NotRequired[str]
    """The value the lookup tool returns for `key`, the gold answer (lookup)."""
    item: NotRequired[str]
    """The item whose price is asked (lookup_chat)."""
    price: NotRequired[int]
    """The item's price, the gold answer (lookup_chat)."""
    stock: NotRequired[int]
    """The item's stock, a distractor field (lookup_chat)."""


class ResetKwargs(TypedDict, total=False):
    """The keyword arguments of the `reset` that starts a row's episode (`reset_kwargs`)."""

    seed: int
    """The seed of a seed row."""
    options: dict[str, TaskRow]
    """`{"task": row}` for any other row."""


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
    return row  # type: ignore[return-value]  # checked above; no cast call: runs every reset


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


def from_skyrl_row(row: Mapping[str, Any], index: int, where: str = "") -> TaskRow:
    """A SkyRL row (no `task_id` yet) as a task row: its fields, plus `task_id` = `str(index)`.

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
    return cast(TaskRow, {"task_id": str(index), **row})


def skyrl_row_parts(row: TaskRow) -> tuple[Messages, dict[str, Any]]:
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


def reset_kwargs(row: TaskRow) -> ResetKwargs:
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
        task = validate_task(row, required, label)
        task_id = task["task_id"]
        if task_id in seen:
            raise TaskError(f"{label}: duplicate task_id {task_id!r}")
        seen.add(task_id)
        out.append(task)
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
