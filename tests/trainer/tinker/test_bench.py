"""`skyrl bench tinker` runs and reports every promised key."""

from __future__ import annotations

import pytest

pytest.importorskip("tinker")


def test_tinker_bench_reports_overheads() -> None:
    from skyrl_sdk.benchmarks.perf.tinker import run

    report = run(iters=2, big_tokens=4000, rounds=1)
    for key in ("fwdbwd_overhead_ms", "sample_overhead_ms", "batched_vs_serial", "peak_rss_mb"):
        assert isinstance(report.result[key], float)
    assert report.result["fwdbwd_server_ms"] > 0 and report.result["sample_direct_ms"] > 0
    assert report.result["peak_rss_mb"] >= report.result["rss_before_big_mb"] > 0
