"""`skyrl text2sql eval --policy ... --trials K`: every question K times, a scripted policy
whose seeded mistakes answer with the row's known-wrong SQL; results.json's statistics
checked against estimators computed here from each trial's scored items."""

from __future__ import annotations

import json
import math
from pathlib import Path

from click.testing import CliRunner as ClickRunner
from typer.testing import CliRunner

from skyrl_gym.cli import CommandEntry, app, load_command
from skyrl_gym.envs.sql.bundled import bundled_tasks
from skyrl_sdk.agents.scripted import Mistakes
from skyrl_sdk.agents.trials import trial_seed

N, K, SEED = 8, 3, 5


def test_policy_trials_report_interval_pass_at_k_and_flip_rate(
    bundled: Path, tmp_path: Path
) -> None:
    rows = bundled_tasks()[:N]
    # A mistake answers with a query the metric scores wrong (a syntax error).
    mistakes = {"rate": 0.5, "action": "<solution>SELEC 1</solution>"}
    script = {
        "actions": {str(r["task_id"]): [f"<solution>{r['gold_sql']}</solution>"] for r in rows},
        "mistakes": mistakes,
    }
    (tmp_path / "script.json").write_text(json.dumps(script))
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            *("text2sql", "eval", "--dataset", "bundled", "--limit", str(N), "--out", str(out)),
            *("--policy", f"scripted:{tmp_path / 'script.json'}"),
            *("--trials", str(K), "--seed", str(SEED)),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    wrong = Mistakes(**mistakes)
    for k in range(K):
        want = [
            str(r["task_id"])
            for r in rows
            if not wrong.strikes(trial_seed(SEED, k, K), str(r["task_id"]))
        ]
        assert data["per_trial"][str(k)]["correct_ids"] == want
    # Items and accuracy are trial 0's, as in a one-trial run.
    assert data["accuracy"] == data["per_trial"]["0"]["accuracy"]
    cs = [data["per_task"][str(r["task_id"])]["successes"] for r in rows]
    assert all(data["per_task"][str(r["task_id"])]["trials"] == K for r in rows)
    assert math.isclose(data["mean"], sum(cs) / (K * N))
    for k in range(1, K + 1):
        at = sum(1 - math.comb(K - c, k) / math.comb(K, k) for c in cs) / N
        hat = sum(math.comb(c, k) / math.comb(K, k) for c in cs) / N
        assert math.isclose(data["pass_at_k"][str(k)], at)
        assert math.isclose(data["pass_hat_k"][str(k)], hat)
    assert math.isclose(data["flip_rate"], sum(0 < c < K for c in cs) / N)
    assert data["flip_rate"] > 0
    low, high = data["ci95"]
    assert f"95% interval (bootstrap): {low:.1%} .. {high:.1%}" in result.output
    assert f"flip rate: {data['flip_rate']:.1%}" in result.output
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["trial"] for x in lines) == sorted(list(range(K)) * N)

    # `skyrl compare` reads it, trial by trial.
    compare = load_command(CommandEntry("compare", "skyrl_sdk.benchmarks.compare:compare_command"))
    compared = ClickRunner().invoke(compare, [str(out), str(out / "results.json")])
    assert compared.exit_code == 0, compared.output
    payload = json.loads(compared.output.strip().splitlines()[-1])
    assert payload["a"]["kind"] == "text2sql" and payload["pairs"] == N * K
    assert payload["difference"] == 0.0 and payload["verdict"] == "no_difference"
