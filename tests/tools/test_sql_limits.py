"""The SQL caps' parts (`tools.sql_limits`): defaults and validation, clipped text, the
query guard, capped fetches by rows and bytes (on every backend: tests/skyrl_gym/envs/sql/
test_limits.py)."""

from __future__ import annotations

import time

import pytest

from skyrl_sdk.tools.sql_limits import (
    DEFAULT_SQL_LIMITS,
    QueryGuard,
    SQLCap,
    SQLLimits,
    clip_text,
    fetch_capped,
    format_bytes,
    rss_bytes,
)


def test_defaults_and_validation() -> None:
    assert DEFAULT_SQL_LIMITS.max_rows == 10_000
    assert DEFAULT_SQL_LIMITS.max_result_bytes == 16 * 2**20
    assert DEFAULT_SQL_LIMITS.max_memory_growth_bytes == 256 * 2**20
    assert DEFAULT_SQL_LIMITS.timeout_s == 30.0
    assert format_bytes(16 * 2**20) == "16 MiB" and format_bytes(1536) == "1.5 KiB"
    with pytest.raises(ValueError, match="max_rows"):
        SQLLimits(max_rows=0)
    with pytest.raises(ValueError, match="positive"):
        SQLLimits(timeout_s=0)


def test_clip_text_marks_what_was_cut() -> None:
    assert clip_text("abc", 5) == "abc"
    clipped = clip_text("x" * 250, 100)
    assert clipped == "x" * 100 + "\n[... truncated: 150 more characters ...]"


def test_rss_and_guard() -> None:
    rss = rss_bytes()
    assert rss is None or rss > 1_000_000
    guard = QueryGuard(DEFAULT_SQL_LIMITS, timeout_s=0.05)
    with guard:
        assert not guard.should_stop()
        time.sleep(0.1)
        assert guard.should_stop() and guard.hit is SQLCap.TIME


class _Cursor:
    """A DB-API cursor over a list, recording the batch sizes asked for."""

    description = (("a",), ("b",))

    def __init__(self, rows: list[tuple[object, ...]]):
        self.rows = rows
        self.asked: list[int] = []

    def fetchmany(self, n: int) -> list[tuple[object, ...]]:
        self.asked.append(n)
        out, self.rows = self.rows[:n], self.rows[n:]
        return out


def test_fetch_capped_rows_bytes_and_keep() -> None:
    limits = SQLLimits(max_rows=100, max_result_bytes=1000)
    whole = fetch_capped(_Cursor([(i, "x") for i in range(100)]), limits)
    assert len(whole.rows) == 100 and not whole.truncated and whole.cap is None
    rows = fetch_capped(_Cursor([(i, "x") for i in range(500)]), limits)
    assert len(rows.rows) == 100 and rows.truncated and rows.cap is SQLCap.ROWS
    cursor = _Cursor([(i, "y" * 300) for i in range(50)])
    big = fetch_capped(cursor, limits)
    assert len(big.rows) == 3 and big.cap is SQLCap.BYTES  # 3 x 308 bytes fit, the 4th does not
    assert max(cursor.asked) <= 3  # rows of this size are never fetched many at a time
    kept = fetch_capped(_Cursor([(i, "x") for i in range(50)]), limits, keep=lambda cols: 5)
    assert len(kept.rows) == 5 and kept.truncated and kept.cap is None
