"""`skyrl eval --trials K`: every task K times, its statistics checked against estimators
computed here by hand from the run's own per-task counts, and `--resume` keyed on (task,
trial) after a crash. The policy is a scripted one with seeded mistakes (each trial's
sampling seed decides them), run as the installed `skyrl` script in a user's directory."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from skyrl_sdk.agents.scripted import Mistakes
from skyrl_sdk.agents.trials import trial_episode_id, trial_seed

SKYRL = Path(sys.executable).with_name("skyrl")
TASKS = 10

ENV_MODULE = textwrap.dedent(
    '''
    from skyrl_gym import TextEnv

    TASKS = [{"task_id": f"t{i}", "answer": str(i)} for i in range(10)]


    class Say(TextEnv):
        """Say the task's answer: reward 1 when right, 0 when wrong; one turn."""

        tasks = TASKS

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.task = (options or {}).get("task") or TASKS[0]
            return [{"role": "user", "content": "Say " + self.task["answer"]}], {}

        def step(self, action):
            return [], float(action.strip() == self.task["answer"]), True, False, {}
    '''
)

# t0 is never wrong, t1 always; the rest err half the time: success lies well inside 20-80%.
MISTAKES = {"rate": 0.5, "action": "no idea", "per_task": {"t0": 0.0, "t1": 1.0}}


def script(delay_s: float = 0.0) -> dict:
    actions = {f"t{i}": [str(i)] for i in range(TASKS)}
    return {"actions": actions, "mistakes": MISTAKES, "delay_s": delay_s}


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "say_env.py").write_text(ENV_MODULE)
    (tmp_path / "policy.json").write_text(json.dumps(script()))
    (tmp_path / "slow.json").write_text(json.dumps(script(delay_s=0.15)))
    return tmp_path


def run_env() -> dict[str, str]:
    return {"COLUMNS": "250", "PATH": "/usr/bin:/bin", "HOME": "/tmp", "HF_HUB_OFFLINE": "1"}


def skyrl(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SKYRL), *args], cwd=cwd, capture_output=True, text=True, timeout=180, env=run_env()
    )


def results(out_dir: Path) -> dict:
    return json.loads((out_dir / "results.json").read_text())


def lines(out_dir: Path) -> list[dict]:
    text = (out_dir / "trajectories.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def comb_pass_at_k(n: int, c: int, k: int) -> float:
    # By hand: 1 - C(n-c, k) / C(n, k), written out as products.
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(range(n - c - k + 1, n - c + 1)) / math.prod(range(n - k + 1, n + 1))


def comb_pass_hat_k(n: int, c: int, k: int) -> float:
    if c < k:
        return 0.0
    return math.prod(range(c - k + 1, c + 1)) / math.prod(range(n - k + 1, n + 1))


def test_four_trials_report_interval_pass_at_k_pass_hat_k_and_flip_rate(user_dir: Path) -> None:
    args = ("eval", "say_env:Say", "-p", "scripted:policy.json", "--seed", "7")
    out = skyrl(user_dir, *args, "--trials", "4", "-o", "run")
    assert out.returncode == 0, out.stdout + out.stderr
    data = results(user_dir / "run")
    episodes = data["episodes"]
    assert len(episodes) == 4 * TASKS
    assert Counter((e["task_id"], e["trial"]) for e in episodes) == {
        (f"t{i}", k): 1 for i in range(TASKS) for k in range(4)
    }
    # Each trial's mistakes follow its own sampling seed, derived from --seed and the trial.
    mistakes = Mistakes(**MISTAKES)
    for e in episodes:
        wrong = mistakes.strikes(trial_seed(7, e["trial"], 4), e["task_id"])
        assert e["success"] is (not wrong), e
        assert e["episode_id"] == trial_episode_id(e["task_id"], e["trial"])
        assert e["seed"] is None  # the env's seed stays the task's
    assert {t["trial"] for t in lines(user_dir / "run")} == {0, 1, 2, 3}

    per_task = data["per_task"]
    assert data["trials"] == 4
    for task, counts in per_task.items():
        assert counts == {
            "successes": sum(e["success"] for e in episodes if e["task_id"] == task),
            "trials": 4,
        }
    cs = [per_task[f"t{i}"]["successes"] for i in range(TASKS)]
    mean = sum(c / 4 for c in cs) / TASKS
    assert 0.2 <= mean <= 0.8
    assert cs[0] == 4 and cs[1] == 0
    assert data["mean"] == pytest.approx(mean)
    for k in range(1, 5):
        assert data["pass_at_k"][str(k)] == pytest.approx(
            sum(comb_pass_at_k(4, c, k) for c in cs) / TASKS
        )
        assert data["pass_hat_k"][str(k)] == pytest.approx(
            sum(comb_pass_hat_k(4, c, k) for c in cs) / TASKS
        )
    flips = sum(0 < c < 4 for c in cs) / TASKS
    assert data["flip_rate"] == pytest.approx(flips)
    assert 0 < flips < 1
    low, high = data["ci95"]
    assert data["ci95_method"] == "bootstrap"
    assert 0 <= low < mean < high <= 1
    assert "note" not in data  # several trials: the interval covers the policy's noise too

    printed = " ".join(out.stdout.replace("│", " ").split())
    assert f"95% interval (bootstrap) {low:.1%} .. {high:.1%}" in printed
    assert f"pass@2 {data['pass_at_k']['2']:.3f}" in printed
    assert f"pass^4 {data['pass_hat_k']['4']:.3f}" in printed
    assert f"flip rate {flips:.1%}" in printed
    assert f"tasks x trials {TASKS} x 4" in printed


def test_one_trial_is_the_run_it_was_and_says_its_interval_covers_task_sampling(
    user_dir: Path,
) -> None:
    out = skyrl(user_dir, "eval", "say_env:Say", "-p", "scripted:policy.json", "-o", "run")
    assert out.returncode == 0, out.stdout + out.stderr
    data = results(user_dir / "run")
    # No --seed, one trial: unseeded sampling as before, so the scripted policy never errs.
    assert [e["episode_id"] for e in data["episodes"]] == [f"t{i}" for i in range(TASKS)]
    assert data["trials"] == 1 and data["flip_rate"] is None
    assert data["ci95_method"] == "wilson"
    assert "task sampling only" in data["note"]
    assert "task sampling only" in " ".join(out.stdout.split())


def test_resume_after_a_crash_redoes_nothing_and_loses_nothing(user_dir: Path) -> None:
    args = ("eval", "say_env:Say", "-p", "scripted:slow.json", "--trials", "4", "-c", "1")
    run = user_dir / "run"
    proc = subprocess.Popen(
        [str(SKYRL), *args, "-o", "run"],
        cwd=user_dir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=run_env(),
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        path = run / "trajectories.jsonl"
        if path.exists() and path.read_text().count("\n") >= 12:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # a crash: no results.json, maybe a partial line
    proc.wait(timeout=30)
    assert not (run / "results.json").exists()
    before = [t["episode_id"] for t in lines(run) if t]
    kept = len(before)
    assert 12 <= kept < 4 * TASKS

    resumed = skyrl(user_dir, *args, "-o", "run", "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"{kept} episode(s) kept, {4 * TASKS - kept} to run" in resumed.stdout
    after = [t["episode_id"] for t in lines(run)]
    assert after[:kept] == before  # nothing lost
    assert Counter(after) == {
        trial_episode_id(f"t{i}", k): 1 for i in range(TASKS) for k in range(4)
    }
    # The resumed run's numbers are those of an uninterrupted one.
    whole = skyrl(user_dir, *args[:-2], "-o", "whole")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert results(run)["per_task"] == results(user_dir / "whole")["per_task"]


def test_resume_with_more_trials_plays_only_the_new_ones(user_dir: Path) -> None:
    args = ("eval", "say_env:Say", "-p", "scripted:policy.json", "-o", "run")
    first = skyrl(user_dir, *args, "--trials", "2")
    assert first.returncode == 0, first.stdout + first.stderr
    more = skyrl(user_dir, *args, "--trials", "3", "--resume")
    assert more.returncode == 0, more.stdout + more.stderr
    assert f"{2 * TASKS} episode(s) kept, {TASKS} to run" in more.stdout
    data = results(user_dir / "run")
    assert data["trials"] == 3
    assert all(counts["trials"] == 3 for counts in data["per_task"].values())
