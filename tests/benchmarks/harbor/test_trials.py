"""`skyrl harbor run -k K` on the bundled tasks: each task K times, job.json's statistics
(success = reward >= 1) checked against estimators computed here by hand from the job's own
trials. The agent is a command that runs the task's own solve.sh on a coin flip, so some
trials succeed and some do not."""

from __future__ import annotations

import json
import math
import shlex
from collections import Counter
from pathlib import Path

from typer.testing import CliRunner

from skyrl_gym.cli import app as skyrl_app
from skyrl_gym.envs.harbor.env import BUNDLED_TASKS
from skyrl_gym.envs.harbor.task import find_task_dirs
from tests.skyrl_gym.envs.harbor.conftest import needs_bwrap

pytestmark = needs_bwrap
BUNDLED = [p.name for p in find_task_dirs(BUNDLED_TASKS)]
COIN = (
    "if [ $(( $(od -An -N1 -tu1 /dev/urandom) % 2 )) -eq 0 ]; then "
    f'bash {BUNDLED_TASKS}/"$SKYRL_TASK_ID"/solution/solve.sh; fi'
)


def harbor(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(skyrl_app, ["harbor", "run", "-p", "bundled", *args])
    return result.exit_code, result.output


def test_oracle_with_two_attempts_plays_every_task_twice(tmp_path: Path) -> None:
    code, output = harbor("-a", "oracle", "--n-attempts", "2", "-o", str(tmp_path))
    assert code == 0, output
    job = json.loads((tmp_path / "job.json").read_text())
    assert Counter((t["task"], t["trial"]) for t in job["trials"]) == {
        (task, k): 1 for task in BUNDLED for k in (0, 1)
    }
    stats = job["statistics"]
    assert stats["trials"] == 2 and stats["mean"] == 1.0 and stats["flip_rate"] == 0.0
    assert stats["pass_at_k"] == {"1": 1.0, "2": 1.0}
    # Each trial folder's result.json names its trial too.
    for t in job["trials"]:
        result = json.loads((tmp_path / t["trial_name"] / "result.json").read_text())
        assert result["trial"] == t["trial"]


def test_a_coin_flipping_agent_with_k_2_reports_its_noise(tmp_path: Path) -> None:
    (tmp_path / "policy.json").write_text('["unused"]')
    code, output = harbor(
        *("-a", f"command:bash -c {shlex.quote(COIN)}", "--agent-bind", str(BUNDLED_TASKS)),
        *("--policy", f"scripted:{tmp_path / 'policy.json'}", "-k", "2", "-o", str(tmp_path)),
    )
    assert code == 0, output
    job = json.loads((tmp_path / "job.json").read_text())
    stats = job["statistics"]
    outcomes: dict[str, list[bool]] = {}
    for t in job["trials"]:
        outcomes.setdefault(t["task"], []).append(t["reward"] is not None and t["reward"] >= 1)
    assert sorted(outcomes) == sorted(BUNDLED) and all(len(v) == 2 for v in outcomes.values())
    cs = {task: sum(v) for task, v in outcomes.items()}
    assert stats["per_task"] == {task: {"successes": c, "trials": 2} for task, c in cs.items()}
    n = len(cs)
    mean = sum(c / 2 for c in cs.values()) / n
    # By hand, n = 2 trials: pass@1 = c/2, pass@2 = 1 - C(2-c, 2)/C(2, 2) = (c > 0),
    # pass^2 = C(c, 2)/C(2, 2) = (c == 2); a task flips when c == 1.
    assert stats["mean"] == stats["pass_at_k"]["1"] == stats["pass_hat_k"]["1"]
    assert math.isclose(stats["mean"], mean)
    assert math.isclose(stats["pass_at_k"]["2"], sum(c > 0 for c in cs.values()) / n)
    assert math.isclose(stats["pass_hat_k"]["2"], sum(c == 2 for c in cs.values()) / n)
    assert math.isclose(stats["flip_rate"], sum(c == 1 for c in cs.values()) / n)
    low, high = stats["ci95"]
    assert stats["ci95_method"] == "bootstrap" and low <= mean <= high
    assert f"95% interval (bootstrap): {low:.1%} .. {high:.1%}" in output
    assert f"pass@2: {stats['pass_at_k']['2']:.3f}" in output
    assert f"pass^2: {stats['pass_hat_k']['2']:.3f}" in output
    assert f"flip rate: {stats['flip_rate']:.1%}" in output
    # The trajectories carry their trial.
    lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
    assert Counter((json.loads(x)["task_id"], json.loads(x)["trial"]) for x in lines) == {
        (task, k): 1 for task in BUNDLED for k in (0, 1)
    }


def _sampled(out: Path) -> dict[int, list[int]]:
    """Trial -> the ids the llm agent sampled in it (trajectories.jsonl)."""
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    episodes = [json.loads(line) for line in lines]
    return {e["trial"]: [t for turn in e["turns"] for t in turn["token_ids"]] for e in episodes}


def test_llm_agent_trials_sample_with_seeds_of_their_own(tmp_path: Path) -> None:
    """`--seed S -k 2`: trial 1 samples with another seed than trial 0 (the tiny random
    model's tokens differ), and the same command again samples the same tokens."""
    task = str(BUNDLED_TASKS / BUNDLED[0])
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        result = CliRunner().invoke(
            skyrl_app,
            [
                *("harbor", "run", "-p", task, "-a", "llm", "--policy", "tiny", "-k", "2"),
                *("--seed", "5", "--max-turns", "1", "--max-tokens", "16", "-o", str(out)),
            ],
        )
        assert result.exit_code == 0, result.output
        runs.append(_sampled(out))
    assert set(runs[0]) == {0, 1}
    assert runs[0][0] != runs[0][1]
    assert runs[0] == runs[1]
