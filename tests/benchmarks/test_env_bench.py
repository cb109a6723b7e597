"""`skyrl bench env`: our side runs the real workload; the report ends with one JSON line."""

import json

from skyrl_sdk.benchmarks.env_step import _ours
from skyrl_sdk.benchmarks.report import BenchReport


def test_our_side_measures_a_positive_rate():
    cpu_rate, wall_rate = _ours(0.05)
    assert cpu_rate > 1000 and wall_rate > 1000


def test_report_prints_a_table_then_one_json_line(capsys):
    report = BenchReport("x", [("a", "1", "2")], {"ratio": 1.5, "missing": None}, ["a note"])
    report.print()
    lines = capsys.readouterr().out.strip().splitlines()
    assert json.loads(lines[-1]) == {"ratio": 1.5, "missing": None}
    assert any("a note" in line for line in lines[:-1])
