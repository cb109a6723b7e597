"""Trials and jobs with real bwrap sandboxes: the issue's "must show" items."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyrl_gym.cli import app as skyrl_app
from skyrl_gym.envs.harbor.env import BUNDLED_TASKS
from skyrl_gym.envs.harbor.task import find_task_dirs
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.benchmarks.harbor.job import JobConfig, TrialError, run_job
from tests.skyrl_gym.envs.harbor.conftest import ANSWER, arun, bash_call, make_task, needs_bwrap

pytestmark = needs_bwrap
BUNDLED = [p.name for p in find_task_dirs(BUNDLED_TASKS)]


def _job(out: Path) -> dict:
    return json.loads((out / "job.json").read_text())


@pytest.mark.parametrize(("agent", "want"), [("oracle", 1.0), ("nop", 0.0)])
def test_bundled_tasks_oracle_scores_1_nop_scores_0(tmp_path, agent, want):
    job = arun(run_job(JobConfig(BUNDLED_TASKS, tmp_path, agent=agent, concurrency=2)), 120)
    data = _job(tmp_path)
    assert [t["task"] for t in data["trials"]] == BUNDLED and len(BUNDLED) >= 8
    for trial in data["trials"]:
        assert trial["reward"] == want and trial["error"] is None, trial
        assert trial["rewards"]["reward"] == want
    assert data["mean_reward"] == want and job.mean_reward == want
    # Per-trial folders in Harbor's layout.
    for t in job.trials:
        trial_dir = tmp_path / t.trial_name
        assert json.loads((trial_dir / "result.json").read_text())["reward"] == want
        assert (trial_dir / "verifier" / "test-stdout.txt").is_file()
        assert (trial_dir / "agent" / "oracle.txt").is_file() == (agent == "oracle")
    # reward.json keys all show up (csv-summary writes two).
    csv = next(t for t in data["trials"] if t["task"] == "csv-summary")
    assert set(csv["rewards"]) == {"reward", "regions_correct"}
    # What bwrap could not apply is reported (the apt-get step of the git task: the host's
    # minimal system has no dpkg database; without a copy-on-write root, no registry).
    git = next(t for t in job.trials if t.task == "repair-git-repo")
    assert any(
        "apt-get" in n and ("no dpkg database" in n or "registry" in n)
        for n in git.environment_notes
    ), git.environment_notes


def test_reward_written_by_the_agent_does_not_count(tmp_path):
    """The agent writes reward.txt = 1 (directly, via reward.json, and from a background
    process that outlives its turn) and peeks for /tests: it gets 0."""
    tasks = tmp_path / "tasks"
    # A lax verifier: it keeps any reward file it finds, after giving stray writers time.
    make_task(
        tasks,
        "cheat",
        test_sh="sleep 2.5; [ -e /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt",
    )
    actions = [
        bash_call(
            "echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 1}' > /logs/verifier/reward.json; "
            "(sleep 1; echo 1 > /logs/verifier/reward.txt) > /dev/null 2>&1 & "
            "ls /tests/test.sh; cat /logs/verifier/reward.txt"
        ),
        ANSWER,
    ]
    policy = ScriptedPolicy(actions, name="cheater")
    config = JobConfig(tasks, tmp_path / "out", agent="llm", policy="scripted")
    job = arun(run_job(config, policy=policy), 60)
    (trial,) = job.trials
    assert trial.reward == 0.0 and trial.error is None
    traj = (tmp_path / "out" / trial.trial_name / "agent" / "trajectory.json").read_text()
    seen = json.loads(traj)["steps"][2]["observation"]["results"][0]["content"]
    assert "No such file" in seen and seen.startswith("1")  # no tests; its own file
    # Nothing the agent (or a process it left behind) wrote reached the verifier's folder.
    verifier = tmp_path / "out" / trial.trial_name / "verifier"
    assert (verifier / "reward.txt").read_text().strip() == "0"
    assert not (verifier / "reward.json").exists()


def test_hanging_verifier_and_malformed_tasks_do_not_stop_the_job(tmp_path):
    tasks = tmp_path / "tasks"
    make_task(tasks, "a-good")
    make_task(
        tasks,
        "b-hangs",
        toml='schema_version = "1.4"\n[verifier]\ntimeout_sec = 1.5\n',
        test_sh="sleep 600; echo 1 > /logs/verifier/reward.txt",
    )
    make_task(tasks, "c-no-test-sh", test_sh=None)
    make_task(tasks, "d-bad-toml", toml="schema_version = \n")
    make_task(tasks, "e-unknown-schema", toml='schema_version = "7.0"\n')
    make_task(tasks, "f-no-reward", test_sh="echo forgot to write a reward")
    make_task(tasks, "g-bad-reward", test_sh="echo lots > /logs/verifier/reward.txt")
    runner = CliRunner()
    out = tmp_path / "out"
    result = runner.invoke(
        skyrl_app, ["harbor", "run", "-p", str(tasks), "-a", "oracle", "-n", "2", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    trials = {t["task"]: t for t in _job(out)["trials"]}
    assert trials["a-good"]["reward"] == 1.0 and trials["a-good"]["error"] is None
    assert trials["b-hangs"] == {
        **trials["b-hangs"],
        "reward": None,
        "rewards": None,
        "error": "verifier_timeout",
    }
    for name in ("c-no-test-sh", "d-bad-toml", "e-unknown-schema"):
        assert trials[name]["error"] == "invalid_task" and trials[name]["reward"] is None
    assert trials["f-no-reward"]["error"] == "reward_file_not_found"
    assert trials["g-bad-reward"]["error"] == "reward_parse_error"
    assert _job(out)["mean_reward"] == pytest.approx(1 / 7)
    messages = {
        name: json.loads((out / trials[name]["trial_name"] / "result.json").read_text())[
            "error_message"
        ]
        for name in trials
    }
    assert "tests/test.sh" in messages["c-no-test-sh"]
    assert "task.toml" in messages["d-bad-toml"] and "invalid TOML" in messages["d-bad-toml"]
    assert (
        "schema_version" in messages["e-unknown-schema"] and "7.0" in messages["e-unknown-schema"]
    )
    assert "timeout_sec=1.5" in messages["b-hangs"]
    assert "verifier_timeout" in result.output and "mean reward 0.143" in result.output


def test_agent_timeout_is_recorded_and_still_graded(tmp_path):
    tasks = tmp_path / "tasks"
    make_task(
        tasks,
        "slow",
        toml='schema_version = "1.4"\n[agent]\ntimeout_sec = 1.0\n',
        solve_sh="echo ok > /app/done.txt; sleep 600",
    )
    job = arun(run_job(JobConfig(tasks, tmp_path / "out", agent="oracle")), 60)
    (trial,) = job.trials
    assert trial.error is TrialError.AGENT_TIMEOUT and trial.agent_error is TrialError.AGENT_TIMEOUT
    assert trial.reward == 1.0  # the verifier judged the state the agent left
    assert trial.agent_execution_s < 10


def test_llm_agent_solves_a_bundled_task_and_writes_trajectories(tmp_path):
    tasks = tmp_path / "tasks"
    make_task(
        tasks,
        "config",
        instruction="Set port to 8080 in /app/app.ini.",
        dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\nCOPY app.ini .\nENV APP_MODE=test\n",
        files={"environment/app.ini": "[server]\nport = 5000\n"},
        test_sh=(
            'grep -qx "port = 8080" /app/app.ini && [ "$APP_MODE" = test ] '
            "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt"
        ),
    )
    actions = [
        bash_call("cat app.ini; echo mode=$APP_MODE"),
        '<tool_call>{"name": "edit_file", "arguments": {"path": "app.ini", '
        '"old_text": "port = 5000", "new_text": "port = 8080"}}</tool_call>',
        ANSWER,
    ]
    out = tmp_path / "out"
    job = arun(
        run_job(JobConfig(tasks, out, agent="llm", policy="x"), policy=ScriptedPolicy(actions)), 60
    )
    (trial,) = job.trials
    assert trial.reward == 1.0 and trial.error is None
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["task_id"] == "config"
    atif = json.loads((out / trial.trial_name / "agent" / "trajectory.json").read_text())
    assert atif["schema_version"].startswith("ATIF-v")
    agent_steps = [s for s in atif["steps"] if s["source"] == "agent"]
    assert [s["tool_calls"][0]["function_name"] for s in agent_steps] == [
        "bash",
        "edit_file",
        "answer",
    ]
    assert "port = 5000" in agent_steps[0]["observation"]["results"][0]["content"]
    assert "mode=test" in agent_steps[0]["observation"]["results"][0]["content"]


def test_cli_rejects_llm_without_policy(tmp_path):
    result = CliRunner().invoke(
        skyrl_app,
        ["harbor", "run", "-p", str(BUNDLED_TASKS), "-a", "llm", "--out", str(tmp_path)],
    )
    assert result.exit_code == 2 and "policy" in result.output
