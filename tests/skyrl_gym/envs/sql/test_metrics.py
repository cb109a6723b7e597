"""The three execution-accuracy semantics, on hand-built cases where they disagree."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyrl_gym.envs.sql.metrics import (
    MatchStatus,
    Metric,
    execution_match,
    order_matters,
    prepare_spider_sql,
    rows_match,
)
from skyrl_sdk.tools.sqldb import open_database
from tests.skyrl_gym.envs.sql.conftest import make_sqlite

S, B, K = Metric.SPIDER, Metric.BIRD, Metric.SKYRL

# (pred rows, gold rows, gold has ORDER BY, expected {metric: match})
CASES = {
    "identical": ([(1, "a"), (2, "b")], [(1, "a"), (2, "b")], False, {S: True, B: True, K: True}),
    "duplicates dropped": ([(1,), (1,), (2,)], [(1,), (2,)], False, {S: False, B: True, K: True}),
    "duplicate counts differ": (
        [(1,), (1,), (2,)], [(1,), (2,), (2,)], False, {S: False, B: True, K: True}
    ),
    "row order, gold unordered": ([(2,), (1,)], [(1,), (2,)], False, {S: True, B: True, K: True}),
    "row order, gold ordered": ([(2,), (1,)], [(1,), (2,)], True, {S: False, B: True, K: True}),
    "column order": ([("a", 1), ("b", 2)], [(1, "a"), (2, "b")], False, {S: True, B: False, K: False}),
    "column order, ordered rows": (
        [("a", 1), ("b", 2)], [(1, "a"), (2, "b")], True, {S: True, B: False, K: False}
    ),
    "column swap must be consistent": (
        [(1, 2), (4, 3)], [(1, 2), (3, 4)], False, {S: False, B: False, K: False}
    ),
    "nulls equal nulls": ([(None, 1)], [(None, 1)], False, {S: True, B: True, K: True}),
    "null is not zero": ([(0,)], [(None,)], False, {S: False, B: False, K: False}),
    "int equals float": ([(1,)], [(1.0,)], False, {S: True, B: True, K: True}),
    "no float tolerance": ([(0.1 + 0.2,)], [(0.3,)], False, {S: False, B: False, K: False}),
    "text is not a number": ([("1",)], [(1,)], False, {S: False, B: False, K: False}),
    "both empty": ([], [], False, {S: True, B: True, K: True}),
    "extra column": ([(1, 1)], [(1,)], False, {S: False, B: False, K: False}),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_rows_match_semantics(name: str) -> None:
    pred, gold, ordered, expected = CASES[name]
    got = {m: rows_match(m, pred, gold, ordered=ordered) for m in Metric}
    assert got == expected, name


def test_spider_column_permutation_with_many_columns() -> None:
    gold = [(i, i * 10, f"s{i}", i % 2, None) for i in range(30)]
    pred = [(r[2], r[4], r[0], r[3], r[1]) for r in reversed(gold)]
    assert rows_match(S, pred, gold)
    assert not rows_match(S, pred, gold, ordered=True)
    assert not rows_match(B, pred, gold)


def test_order_matters_and_spider_rewrite() -> None:
    assert order_matters("SELECT a FROM t ORDER  BY a")
    assert not order_matters("SELECT a FROM t")

    def spider(sql: str) -> str:
        return " ".join(prepare_spider_sql(sql).split())

    assert spider("SELECT DISTINCT a FROM t WHERE b > = 1") == "SELECT a FROM t WHERE b >= 1"
    assert spider("SELECT COUNT(distinct a) FROM t WHERE s = 'distinct'") == (
        "SELECT COUNT( a) FROM t WHERE s = 'distinct'"
    )
    assert "DISTINCT" in prepare_spider_sql("SELECT DISTINCT a FROM t", keep_distinct=True)


def test_execution_match_on_a_database(tmp_path: Path) -> None:
    db = open_database(make_sqlite(tmp_path / "shop.sqlite"))
    gold = "SELECT name, age FROM person WHERE age > 30"
    swapped = "SELECT age, name FROM person WHERE age > 30"
    assert execution_match(S, swapped, gold, [db]).correct
    assert execution_match(B, swapped, gold, [db]).status is MatchStatus.WRONG
    dup_gold = "SELECT age FROM person WHERE age IS NOT NULL"
    dedup = "SELECT DISTINCT age FROM person WHERE age IS NOT NULL"
    # Spider removes DISTINCT (test-suite default), so these agree; with keep_distinct they don't.
    assert execution_match(S, dedup, dup_gold, [db]).correct
    assert not execution_match(S, dedup, dup_gold, [db], keep_distinct=True).correct
    assert execution_match(K, dedup, dup_gold, [db]).correct
    err = execution_match(B, "SELECT nope FROM person", gold, [db])
    assert err.status is MatchStatus.PRED_ERROR and "no such column" in (err.error or "")
    refused = execution_match(K, "DELETE FROM person", gold, [db])
    assert refused.status is MatchStatus.PRED_REFUSED
    gold_bad = execution_match(K, gold, "SELECT nope FROM person", [db])
    assert gold_bad.status is MatchStatus.GOLD_ERROR


@pytest.mark.parametrize("metric", list(Metric))
def test_execution_match_timeout_interrupts(tmp_path: Path, metric: Metric) -> None:
    import time

    db = open_database(make_sqlite(tmp_path / "shop.sqlite"))
    endless = (
        "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT COUNT(*) FROM r"
    )
    started = time.perf_counter()
    result = execution_match(metric, endless, "SELECT 1", [db], timeout_s=0.2)
    assert result.status is MatchStatus.PRED_TIMEOUT
    assert time.perf_counter() - started < 2


def test_spider_test_suite_needs_every_database_to_agree(tmp_path: Path) -> None:
    main = make_sqlite(tmp_path / "shop" / "shop.sqlite")
    variant = make_sqlite(
        tmp_path / "shop" / "shop_variant.sqlite",
        "CREATE TABLE person (id INTEGER, name TEXT, age INTEGER);"
        "INSERT INTO person VALUES (1, 'Ann', 31), (2, 'Bob', 31);",
    )
    dbs = [open_database(main), open_database(variant)]
    gold = "SELECT name FROM person WHERE age = 31"
    lucky = "SELECT name FROM person WHERE name IN ('Ann', 'Cid')"  # right only on `shop`
    assert execution_match(S, lucky, gold, dbs[:1]).correct
    assert not execution_match(S, lucky, gold, dbs).correct
    assert execution_match(S, gold, gold, dbs).correct
