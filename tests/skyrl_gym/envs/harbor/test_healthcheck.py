"""Harbor's healthchecks, run through `skyrl harbor run` on real-format fixtures:

- `real_format/healthcheck-db`: `[environment.healthcheck]` checks that the database the
  Dockerfile built is queryable, after the environment starts and before the agent; one that
  never passes fails the trial's `start` stage (the agent never runs), naming the command,
  its retries and the last attempt's output;
- `real_format/multi-step-checks`: `[steps.healthcheck]` of the second step checks the first
  step's script after the step's setup, before its agent; when it fails (the nop agent wrote
  no script) the trial stops there, `step_setup_failed` naming the step and the check.

Before the healthchecks were read, both were ignored: the failing variants scored as if the
environment were ready.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import needs_bwrap

pytestmark = needs_bwrap

REPO = Path(__file__).parents[4]
FIXTURES = Path(__file__).parent / "real_format"
DB = FIXTURES / "healthcheck-db"
STEPS = FIXTURES / "multi-step-checks"


def harbor_run(task: Path, out: Path, agent: str = "oracle") -> dict:
    """`skyrl harbor run -a AGENT -p TASK`: its only trial's record in job.json."""
    cli = [sys.executable, "-m", "skyrl_gym", "harbor", "run", "-a", agent]
    done = subprocess.run(
        [*cli, "-p", str(task), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert (out / "job.json").is_file(), done.stdout + done.stderr
    (trial,) = json.loads((out / "job.json").read_text())["trials"]
    return trial


def _with_healthcheck(tmp_path: Path, check: str) -> Path:
    """healthcheck-db with its `[environment.healthcheck]` table replaced by `check`."""
    task = tmp_path / "tasks" / DB.name
    shutil.copytree(DB, task)
    toml = (task / "task.toml").read_text()
    head = toml[: toml.index("[environment.healthcheck]")]
    (task / "task.toml").write_text(f"{head}[environment.healthcheck]\n{check}\n")
    return task


def test_oracle_scores_one_and_nop_zero_when_the_check_passes(tmp_path: Path) -> None:
    trial = harbor_run(DB, tmp_path / "oracle")
    assert (trial["reward"], trial["error"]) == (1.0, None), trial
    assert trial["stages"]["start"]["status"] == "ok"
    trial = harbor_run(DB, tmp_path / "nop", agent="nop")
    assert (trial["reward"], trial["error"]) == (0.0, None), trial


def test_a_check_that_never_passes_fails_start_and_the_agent_never_runs(tmp_path: Path) -> None:
    check = (
        "command = \"python3 -c \\\"import sqlite3; sqlite3.connect('/app/data/inventory.db')"
        ".execute('select 1 from orders')\\\"\"\ninterval_sec = 1\nretries = 3"
    )
    trial = harbor_run(_with_healthcheck(tmp_path, check), tmp_path / "out")
    assert trial["reward"] is None and trial["error"] == "environment_error", trial
    start = trial["stages"]["start"]
    assert start["status"] == "failed"
    assert (
        "[environment.healthcheck] failed after 3 consecutive retries (3 attempts)"
        in (start["error"])
    )
    assert "select 1 from orders" in start["error"]  # the command
    assert "exit 1" in start["error"] and "no such table: orders" in start["error"]
    assert start["duration_s"] >= 2.0  # interval_sec=1 between the three failures
    assert trial["stages"]["agent"]["status"] == "skipped"
    assert trial["stages"]["verifier"]["status"] == "skipped"


def test_failures_in_the_start_period_do_not_count(tmp_path: Path) -> None:
    # Fails on its first attempt only; with one retry allowed, only the start period saves it.
    flaky = 'command = "test -e /tmp/.hc-seen || { touch /tmp/.hc-seen; exit 1; }"\nretries = 1'
    graced = harbor_run(
        _with_healthcheck(
            tmp_path / "a", f"{flaky}\nstart_period_sec = 60\nstart_interval_sec = 0.2"
        ),
        tmp_path / "a" / "out",
    )
    assert (graced["reward"], graced["error"]) == (1.0, None), graced
    strict = harbor_run(_with_healthcheck(tmp_path / "b", flaky), tmp_path / "b" / "out")
    assert strict["error"] == "environment_error", strict
    assert "failed after 1 consecutive retries (1 attempts)" in strict["stages"]["start"]["error"]


def test_a_check_past_its_timeout_is_a_failed_attempt(tmp_path: Path) -> None:
    check = 'command = "sleep 30"\ntimeout_sec = 1\nretries = 1'
    trial = harbor_run(_with_healthcheck(tmp_path, check), tmp_path / "out")
    assert trial["error"] == "environment_error", trial
    assert "last attempt: ran past timeout_sec=1" in trial["stages"]["start"]["error"]
    assert trial["stages"]["start"]["duration_s"] < 20


def test_step_healthcheck_runs_before_the_steps_agent(tmp_path: Path) -> None:
    trial = harbor_run(STEPS, tmp_path / "oracle")
    assert (trial["reward"], trial["error"]) == (1.0, None), trial
    assert [(s["name"], s["reward"]) for s in trial["steps"]] == [
        ("01-greet", 1.0),
        ("02-personalise", 1.0),
    ]
    # The nop agent wrote no /app/greet.sh: step 2's check fails, the trial stops there.
    trial = harbor_run(STEPS, tmp_path / "nop", agent="nop")
    assert trial["reward"] is None and trial["error"] == "step_setup_failed", trial
    start = trial["stages"]["start"]["error"]
    assert start.startswith("step_setup_failed: step 02-personalise: [steps.healthcheck] failed")
    assert "'test -x /app/greet.sh'" in start and "2 consecutive retries" in start
    assert [(s["name"], s["reward"], s["error"]) for s in trial["steps"]] == [
        ("01-greet", 0.0, None),
        ("02-personalise", None, "step_setup_failed"),
    ]


def test_a_healthcheck_without_a_command_is_an_invalid_task(tmp_path: Path) -> None:
    trial = harbor_run(_with_healthcheck(tmp_path, "interval_sec = 1"), tmp_path / "out")
    assert trial["error"] == "invalid_task", trial
    assert "[environment.healthcheck].command" in trial["stages"]["build"]["error"]
