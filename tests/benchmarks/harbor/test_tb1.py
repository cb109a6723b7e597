"""Terminal-Bench 1 folders (task.yaml, run-tests.sh, solution.sh, Dockerfile,
docker-compose.yaml) read directly and through `skyrl harbor migrate` (issue 25,
difference 8)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyrl_gym.cli import app as skyrl_app
from skyrl_gym.envs.harbor.task import TaskFormatError, find_task_dirs, load_task
from skyrl_sdk.benchmarks.harbor.job import JobConfig, TrialError, run_job
from tests.skyrl_gym.envs.harbor.conftest import arun, needs_bwrap

TB1 = Path(__file__).parents[2] / "skyrl_gym" / "envs" / "harbor" / "real_format" / "tb1-word-count"


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKYRL_CACHE", str(tmp_path / "cache"))


def test_a_tb1_folder_loads_with_its_settings() -> None:
    task = load_task(TB1)
    assert task.name == "tb1-word-count"
    assert task.instruction.startswith("The file /app/words.txt holds one word per line.")
    assert task.agent.timeout_s == 120.0 and task.verifier.timeout_s == 30.0
    assert task.verifier.env["TEST_DIR"] == "/tests"
    assert task.metadata["difficulty"] == "easy" and task.metadata["tags"] == [
        "coreutils",
        "fixture",
    ]
    assert (task.tests_dir / "test.sh").is_file() and (task.tests_dir / "run-tests.sh").is_file()
    assert task.solution_dir is not None and task.dockerfile is not None
    assert any("Terminal-Bench 1" in n for n in task.notes)
    assert any("docker-compose.yaml (services: client) is not used" in n for n in task.notes)
    assert find_task_dirs(TB1) == [TB1.resolve()]


@needs_bwrap
@pytest.mark.parametrize(("agent", "want"), [("oracle", 1.0), ("nop", 0.0)])
def test_a_tb1_folder_runs_directly(tmp_path: Path, agent: str, want: float) -> None:
    job = arun(run_job(JobConfig(TB1, tmp_path / "out", agent=agent, concurrency=1)), 120)
    (trial,) = job.trials
    assert trial.task == "tb1-word-count"
    assert trial.reward == want and trial.error is None, trial


@needs_bwrap
def test_skyrl_harbor_migrate_writes_a_harbor_folder_that_scores(tmp_path: Path) -> None:
    dataset = tmp_path / "tb1"
    shutil.copytree(TB1, dataset / TB1.name)
    dest = tmp_path / "harbor"
    res = CliRunner().invoke(skyrl_app, ["harbor", "migrate", str(dataset), str(dest)])
    assert res.exit_code == 0, res.output
    out = dest / TB1.name
    assert {p.name for p in out.iterdir()} == {
        "task.toml",
        "instruction.md",
        "environment",
        "tests",
        "solution",
    }
    assert (out / "environment" / "words.txt").is_file()
    assert (out / "environment" / "docker-compose.yaml").is_file()
    task = load_task(out)
    assert task.agent.timeout_s == 120.0 and not any("Terminal-Bench 1" in n for n in task.notes)
    job = arun(run_job(JobConfig(dest, tmp_path / "out", agent="oracle", concurrency=1)), 120)
    assert [t.reward for t in job.trials] == [1.0]
    again = CliRunner().invoke(skyrl_app, ["harbor", "migrate", str(dataset), str(dest)])
    assert again.exit_code == 1 and "already exists" in again.output


def test_bad_tb1_folders_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(TB1, bad)
    (bad / "task.yaml").write_text("instruction: [unclosed\n")
    with pytest.raises(TaskFormatError, match=r"bad/task.yaml: invalid YAML"):
        load_task(bad)
    (bad / "task.yaml").write_text("max_agent_timeout_sec: 10\n")
    with pytest.raises(TaskFormatError, match=r"task.yaml: instruction: missing or empty"):
        load_task(bad)
    (bad / "task.yaml").write_text("instruction: hi\n")
    (bad / "run-tests.sh").unlink()
    with pytest.raises(TaskFormatError, match=r"run-tests.sh: missing"):
        load_task(bad)


def test_a_tb1_folder_with_a_link_out_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "linked"
    shutil.copytree(TB1, bad)
    (bad / "tests" / "secret.txt").symlink_to("/etc/passwd")
    with pytest.raises(TaskFormatError, match="link out of the task folder"):
        load_task(bad)


@needs_bwrap
def test_an_invalid_tb1_folder_is_an_invalid_task_in_the_build_stage(tmp_path: Path) -> None:
    bad = tmp_path / "tasks" / "bad"
    shutil.copytree(TB1, bad)
    (bad / "task.yaml").write_text("instruction: [unclosed\n")
    arun(run_job(JobConfig(bad.parent, tmp_path / "out", agent="oracle", concurrency=1)), 60)
    (trial,) = json.loads((tmp_path / "out" / "job.json").read_text())["trials"]
    assert trial["error"] == TrialError.INVALID_TASK.value
    assert trial["stages"]["build"]["status"] == "failed"
