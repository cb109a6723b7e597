"""`skyrl text2sql eval` and the bundled benchmark: gold scores 100%, known-wrong scores 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyrl_gym.cli import app
from skyrl_gym.envs.sql.bundled import bundled_tasks
from skyrl_gym.envs.sql.metrics import Metric
from skyrl_sdk.benchmarks.text2sql.evaluate import (
    PredictionsError,
    read_predictions,
    score_predictions,
)
from tests.skyrl_gym.envs.sql.conftest import digest

runner = CliRunner()


def test_bundled_benchmark_shape(bundled: Path) -> None:
    rows = bundled_tasks()
    assert len(rows) >= 150
    assert len({r["db_id"] for r in rows}) >= 4
    assert {r["difficulty"] for r in rows} == {"easy", "medium", "hard", "extra"}
    sqls = " ".join(r["gold_sql"].upper() for r in rows)
    for feature in (
        " JOIN ",
        "GROUP BY",
        "ORDER BY",
        "(SELECT",
        "HAVING",
        "LEFT JOIN",
        "INTERSECT",
    ):
        assert feature in sqls, feature


@pytest.mark.parametrize("metric", list(Metric))
def test_gold_scores_100_and_known_wrong_scores_0(bundled: Path, metric: Metric) -> None:
    rows = list(bundled_tasks())
    gold = score_predictions(rows, [r["gold_sql"] for r in rows], db_root=bundled, metric=metric)
    assert gold.accuracy == 1.0, [i for i in gold.items if not i.correct][:3]
    wrong_rows = [r for r in rows if "wrong_sql" in r]
    assert len(wrong_rows) >= 25
    wrong = score_predictions(
        wrong_rows, [r["wrong_sql"] for r in wrong_rows], db_root=bundled, metric=metric
    )
    assert wrong.accuracy == 0.0, [i for i in wrong.items if i.correct]
    # Every gold result is non-empty, so the same query with its rows filtered out is wrong.
    emptied = [f"SELECT * FROM ({r['gold_sql']}) WHERE 0" for r in rows]
    assert score_predictions(rows, emptied, db_root=bundled, metric=metric).accuracy == 0.0


def test_cli_predictions_text_file_with_writes(bundled: Path, tmp_path: Path) -> None:
    rows = list(bundled_tasks())
    lines = [r["gold_sql"] for r in rows]
    lines[0] = "DELETE FROM customers"
    lines[1] = "SELECT 1; DROP TABLE categories"
    lines[2] = "SELECT nonsense FROM nowhere"
    lines[3] = ""
    preds = tmp_path / "pred.sql"
    preds.write_text("\n".join(lines) + "\n")
    databases = sorted((bundled / "database").rglob("*.sqlite"))
    before = [digest(p) for p in databases]
    result = runner.invoke(app, [
        "text2sql", "eval", "--dataset", "bundled", "--predictions", str(preds),
        "--metric", "bird", "--out", str(tmp_path / "out"),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert [digest(p) for p in databases] == before
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["metric"] == "bird" and "set(pred rows)" in data["metric_semantics"]
    assert data["n"] == len(rows) and data["accuracy"] == pytest.approx((len(rows) - 4) / len(rows))
    items = data["items"]
    assert [i["index"] for i in items] == list(range(len(rows)))
    assert [i["correct"] for i in items[:5]] == [0, 0, 0, 0, 1]
    assert items[0]["status"] == "pred_refused" and "read-only" in items[0]["error"]
    assert "one statement" in items[1]["error"] and "no such table" in items[2]["error"]
    assert items[3]["error"] == "no prediction" and "error" not in items[4]
    assert set(data["by_db"]) == {"retail", "university", "flights", "library"}
    assert set(data["by_difficulty"]) == {"easy", "medium", "hard", "extra"}


def test_spider_dataset_with_jsonl_and_bird_predictions(db_root: Path, tmp_path: Path) -> None:
    dev = [
        {"db_id": "shop", "question": "Names over 30", "query": "SELECT name FROM person WHERE age > 30"},
        {"db_id": "shop", "question": "Cities", "query": "SELECT name FROM city ORDER BY name"},
    ]  # fmt: skip
    (db_root / "dev.json").write_text(json.dumps(dev))
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text(
        json.dumps({"index": 1, "sql": "SELECT name FROM city ORDER BY name DESC"})
        + "\n"
        + json.dumps({"index": 0, "sql": "SELECT name FROM person WHERE age >= 31"})
        + "\n"
    )
    out = tmp_path / "o1"
    args = ["text2sql", "eval", "--dataset", str(db_root / "dev.json"), "--db-root", str(db_root)]
    result = runner.invoke(app, [*args, "--predictions", str(jsonl), "--out", str(out)])
    assert result.exit_code == 0, result.output
    items = json.loads((out / "results.json").read_text())["items"]
    assert [i["correct"] for i in items] == [1, 0]  # spider: ORDER BY in gold, order matters
    bird = tmp_path / "predict_dev.json"
    bird.write_text(json.dumps({"0": "SELECT name FROM person WHERE age > 30\t----- bird -----\tshop",
                                "1": "SELECT name FROM city ORDER BY name DESC\t----- bird -----\tshop"}))  # fmt: skip
    result = runner.invoke(
        app, [*args, "--predictions", str(bird), "--metric", "bird", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert json.loads((out / "results.json").read_text())["accuracy"] == 1.0  # sets: order ignored


def test_prediction_count_mismatch_is_an_error(bundled: Path, tmp_path: Path) -> None:
    preds = tmp_path / "short.sql"
    preds.write_text("SELECT 1\nSELECT 2\n")
    with pytest.raises(PredictionsError, match="2 predictions for"):
        read_predictions(preds, list(bundled_tasks()))
    result = runner.invoke(app, ["text2sql", "eval", "--dataset", "bundled", "--predictions",
                                 str(preds), "--out", str(tmp_path / "o")])  # fmt: skip
    assert result.exit_code == 2 and "one line per question" in result.output


def test_cli_argument_errors(tmp_path: Path) -> None:
    base = ["text2sql", "eval", "--dataset", "bundled", "--out", str(tmp_path)]
    result = runner.invoke(app, base)
    assert result.exit_code == 2 and "exactly one of" in result.output
    result = runner.invoke(app, [*base, "--predictions", "x", "--metric", "exact"])
    assert result.exit_code == 2 and "unknown metric" in result.output


def test_policy_mode_oracle_and_unknown_spec(bundled: Path, tmp_path: Path) -> None:
    pytest.importorskip("skyrl_sdk.agents.rollout")
    out = tmp_path / "pol"
    result = runner.invoke(app, ["text2sql", "eval", "--dataset", "bundled", "--policy", "oracle",
                                 "--limit", "12", "--metric", "skyrl", "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    assert data["mode"] == "policy" and data["n"] == 12 and data["accuracy"] == 1.0
    assert data["mean_env_reward"] == 1.0
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 12
    result = runner.invoke(app, ["text2sql", "eval", "--dataset", "bundled", "--policy",
                                 "nonsense-spec", "--out", str(out)])  # fmt: skip
    assert result.exit_code == 2 and "cannot build policy 'nonsense-spec'" in result.output


def test_bench_ours_only() -> None:
    from skyrl_sdk.benchmarks.perf.sql import run

    report = run(seconds=0.2, include_peer=False)
    assert report.result["ours_steps_per_s"] > 0 and report.result["ours_final_reward"] == 1.0
    assert set(report.result) >= {"ours_steps_per_s", "skyrl_gym_steps_per_s", "speedup"}


def test_syntax_error_scores_pred_error_and_a_write_pred_refused(bundled: Path) -> None:
    rows = bundled_tasks()[:3]
    preds = ["SELEC COUNT(*) FROM customers", "DELETE FROM customers", "SELECT COUNT(*) FRM x"]
    report = score_predictions(rows, preds, db_root=bundled, metric=Metric.BIRD)
    statuses = [i.status for i in report.items]
    assert statuses == ["pred_error", "pred_refused", "pred_error"], report.items
    assert "syntax error" in (report.items[0].error or "")


def test_policy_mode_progress_max_tokens_and_wrong_rows(bundled: Path, tmp_path: Path) -> None:
    """`--policy`: a progress bar, `--max-tokens` reaches the episodes, and a wrong answer
    shows (in the console and results.json) the gold rows next to the predicted ones."""
    pytest.importorskip("skyrl_sdk.agents.rollout")
    rows = bundled_tasks()[:3]
    answers = [rows[0]["gold_sql"], rows[1]["wrong_sql"], "SELEC name FROM categories"]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({
        str(r["task_id"]): [f"<solution>{sql}</solution>"] for r, sql in zip(rows, answers, strict=True)
    }))  # fmt: skip
    out = tmp_path / "pol"
    result = runner.invoke(app, ["text2sql", "eval", "--dataset", "bundled", "--policy",
                                 f"scripted:{script}", "--limit", "3", "--max-tokens", "64",
                                 "--metric", "bird", "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "3/3" in result.output  # the progress bar's count
    data = json.loads((out / "results.json").read_text())
    assert data["max_tokens"] == 64
    items = data["items"]
    assert [i["status"] for i in items] == ["correct", "wrong", "pred_error"]
    assert "gold_rows" not in items[0] and "gold_rows" not in items[2]
    wrong = items[1]
    assert "Books" in json.dumps(wrong["gold_rows"])
    assert "Books" not in json.dumps(wrong["pred_rows"])
    assert "wrong answers" in result.output and rows[1]["task_id"] in result.output
    assert "gold rows" in result.output and "predicted rows" in result.output
