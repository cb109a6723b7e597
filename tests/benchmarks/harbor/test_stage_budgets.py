"""Stage budgets of a Harbor trial (issue 28, part 4): `build`, `agent` and `verifier` each
have their own limit from task.toml (times `--timeout-multiplier`) and their own stop reason,
and a slow build is never charged to the agent. Real bwrap trials on real-format task folders
under tests/skyrl_gym/envs/harbor/real_format/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyrl_gym.cli import app as skyrl_app
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.benchmarks.harbor import cli as harbor_cli
from skyrl_sdk.benchmarks.harbor.job import JobConfig, TrialError, run_job
from skyrl_sdk.benchmarks.harbor.records import Stage, StageStatus
from tests.skyrl_gym.envs.harbor.conftest import ANSWER, arun, bash_call, needs_bwrap

REAL_FORMAT = Path(__file__).parents[2] / "skyrl_gym" / "envs" / "harbor" / "real_format"
STAGES = ["build", "start", "agent", "verifier"]

pytestmark = needs_bwrap


@pytest.fixture(autouse=True)
def _own_root_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A built root is cached across runs: each test builds its slow Dockerfile for real.
    monkeypatch.setenv("SKYRL_CACHE", str(tmp_path / "cache"))


def _statuses(data: dict) -> list[str]:
    return [data["trials"][0]["stages"][s]["status"] for s in STAGES]


def test_a_build_past_build_timeout_sec_is_a_build_timeout_and_the_agent_never_runs(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    job = arun(run_job(JobConfig(REAL_FORMAT / "build-timeout", out, agent="oracle")), 120)
    (trial,) = job.trials
    assert trial.error is TrialError.BUILD_TIMEOUT and trial.reward is None
    assert "build_timeout_sec=2" in trial.error_message
    data = json.loads((out / "job.json").read_text())
    assert _statuses(data) == ["timeout", "skipped", "skipped", "skipped"]
    build = data["trials"][0]["stages"]["build"]
    assert build["error"].startswith("build_timeout: ") and 1.5 <= build["duration_s"] < 4
    assert data["errors_by_kind"] == {"build_timeout": 1}
    assert not (out / trial.trial_name / "agent" / "solve-ran.txt").exists()
    assert trial.failed_stage is Stage.BUILD and Stage.AGENT not in trial.stages


def test_the_timeout_multiplier_scales_the_build_timeout(tmp_path: Path) -> None:
    task = REAL_FORMAT / "build-timeout"
    config = JobConfig(task, tmp_path / "out", agent="oracle", timeout_multiplier=4.0)
    job = arun(run_job(config), 120)
    (trial,) = job.trials
    assert trial.error is None and trial.reward == 1.0
    assert trial.stages[Stage.BUILD].duration_s >= 4  # the RUN's sleep, now within 8 s
    assert trial.stages[Stage.START].duration_s < 4
    assert (tmp_path / "out" / trial.trial_name / "agent" / "solve-ran.txt").exists()


def test_a_slow_build_is_not_charged_to_the_llm_agent(tmp_path: Path) -> None:
    # [agent].timeout_sec = 3 and the build takes 4 s: the agent's clock starts after it.
    actions = [bash_call("cp /var/lib/build.stamp /app/answer.txt"), ANSWER]
    out = tmp_path / "out"
    job = arun(
        run_job(
            JobConfig(REAL_FORMAT / "slow-build", out, agent="llm", policy="x"),
            policy=ScriptedPolicy(actions),
        ),
        120,
    )
    (trial,) = job.trials
    assert trial.error is None and trial.agent_error is None and trial.reward == 1.0
    build, agent = trial.stages[Stage.BUILD], trial.stages[Stage.AGENT]
    assert build.duration_s >= 4 and build.status is StageStatus.OK
    assert agent.duration_s < 3 and agent.status is StageStatus.OK
    trajectory = json.loads((out / "trajectories.jsonl").read_text().splitlines()[0])
    assert trajectory["stop_reason"] == "done"
    assert job.stage_seconds[Stage.BUILD] >= 4 > job.stage_seconds[Stage.AGENT]


def test_an_agent_past_its_timeout_is_an_agent_timeout_and_still_verified(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    job = arun(run_job(JobConfig(REAL_FORMAT / "agent-timeout", out, agent="oracle")), 120)
    (trial,) = job.trials
    assert trial.error is TrialError.AGENT_TIMEOUT
    assert trial.reward == 1.0  # Harbor: the verifier judges the state the agent left
    data = json.loads((out / "job.json").read_text())
    assert _statuses(data) == ["ok", "ok", "timeout", "ok"]
    agent = data["trials"][0]["stages"]["agent"]
    assert agent["error"].startswith("agent_timeout: ") and 2 <= agent["duration_s"] < 15


def test_a_verifier_past_its_timeout_is_a_verifier_timeout(tmp_path: Path) -> None:
    out = tmp_path / "out"
    job = arun(run_job(JobConfig(REAL_FORMAT / "verifier-timeout", out, agent="oracle")), 120)
    (trial,) = job.trials
    assert trial.error is TrialError.VERIFIER_TIMEOUT and trial.reward is None
    data = json.loads((out / "job.json").read_text())
    assert _statuses(data) == ["ok", "ok", "ok", "timeout"]
    verifier = data["trials"][0]["stages"]["verifier"]
    assert verifier["error"].startswith("verifier_timeout: ") and verifier["duration_s"] < 15


def test_summary_shows_time_by_stage_and_the_stop_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(harbor_cli.console, "_width", 400)
    out = tmp_path / "out"
    path = str(REAL_FORMAT / "build-timeout")
    res = CliRunner().invoke(
        skyrl_app,
        ["harbor", "run", "-p", path, "-a", "oracle", "-o", str(out)],
        env={"COLUMNS": "400"},
    )
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "build_timeout" in text and "build: " in text
    assert "time by stage: build " in text and "agent 0.0s" in text
    data = json.loads((out / "job.json").read_text())
    assert set(data["stage_seconds"]) == set(STAGES) and data["stage_seconds"]["build"] >= 1.5
