"""Execution-accuracy metrics for Text-to-SQL: `spider`, `bird` and `skyrl`.

All three run the predicted and the gold query on the same read-only database and compare the
result rows; they differ in what counts as "the same result":

| metric | rows | duplicates | column order | query rewrite | default limit |
|---|---|---|---|---|---|
| `spider` | multiset; a list when the gold query has ORDER BY | matter | ignored (best column permutation) | DISTINCT removed, `> =` joined | 60 s |
| `bird` | set | ignored | matters | none | 30 s |
| `skyrl` | frozenset (the SkyRL-SQL reward) | ignored | matters | none | 30 s |

`spider` follows the Spider test-suite evaluation (every `*.sqlite` in the database's folder
must agree); `bird` follows the widely used BIRD `evaluation_ex` (`set(pred) == set(gold)`, no
sorting inside rows). No metric has a float tolerance: `1 == 1.0` but `0.1 + 0.2 != 0.3`.
Column names never matter. A prediction that fails, times out, is refused or hits a cap scores
0. Time limits apply to each query and really interrupt it (see `tools.sqldb`), and every query
runs under the databases' caps (`tools.sql_limits.SQLLimits`: 10,000 rows, 16 MiB of result,
256 MiB of memory growth by default): a result past a cap cannot be compared, so a prediction
that hits one scores 0 (`pred_too_large`) and a gold query that hits one leaves the item
unscorable (`gold_error`).
"""

from __future__ import annotations

import enum
import itertools
import re
from collections import Counter
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_sdk.tools.sqldb import QueryOutcome, QueryStatus, ReadOnlyDatabase

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "METRIC_SEMANTICS",
    "MatchResult",
    "MatchStatus",
    "Metric",
    "execution_match",
    "order_matters",
    "prepare_spider_sql",
    "rows_match",
]


class Metric(enum.StrEnum):
    """An execution-accuracy semantics; its value is the name written in every report."""

    SPIDER = "spider"
    """Spider test-suite: multiset of rows (ordered if gold has ORDER BY), any column order."""
    BIRD = "bird"
    """BIRD: set of rows, column order matters."""
    SKYRL = "skyrl"
    """SkyRL-SQL reward: frozenset of rows, column order matters."""


METRIC_SEMANTICS: dict[Metric, str] = {
    Metric.SPIDER: (
        "Spider test-suite execution match: rows compared as a multiset (as a list when the gold "
        "query has ORDER BY), best column permutation, DISTINCT removed, all *.sqlite in the "
        "database folder must agree; 60 s per query"
    ),
    Metric.BIRD: (
        "BIRD evaluation_ex: set(pred rows) == set(gold rows), column order matters, duplicates "
        "and row order ignored; 30 s per query"
    ),
    Metric.SKYRL: (
        "SkyRL-SQL reward: frozenset(pred rows) == frozenset(gold rows), column order matters; "
        "30 s per query"
    ),
}
"""One sentence per metric, written into every report."""

DEFAULT_TIMEOUT_S: dict[Metric, float] = {
    Metric.SPIDER: 60.0,
    Metric.BIRD: 30.0,
    Metric.SKYRL: 30.0,
}
"""The per-query time limit each original evaluator uses."""


class MatchStatus(enum.Enum):
    """The outcome of scoring one prediction."""

    CORRECT = "correct"
    """Both ran and the results match under the metric."""
    WRONG = "wrong"
    """Both ran and the results differ."""
    PRED_ERROR = "pred_error"
    """The prediction failed to run (syntax error, unknown column, ...)."""
    PRED_TIMEOUT = "pred_timeout"
    """The prediction ran past the time limit and was interrupted."""
    PRED_REFUSED = "pred_refused"
    """The prediction was not a single read-only query (a write, ATTACH, several statements)."""
    PRED_TOO_LARGE = "pred_too_large"
    """The prediction hit a cap (rows, result bytes or memory) and was stopped."""
    GOLD_ERROR = "gold_error"
    """The gold query failed: the item cannot be scored (counts as wrong)."""


_PRED_STATUS = {
    QueryStatus.ERROR: MatchStatus.PRED_ERROR,
    QueryStatus.TIMEOUT: MatchStatus.PRED_TIMEOUT,
    QueryStatus.REFUSED: MatchStatus.PRED_REFUSED,
    QueryStatus.TOO_LARGE: MatchStatus.PRED_TOO_LARGE,
}


@dataclass(frozen=True)
class MatchResult:
    """The score of one prediction against its gold query."""

    status: MatchStatus
    """What happened."""
    error: str | None = None
    """Why the prediction (or gold) failed, when it did."""

    @property
    def correct(self) -> bool:
        return self.status is MatchStatus.CORRECT


# ---- row comparison -----------------------------------------------------------------------------

Rows = Sequence[Sequence[Any]]


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (3, 0)
    if isinstance(value, int | float):
        return (0, value)
    if isinstance(value, str):
        return (1, value)
    return (2, repr(value))


