"""Score Text-to-SQL predictions by execution accuracy, with per-database and per-difficulty
breakdowns, and write `results.json`.

Predictions come as (see `read_predictions`):
- text, Spider style: one SQL per line in dataset order (anything after a tab is dropped);
- JSONL: `{"index": i, "sql": ...}` or `{"question_id": q, "sql": ...}` (or `task_id`);
- JSON: BIRD's `{"0": "SQL\\t----- bird -----\\tdb_id", ...}`, or a list of SQL strings.

A wrong answer's item also holds the first `PREVIEW_ROWS` rows of the gold and of the
predicted result on the question's database (`gold_rows`, `pred_rows`), to see what differs.

Every prediction runs read-only: one that tries to write scores 0 and changes nothing. Every
query (prediction and gold) runs under the caps of `SQLLimits` (rows, result bytes, memory
growth): a prediction that hits one scores 0 with status `pred_too_large`, and the evaluation
goes on with the next question.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from skyrl_gym.envs.sql.loaders import resolve_database, suite_databases
from skyrl_gym.envs.sql.metrics import (
    DEFAULT_TIMEOUT_S,
    METRIC_SEMANTICS,
    MatchResult,
    MatchStatus,
    Metric,
    execution_match,
)
from skyrl_gym.tasks import TaskError, TaskRow
from skyrl_sdk.tools.sql_limits import DEFAULT_SQL_LIMITS, SQLCap, SQLLimits, cap_message
from skyrl_sdk.tools.sqldb import ReadOnlyDatabase, open_database

__all__ = [
    "PREVIEW_ROWS",
    "EvalItem",
    "EvalReport",
    "PredictionsError",
    "read_predictions",
    "score_predictions",
    "write_report",
]


PREVIEW_ROWS = 5
"""Rows of the gold and the predicted result kept on a wrong answer's item."""


class PredictionsError(ValueError):
    """The predictions file cannot be matched to the dataset."""


@dataclass(frozen=True)
class EvalItem:
    """The score of one question."""

    index: int
    """Position in the dataset."""
    task_id: str
    """The row's `task_id`."""
    db_id: str
    """Its database."""
    correct: int
    """1 if the prediction's result matches gold under the metric, else 0."""
    status: str
    """A `MatchStatus` value (correct, wrong, pred_error, pred_timeout, pred_refused,
    pred_too_large, gold_error)."""
    prediction: str | None
    """The predicted SQL (None when there was none)."""
    difficulty: str | None = None
    """The row's difficulty bucket, when the data has one."""
    error: str | None = None
    """Why the prediction failed (or the gold query did), when it did."""
    gold_rows: list[list[Any]] | None = None
    """A wrong answer: the first `PREVIEW_ROWS` rows of the gold result on the question's
    database (values JSON can hold; others as text). None otherwise."""
    pred_rows: list[list[Any]] | None = None
    """A wrong answer: the first `PREVIEW_ROWS` rows of the predicted result there."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("error", "difficulty", "gold_rows", "pred_rows"):
            if data[name] is None:
                del data[name]
        return data


@dataclass(frozen=True)
class Bucket:
    """Accuracy over a group of items."""

    n: int
    """Items in the group."""
    correct: int
    """Items scored correct."""

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "correct": self.correct, "accuracy": self.accuracy}


@dataclass(frozen=True)
class EvalReport:
    """The whole evaluation, as written to `results.json`."""

    metric: Metric
    """The execution-accuracy semantics used."""
    items: list[EvalItem]
    """One per question, in dataset order."""
    timeout_s: float
    """Per-query time limit."""
    mode: str = "predictions"
    """`predictions` (scored a file) or `policy` (ran the multi-turn agent)."""
    duration_s: float = 0.0
    """Wall time of the scoring."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Run details (dataset path, policy spec, ...)."""

    @property
    def accuracy(self) -> float:
        return sum(i.correct for i in self.items) / len(self.items) if self.items else 0.0

    def breakdown(self, key: Callable[[EvalItem], str | None]) -> dict[str, Bucket]:
        groups: dict[str, list[int]] = {}
        for item in self.items:
            name = key(item)
            if name is not None:
                groups.setdefault(name, []).append(item.correct)
        return {name: Bucket(len(v), sum(v)) for name, v in groups.items()}

    def statuses(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for item in self.items:
            counts[item.status] = counts.get(item.status, 0) + 1
        return counts

    def to_json(self) -> dict[str, Any]:
        by_difficulty = self.breakdown(lambda i: i.difficulty)
        return {
            "metric": self.metric.value,
            "metric_semantics": METRIC_SEMANTICS[self.metric],
            "accuracy": self.accuracy,
            "n": len(self.items),
            "n_correct": sum(i.correct for i in self.items),
            "mode": self.mode,
            "timeout_s": self.timeout_s,
            "duration_s": self.duration_s,
            "statuses": self.statuses(),
            "by_db": {k: b.to_json() for k, b in sorted(self.breakdown(lambda i: i.db_id).items())},
            "by_difficulty": {k: b.to_json() for k, b in sorted(by_difficulty.items())},
            **self.extra,
            "items": [i.to_json() for i in self.items],
        }


# ---- predictions --------------------------------------------------------------------------------


def _sql_of(value: Any) -> str:
    text = str(value) if value is not None else ""
    return text.split("\t", 1)[0].strip()  # Spider "SQL\tdb_id", BIRD "SQL\t----- bird -----\tdb"


def read_predictions(path: str | Path, rows: Sequence[TaskRow]) -> list[str | None]:
    """Predictions aligned with `rows` (None where a row has none)."""
    path = Path(path)
    if not path.is_file():
        raise PredictionsError(f"predictions file not found: {path}")
    text = path.read_text(encoding="utf-8", errors="replace")
    stripped = text.lstrip()
    if path.suffix == ".json" or stripped.startswith(("[", '{"0"')):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, list):
            return _align_positions([_sql_of(v) for v in data], rows, path)
        if isinstance(data, dict):
            out: list[str | None] = [None] * len(rows)
            for key, value in data.items():
                if not str(key).isdigit() or int(key) >= len(rows):
                    raise PredictionsError(f"{path}: key {key!r} is not a dataset index")
                out[int(key)] = _sql_of(value)
            return out
    if stripped.startswith("{"):
        return _from_jsonl(text, rows, path)
    lines = text.splitlines()
    if len(lines) != len(rows):
        non_blank = [line for line in lines if line.strip()]
        if len(non_blank) == len(rows):
            lines = non_blank
    return _align_positions([_sql_of(line) for line in lines], rows, path)


