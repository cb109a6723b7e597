from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from skyrl_gym.cli import app

runner = CliRunner()


def _flat(text: str) -> str:
    """Rich wraps long lines; compare with the wrapping undone."""
    return " ".join(text.split())


def test_skyrl_env_check_search_passes() -> None:
    result = runner.invoke(app, ["env", "check", "search"])
    assert result.exit_code == 0, result.output
    assert "checks passed" in result.output


def test_skyrl_search_index_and_query(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        json.dumps({"id": "p", "title": "Paris", "text": "Paris is the capital of France."})
        + "\n"
        + json.dumps({"id": "b", "title": "Berlin", "text": "Berlin is in Germany."})
        + "\n"
    )
    out = tmp_path / "idx"
    result = runner.invoke(app, ["search", "index", str(corpus), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "indexed 2 documents" in result.output
    result = runner.invoke(app, ["search", "query", str(out), "capital of France", "--topk", "1"])
    assert result.exit_code == 0 and "Paris" in result.output and "Berlin" not in result.output
    result = runner.invoke(app, ["search", "index", str(corpus), "--out", str(out)])
    assert result.exit_code == 2 and "already holds an index" in _flat(result.output)
    result = runner.invoke(app, ["search", "query", str(tmp_path), "x"])
    assert result.exit_code == 2 and "not a search index" in _flat(result.output)


def test_bench_search_reports_the_promised_keys() -> None:
    from skyrl_sdk.benchmarks.perf.search import run

    report = run(builds=1, min_s=0.05, max_tasks=20)
    assert report.result["queries_per_s"] > 0
    assert report.result["index_build_s"] > 0
    assert report.result["recall_at_3"] >= 0.8
