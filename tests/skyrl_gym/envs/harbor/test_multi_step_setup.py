"""A multi-step task's per-step setup hook, as Harbor runs it: steps/<name>/workdir/ is copied
into the working directory and workdir/setup.sh runs there (bash, the agent's user) before
the step's agent phase; a failing setup.sh stops the trial with `step_setup_failed` naming
the step (stage `start`), no reward. Fixture: real_format/multi-step-setup (each step's setup
reveals only its own batch of numbers)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import skyrl_gym
from skyrl_gym.cli import app as skyrl_app
from skyrl_gym.envs.harbor.env import task_rows
from skyrl_gym.envs.harbor.task import StepSetupError
from skyrl_sdk.benchmarks.harbor.job import JobConfig, TrialError, run_job
from tests.skyrl_gym.envs.harbor.conftest import ANSWER, arun, bash_call, needs_bwrap

pytestmark = needs_bwrap

SETUP = Path(__file__).parent / "real_format" / "multi-step-setup"
SUM = "awk '{ s += $1 } END { print s }' input.txt > sum.txt"


def _copy(tmp_path: Path, failing: str | None = None) -> Path:
    """The fixture; `failing`: that step's setup.sh prints a line and exits 3."""
    task = tmp_path / "tasks" / SETUP.name
    shutil.copytree(SETUP, task)
    if failing is not None:
        script = task / "steps" / failing / "workdir" / "setup.sh"
        script.write_text("#!/bin/bash\necho cannot fetch the batch >&2\nexit 3\n")
    return task


def _harbor_run(path: Path, agent: str, out: Path) -> dict:
    res = CliRunner().invoke(
        skyrl_app,
        ["harbor", "run", "-p", str(path), "-a", agent, "-o", str(out)],
        env={"COLUMNS": "400"},
    )
    assert res.exit_code == 0, res.output
    (trial,) = json.loads((out / "job.json").read_text())["trials"]
    return trial


def test_oracle_scores_1_and_nop_0_on_the_setup_fixture(tmp_path: Path) -> None:
    trial = _harbor_run(SETUP, "oracle", tmp_path / "oracle")
    assert trial["reward"] == 1.0 and trial["error"] is None, trial
    assert [s["reward"] for s in trial["steps"]] == [1.0, 1.0]
    trial = _harbor_run(SETUP, "nop", tmp_path / "nop")
    assert trial["reward"] == 0.0 and [s["reward"] for s in trial["steps"]] == [0.0]


def test_setup_runs_in_the_working_directory_before_the_agent_as_its_user() -> None:
    env = skyrl_gym.make("harbor", tasks=task_rows(SETUP))
    try:
        env.reset()
        probe = "cat .setup-ran; echo $(cat input.txt); ls batch >/dev/null 2>&1; echo $?; id -u"
        obs, *_ = env.step(bash_call(probe))
        ran, numbers, batch_listed, agent_uid = obs[0]["content"].splitlines()
        assert ran == "app" and numbers.split() == ["1", "2", "3"]
        assert batch_listed != "0"  # setup.sh removed the batch folder it was given
        env.step(bash_call(SUM))
        obs, reward, done, _, _ = env.step(ANSWER)
        assert not done, obs
        # Step 2's setup replaced the input with its own batch only.
        obs, *_ = env.step(bash_call("echo $(cat input.txt); stat -c %u input.txt"))
        numbers, owner = obs[0]["content"].splitlines()
        assert numbers.split() == ["10", "20"] and owner == agent_uid
        env.step(bash_call(SUM))
        _, reward, done, _, info = env.step(ANSWER)
        assert done and reward == 1.0, info
    finally:
        env.close()


@pytest.mark.parametrize("failing", ["01-first-batch", "02-second-batch"])
def test_a_failing_setup_is_a_start_stage_error_naming_the_step(
    tmp_path: Path, failing: str
) -> None:
    trial = _harbor_run(_copy(tmp_path, failing), "oracle", tmp_path / "out")
    assert trial["reward"] is None and trial["error"] == TrialError.STEP_SETUP.value, trial
    start = trial["stages"]["start"]
    assert start["status"] == "failed"
    assert start["error"].startswith(f"step_setup_failed: step {failing}: workdir/setup.sh ")
    assert "exited with 3: cannot fetch the batch" in start["error"]
    want = [("01-first-batch", 1.0, None)] if failing.startswith("02") else []
    want.append((failing, None, "step_setup_failed"))
    assert [(s["name"], s["reward"], s["error"]) for s in trial["steps"]] == want


def test_llm_agent_a_failing_later_setup_ends_the_trial_with_no_reward(tmp_path: Path) -> None:
    from skyrl_sdk.agents.scripted import ScriptedPolicy

    task = _copy(tmp_path, "02-second-batch")
    config = JobConfig(task, tmp_path / "out", agent="llm", policy="x", concurrency=1)
    job = arun(run_job(config, policy=ScriptedPolicy([bash_call(SUM), ANSWER])), 60)
    (trial,) = job.trials
    assert trial.reward is None and trial.error is TrialError.STEP_SETUP, trial
    assert "step 02-second-batch: workdir/setup.sh exited with 3" in trial.error_message
    assert [(s.name, s.reward) for s in trial.steps] == [
        ("01-first-batch", 1.0),
        ("02-second-batch", None),
    ]


def test_make_harbor_a_failing_setup_ends_the_episode_or_fails_reset(tmp_path: Path) -> None:
    env = skyrl_gym.make("harbor", tasks=task_rows(_copy(tmp_path / "a", "02-second-batch")))
    try:
        env.reset()
        env.step(bash_call(SUM))
        obs, reward, done, _, info = env.step(ANSWER)
        assert done and reward == 0.0 and obs == []
        assert info["episode"]["step_setup_error"].startswith("step 02-second-batch: ")
        assert [s["reward"] for s in info["episode"]["steps"]] == [1.0]
    finally:
        env.close()
    env = skyrl_gym.make("harbor", tasks=task_rows(_copy(tmp_path / "b", "01-first-batch")))
    try:
        with pytest.raises(StepSetupError, match=r"step 01-first-batch: workdir/setup\.sh"):
            env.reset()
    finally:
        env.close()


def test_a_link_the_agent_left_does_not_carry_the_next_steps_files_out(tmp_path: Path) -> None:
    """Step 2's workdir/ has batch/numbers.txt; step 1's agent leaves /app/batch as a link to
    a host directory: the copy is made inside the sandbox, so nothing lands on the host; the
    copy refuses the link in its way, which ends the episode as a failed setup (reward 0)."""
    target = tmp_path / "host-dir"
    target.mkdir(mode=0o777)
    env = skyrl_gym.make("harbor", tasks=task_rows(SETUP))
    try:
        env.reset()
        env.step(bash_call(f"{SUM} && ln -s {target} batch"))
        _, reward, done, _, info = env.step(ANSWER)
        assert done and reward == 0.0
        assert "workdir/ could not be copied into /app" in info["episode"]["step_setup_error"]
        assert list(target.iterdir()) == []
    finally:
        env.close()
    assert list(target.iterdir()) == []