def _align_positions(sqls: list[str], rows: Sequence[TaskRow], path: Path) -> list[str | None]:
    if len(sqls) != len(rows):
        raise PredictionsError(
            f"{path}: {len(sqls)} predictions for {len(rows)} questions; a line-per-question "
            "file must have one line per question, in dataset order"
        )
    return list(sqls)


def _from_jsonl(text: str, rows: Sequence[TaskRow], path: Path) -> list[str | None]:
    by_index = {int(r.get("index", i)): i for i, r in enumerate(rows)}
    by_qid = {str(r["question_id"]): i for i, r in enumerate(rows) if "question_id" in r}
    by_task = {str(r["task_id"]): i for i, r in enumerate(rows)}
    out: list[str | None] = [None] * len(rows)
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise PredictionsError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        sql = obj.get("sql", obj.get("SQL", obj.get("prediction")))
        if "index" in obj:
            position = by_index.get(int(obj["index"]))
        elif "question_id" in obj:
            position = by_qid.get(str(obj["question_id"]))
        elif "task_id" in obj:
            position = by_task.get(str(obj["task_id"]))
        else:
            raise PredictionsError(f"{path}:{lineno}: needs 'index', 'question_id' or 'task_id'")
        if position is None:
            raise PredictionsError(f"{path}:{lineno}: no such question in the dataset")
        out[position] = _sql_of(sql)
    return out


# ---- scoring ------------------------------------------------------------------------------------


class _Databases:
    """Open read-only databases, one set per worker thread; all closed at the end."""

    def __init__(self, limits: SQLLimits) -> None:
        self.limits = limits
        self._local = threading.local()
        self._all: list[ReadOnlyDatabase] = []
        self._lock = threading.Lock()

    def get(self, targets: Iterable[str]) -> list[ReadOnlyDatabase]:
        cache: dict[str, ReadOnlyDatabase] | None = getattr(self._local, "cache", None)
        if cache is None:
            cache = self._local.cache = {}
        out = []
        for target in targets:
            if target not in cache:
                cache[target] = open_database(target, self.limits)
                with self._lock:
                    self._all.append(cache[target])
            out.append(cache[target])
        return out

    def close(self) -> None:
        for db in self._all:
            db.close()


