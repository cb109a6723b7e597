"""Per-stage outcomes of a trial (`trials[].stages`) and a verifier that could not start its
tools (issue 25, difference 9), on real-format task folders under tests/skyrl_gym/envs/harbor/real_format/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyrl_gym.cli import app as skyrl_app
from skyrl_sdk.benchmarks.harbor import cli as harbor_cli
from skyrl_sdk.benchmarks.harbor.job import JobConfig, TrialError, run_job
from tests.skyrl_gym.envs.harbor.conftest import arun, make_task, needs_bwrap

REAL_FORMAT = Path(__file__).parents[2] / "skyrl_gym" / "envs" / "harbor" / "real_format"
STAGES = ["build", "start", "agent", "verifier"]


def test_missing_command_lines_are_recognised() -> None:
    from skyrl_gym.envs.harbor.runtime import missing_commands

    out = (
        "/tests/test.sh: line 3: uvx: command not found\n"
        "/tests/test.sh: 4: pytest: not found\n"
        "/usr/bin/env: 'python3': No such file or directory\n"
        "1 passed in 0.1s\n"
    )
    assert missing_commands(out) == ["uvx", "pytest", "python3"]
    assert missing_commands("FAILED test_outputs.py::test_x - assert 0 == 1\n") == []


@needs_bwrap
def test_verifier_missing_command_is_its_own_error_in_the_verifier_stage(tmp_path: Path) -> None:
    task = REAL_FORMAT / "verifier-missing-command"
    job = arun(run_job(JobConfig(task, tmp_path, agent="oracle", concurrency=1)), 120)
    (trial,) = job.trials
    assert trial.reward is None
    assert trial.error is TrialError.VERIFIER_COMMAND_NOT_FOUND
    assert "tbench-uvx-runner" in trial.error_message
    data = json.loads((tmp_path / "job.json").read_text())
    stages = data["trials"][0]["stages"]
    assert list(stages) == STAGES
    assert [stages[s]["status"] for s in STAGES] == ["ok", "ok", "ok", "failed"]
    assert stages["verifier"]["error"].startswith("verifier_command_not_found: ")
    assert "tbench-uvx-runner" in stages["verifier"]["error"]
    result = json.loads((tmp_path / trial.trial_name / "result.json").read_text())
    assert result["stages"] == stages


@needs_bwrap
def test_stages_of_a_good_trial_and_a_malformed_task(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    make_task(tasks, "good")
    make_task(tasks, "no-tests", test_sh=None)
    out = tmp_path / "out"
    arun(run_job(JobConfig(tasks, out, agent="oracle", concurrency=1)), 120)
    by_task = {t["task"]: t["stages"] for t in json.loads((out / "job.json").read_text())["trials"]}
    good = by_task["good"]
    assert [good[s]["status"] for s in STAGES] == ["ok"] * 4
    assert all(good[s]["error"] is None and good[s]["duration_s"] >= 0 for s in STAGES)
    assert good["verifier"]["duration_s"] > 0
    bad = by_task["no-tests"]
    assert bad["build"]["status"] == "failed" and "invalid_task" in bad["build"]["error"]
    assert [bad[s]["status"] for s in STAGES[1:]] == ["skipped"] * 3


@needs_bwrap
def test_summary_table_shows_stage_times_and_the_failed_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CLI's console reads COLUMNS once, when its module is imported (under xdist, by
    # another test): give it a wide table here, whatever imported it first.
    monkeypatch.setattr(harbor_cli.console, "_width", 400)
    out = tmp_path / "out"
    res = CliRunner().invoke(
        skyrl_app,
        [
            "harbor",
            "run",
            "-p",
            str(REAL_FORMAT / "verifier-missing-command"),
            "-a",
            "oracle",
            "-o",
            str(out),
        ],
        env={"COLUMNS": "400"},
    )
    assert res.exit_code == 0, res.output
    assert "verifier s" in res.output and "failed stage" in res.output
    assert "verifier_command_not_found" in res.output
    assert "verifier: test.sh could not run `tbench-uvx-runner`" in " ".join(res.output.split())


@needs_bwrap
def test_agent_and_verifier_user_are_a_note(tmp_path: Path) -> None:
    toml = 'schema_version = "1.4"\n[agent]\nuser = "root"\n[verifier]\nuser = "root"\n'
    tasks = tmp_path / "tasks"
    make_task(tasks, "users", toml=toml)
    job = arun(run_job(JobConfig(tasks, tmp_path / "out", agent="oracle", concurrency=1)), 120)
    (trial,) = job.trials
    assert trial.reward == 1.0
    for what in ("agent", "verifier"):
        assert any(
            n.startswith(f"[{what}].user='root': not applied") for n in trial.environment_notes
        )