def _unordered(row: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(sorted(row, key=_sort_key))


def _spider_match(pred: Rows, gold: Rows, ordered: bool) -> bool:
    if not pred and not gold:
        return True
    if len(pred) != len(gold):
        return False
    width = len(gold[0])
    if any(len(r) != width for r in pred) or any(len(r) != width for r in gold):
        return False
    # Quick reject: a column permutation cannot change the multiset of values in a row.
    if ordered:
        if [_unordered(r) for r in pred] != [_unordered(r) for r in gold]:
            return False
    elif Counter(map(_unordered, pred)) != Counter(map(_unordered, gold)):
        return False
    gold_rows = [tuple(r) for r in gold]
    gold_counter = None if ordered else Counter(gold_rows)
    pred_columns = [Counter(c) for c in zip(*pred, strict=True)]
    gold_columns = [Counter(c) for c in zip(*gold, strict=True)]
    # For gold column i, the prediction columns holding the same multiset of values.
    candidates = [[j for j in range(width) if pred_columns[j] == g] for g in gold_columns]
    if any(not c for c in candidates):
        return False
    for perm in itertools.islice(_injective(candidates), 20_000):
        permuted = [tuple(r[j] for j in perm) for r in pred]
        if (permuted == gold_rows) if ordered else (Counter(permuted) == gold_counter):
            return True
    return False


def _injective(candidates: list[list[int]]) -> Any:
    """Every assignment gold column -> distinct prediction column allowed by `candidates`."""

    def extend(i: int, used: tuple[int, ...]) -> Any:
        if i == len(candidates):
            yield used
            return
        for j in candidates[i]:
            if j not in used:
                yield from extend(i + 1, (*used, j))

    return extend(0, ())


def rows_match(metric: Metric | str, pred: Rows, gold: Rows, *, ordered: bool = False) -> bool:
    """Whether two result sets are equal under `metric` (`ordered`: the gold query has ORDER BY;
    only `spider` uses it)."""
    metric = Metric(metric)
    if metric is Metric.SPIDER:
        return _spider_match(pred, gold, ordered)
    if metric is Metric.BIRD:
        return set(map(tuple, pred)) == set(map(tuple, gold))
    return frozenset(map(tuple, pred)) == frozenset(map(tuple, gold))


def order_matters(gold_sql: str) -> bool:
    """Spider's rule: row order matters when the gold query contains `order by`."""
    return "order by" in " ".join(gold_sql.lower().split())


_LITERAL = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")")
_DISTINCT = re.compile(r"\bdistinct\b", re.IGNORECASE)
_SPACED_OPERATOR = re.compile(r"([<>!])\s+=")


def prepare_spider_sql(sql: str, keep_distinct: bool = False) -> str:
    """The Spider test-suite rewrite: `> =` -> `>=` (also `<`, `!`), and every DISTINCT removed
    outside string literals unless `keep_distinct`."""
    parts = _LITERAL.split(sql)
    for i in range(0, len(parts), 2):  # even indices are outside literals
        part = _SPACED_OPERATOR.sub(r"\1=", parts[i])
        if not keep_distinct:
            part = _DISTINCT.sub(" ", part)
        parts[i] = part
    return "".join(parts)


# ---- execution ----------------------------------------------------------------------------------


def execution_match(
    metric: Metric | str,
    pred_sql: str,
    gold_sql: str,
    databases: Sequence[ReadOnlyDatabase],
    *,
    timeout_s: float | None = None,
    keep_distinct: bool = False,
    gold_cache: MutableMapping[tuple[str, str], QueryOutcome] | None = None,
) -> MatchResult:
    """Run prediction and gold on every database in `databases` (Spider's test suite; one database
    otherwise) and compare. Never raises for a bad prediction.

    `gold_cache` keeps successful gold results by (database url, gold SQL): the databases are
    read-only, so a gold query's rows never change."""
    metric = Metric(metric)
    if not databases:
        raise ValueError("execution_match needs at least one database")
    limit = DEFAULT_TIMEOUT_S[metric] if timeout_s is None else timeout_s
    ordered = False
    if metric is Metric.SPIDER:
        ordered = order_matters(gold_sql)
        pred_sql = prepare_spider_sql(pred_sql, keep_distinct)
        gold_sql = prepare_spider_sql(gold_sql, keep_distinct)
    else:
        databases = databases[:1]
    if not pred_sql.strip():
        return MatchResult(MatchStatus.PRED_ERROR, "empty prediction")
    for db in databases:
        pred = db.execute(pred_sql, timeout_s=limit)
        if not pred.ok:
            return MatchResult(_PRED_STATUS[pred.status], pred.message)
        key = (db.url, gold_sql)
        gold = gold_cache.get(key) if gold_cache is not None else None
        if gold is None:
            gold = db.execute(gold_sql, timeout_s=limit)
            if gold_cache is not None and gold.ok:
                gold_cache[key] = gold
        if not gold.ok:
            return MatchResult(MatchStatus.GOLD_ERROR, f"gold query failed: {gold.message}")
        if not rows_match(metric, pred.rows, gold.rows, ordered=ordered):
            return MatchResult(MatchStatus.WRONG)
    return MatchResult(MatchStatus.CORRECT)
