"""`skyrl bench env`: our side runs the real workload; the report ends with one JSON line."""

import json
import platform

from skyrl_sdk.benchmarks.perf.env import _ours, interpreter_note
from skyrl_sdk.benchmarks.perf.report import BenchReport


def test_our_side_measures_a_positive_rate():
    cpu_rate, wall_rate = _ours(0.05)
    assert cpu_rate > 1000 and wall_rate > 1000


def test_report_prints_a_table_then_one_json_line(capsys):
    report = BenchReport("x", [("a", "1", "2")], {"ratio": 1.5, "missing": None}, ["a note"])
    report.print()
    lines = capsys.readouterr().out.strip().splitlines()
    assert json.loads(lines[-1]) == {"ratio": 1.5, "missing": None}
    assert any("a note" in line for line in lines[:-1])


def test_a_peer_on_another_python_is_named_in_the_notes():
    assert interpreter_note(platform.python_version()) is None
    assert interpreter_note(None) is None  # no peer, or an old peer script
    note = interpreter_note("3.9.0")
    assert note is not None and "3.9.0" in note and platform.python_version() in note
