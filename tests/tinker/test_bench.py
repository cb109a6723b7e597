"""`skyrl bench tinker` runs and reports both overheads."""

from __future__ import annotations

import pytest

pytest.importorskip("tinker")


def test_tinker_bench_reports_overheads() -> None:
    from skyrl_sdk.benchmarks.tinker_bench import run

    report = run(iters=2)
    for key in ("fwdbwd_overhead_ms", "sample_overhead_ms"):
        assert isinstance(report.result[key], float)
    assert report.result["fwdbwd_server_ms"] > 0 and report.result["sample_direct_ms"] > 0