def score_predictions(
    rows: Sequence[TaskRow],
    predictions: Sequence[str | None],
    *,
    db_root: str | Path | None,
    metric: Metric | str = Metric.SPIDER,
    timeout_s: float | None = None,
    keep_distinct: bool = False,
    workers: int = 1,
    extra: dict[str, Any] | None = None,
    mode: str = "predictions",
    limits: SQLLimits | None = None,
) -> EvalReport:
    """Score `predictions[i]` against `rows[i]["gold_sql"]` on each row's database, every query
    under `limits` (default `DEFAULT_SQL_LIMITS`; written into the report as `limits`)."""
    if len(predictions) != len(rows):
        raise PredictionsError(f"{len(predictions)} predictions for {len(rows)} questions")
    metric = Metric(metric)
    limit = DEFAULT_TIMEOUT_S[metric] if timeout_s is None else timeout_s
    limits = limits or DEFAULT_SQL_LIMITS
    databases = _Databases(limits)
    started = time.perf_counter()

    def score(i: int) -> EvalItem:
        row, pred = rows[i], predictions[i]
        difficulty = row.get("difficulty", row.get("hardness"))
        difficulty = str(difficulty) if difficulty is not None else None
        common = {
            "index": int(row.get("index", i)),
            "task_id": str(row["task_id"]),
            "db_id": str(row["db_id"]),
            "difficulty": difficulty,
            "prediction": pred,
        }
        if pred is None or not pred.strip():
            return EvalItem(**common, correct=0, status=MatchStatus.PRED_ERROR.value,
                            error="no prediction")  # fmt: skip
        try:
            main = resolve_database(row, db_root)
            targets = suite_databases(main) if metric is Metric.SPIDER else [main]
            result = execution_match(
                metric, pred, str(row["gold_sql"]), databases.get(targets),
                timeout_s=limit, keep_distinct=keep_distinct,
            )  # fmt: skip
        except (FileNotFoundError, ValueError, TaskError) as e:
            result = MatchResult(MatchStatus.GOLD_ERROR, f"cannot open the database: {e}")
        except MemoryError:  # comparing two results under the caps should never get here
            result = MatchResult(
                MatchStatus.PRED_TOO_LARGE, f"query stopped: {cap_message(SQLCap.MEMORY, limits)}"
            )
        previews: dict[str, list[list[Any]] | None] = {}
        if result.status is MatchStatus.WRONG:
            # Run again on the question's own database, a few rows each: what a reader needs to
            # see why the answer is wrong (scoring itself keeps no rows).
            db = databases.get([main])[0]
            previews["gold_rows"] = _preview(db, str(row["gold_sql"]), limit)
            previews["pred_rows"] = _preview(db, pred, limit)
        return EvalItem(
            **common, correct=int(result.correct), status=result.status.value, error=result.error,
            **previews,
        )  # fmt: skip

    try:
        if workers > 1:
            with ThreadPoolExecutor(workers) as pool:
                items = list(pool.map(score, range(len(rows))))
        else:
            items = [score(i) for i in range(len(rows))]
    finally:
        databases.close()
    details = {**(extra or {}), "limits": _limits_json(limits)}
    return EvalReport(metric, items, limit, mode, time.perf_counter() - started, details)


def _preview(db: ReadOnlyDatabase, sql: str, timeout_s: float) -> list[list[Any]] | None:
    """The first `PREVIEW_ROWS` rows of `sql` on `db`, JSON-safe (None if it fails now)."""
    outcome = db.execute(sql, timeout_s=timeout_s, max_rows=PREVIEW_ROWS)
    if not outcome.ok:
        return None
    return [[_json_cell(v) for v in r] for r in outcome.rows[:PREVIEW_ROWS]]


def _json_cell(value: Any) -> Any:
    """`value` as JSON holds it: numbers, text and null as they are, anything else as text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.hex() if len(value) <= 32 else value[:32].hex() + "..."
    return str(value)


def _limits_json(limits: SQLLimits) -> dict[str, Any]:
    """The caps that matter to a reader of the report."""
    return {
        "max_rows": limits.max_rows,
        "max_result_bytes": limits.max_result_bytes,
        "max_memory_growth_bytes": limits.max_memory_growth_bytes,
    }


def write_report(report: EvalReport, out_dir: str | Path) -> Path:
    """Write `out_dir/results.json`; return its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    path.write_text(json.dumps(report.to_json(), indent=1, ensure_ascii=False) + "\n")
    return path
