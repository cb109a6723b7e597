"""Multi-step tasks as Harbor defines them (`[[steps]]` in task.toml,
`steps/<name>/{instruction.md,tests,solution}`): per-step instructions, tests and rewards in
one environment (issue 25, difference 8), with the oracle, nop and llm agents through
`skyrl harbor run` (the command agent: test_multi_step_command.py; `make("harbor")`:
test_multi_step_env.py; the setup hook: test_multi_step_setup.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from skyrl_gym.envs.harbor.task import TaskFormatError, load_task
from skyrl_sdk.benchmarks.harbor.job import JobConfig, run_job
from tests.skyrl_gym.envs.harbor.conftest import arun, needs_bwrap

MULTI = (
    Path(__file__).parents[2] / "skyrl_gym" / "envs" / "harbor" / "real_format" / "multi-step-notes"
)


def _copy(tmp_path: Path) -> Path:
    task = tmp_path / "tasks" / MULTI.name
    shutil.copytree(MULTI, task)
    return task


def test_steps_are_read_in_order_with_their_settings() -> None:
    task = load_task(MULTI)
    assert [s.name for s in task.steps] == ["01-create", "02-append"]
    first, second = task.steps
    assert task.instruction == first.instruction
    assert first.instruction.startswith("Create /app/notes.txt")
    assert first.min_reward == 1.0 and second.min_reward is None
    assert first.agent_timeout_s == 30.0 and first.verifier_timeout_s == 20.0
    assert second.verifier_timeout_s == 30.0  # the task's [verifier].timeout_sec
    assert task.reward_strategy.value == "mean"
    assert task.solution_dir is None  # the steps' solutions, not the task's


def test_roll_up_mean_counts_missing_keys_as_zero_and_final_takes_the_last() -> None:
    from skyrl_gym.envs.harbor.task import StepRewardStrategy, roll_up_rewards

    steps = [{"reward": 1.0, "a": 1.0}, {"reward": 0.0}]
    assert roll_up_rewards(steps, StepRewardStrategy.MEAN) == {"reward": 0.5, "a": 0.5}
    assert roll_up_rewards(steps, StepRewardStrategy.FINAL) == {"reward": 0.0}
    assert roll_up_rewards([], StepRewardStrategy.MEAN) is None


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda t: (t / "steps" / "02-append" / "instruction.md").unlink(), "instruction.md"),
        (
            lambda t: (t / "task.toml").write_text(
                (t / "task.toml").read_text().replace('"02-append"', '"../x"')
            ),
            r"steps\[1\]\.name: must be a folder name",
        ),
        (
            lambda t: (t / "task.toml").write_text(
                (t / "task.toml").read_text().replace('"mean"', '"best"')
            ),
            "multi_step_reward_strategy: must be one of mean, final",
        ),
        (
            lambda t: (
                (t / "steps" / "01-create" / "tests" / "test.sh").unlink()
                or (t / "tests" / "test.sh").unlink()
            ),
            "01-create/tests/test.sh: missing",
        ),
    ],
)
def test_malformed_steps_name_the_file_and_field(tmp_path: Path, edit, match: str) -> None:
    task = _copy(tmp_path)
    edit(task)
    with pytest.raises(TaskFormatError, match=match):
        load_task(task)


@needs_bwrap
def test_oracle_plays_every_step_in_one_environment(tmp_path: Path) -> None:
    job = arun(run_job(JobConfig(MULTI, tmp_path / "out", agent="oracle", concurrency=1)), 120)
    (trial,) = job.trials
    assert trial.reward == 1.0 and trial.error is None, trial
    # Step 2 appends to step 1's file: one environment; its test.sh is the task's (fallback),
    # its expected.txt the step's own (layered over tests/).
    assert [(s.name, s.reward) for s in trial.steps] == [("01-create", 1.0), ("02-append", 1.0)]
    data = json.loads((tmp_path / "out" / trial.trial_name / "result.json").read_text())
    assert [s["name"] for s in data["steps"]] == ["01-create", "02-append"]
    assert data["stages"]["verifier"]["status"] == "ok"
    job_json = json.loads((tmp_path / "out" / "job.json").read_text())
    assert job_json["trials"][0]["steps"][1]["reward"] == 1.0


@needs_bwrap
def test_nop_stops_at_the_first_steps_min_reward(tmp_path: Path) -> None:
    job = arun(run_job(JobConfig(MULTI, tmp_path / "out", agent="nop", concurrency=1)), 120)
    (trial,) = job.trials
    assert trial.reward == 0.0
    assert [(s.name, s.reward, s.stopped_trial) for s in trial.steps] == [("01-create", 0.0, True)]


@needs_bwrap
@pytest.mark.parametrize(("strategy", "want"), [("mean", 0.5), ("final", 0.0)])
def test_per_step_rewards_roll_up(tmp_path: Path, strategy: str, want: float) -> None:
    task = _copy(tmp_path)
    toml = (task / "task.toml").read_text().replace("min_reward = 1.0\n", "")
    (task / "task.toml").write_text(toml.replace('"mean"', f'"{strategy}"'))
    (task / "steps" / "02-append" / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    job = arun(run_job(JobConfig(task, tmp_path / "out", agent="oracle", concurrency=1)), 120)
    (trial,) = job.trials
    assert [s.reward for s in trial.steps] == [1.0, 0.0]
    assert trial.reward == want and trial.error is None


def _cli(*args: str) -> str:
    """`skyrl harbor run ARGS` in-process; its output (the summary table)."""
    from typer.testing import CliRunner

    from skyrl_gym.cli import app as skyrl_app

    res = CliRunner().invoke(skyrl_app, ["harbor", "run", *args], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    return res.output


@needs_bwrap
def test_llm_agent_is_told_each_step_after_the_previous_one_was_verified(tmp_path: Path) -> None:
    """`skyrl harbor run --agent llm`: one episode; the answer ends step 1, whose verifier
    passes its min_reward, and the next observation is step 2's instruction."""
    from skyrl_sdk.agents.trajectory import read_trajectories
    from tests.skyrl_gym.envs.harbor.conftest import ANSWER, bash_call

    script = [bash_call("echo first > notes.txt"), ANSWER]
    script += [bash_call("echo second >> notes.txt"), ANSWER]
    (tmp_path / "script.json").write_text(json.dumps(script))
    out = tmp_path / "out"
    _cli(
        *("-p", str(MULTI), "-a", "llm", "-o", str(out)),
        *("--policy", f"scripted:{tmp_path / 'script.json'}"),
    )
    (trial,) = json.loads((out / "job.json").read_text())["trials"]
    assert trial["reward"] == 1.0 and trial["error"] is None, trial
    assert [(s["name"], s["reward"]) for s in trial["steps"]] == [
        ("01-create", 1.0),
        ("02-append", 1.0),
    ]
    (traj,) = read_trajectories(out / "trajectories.jsonl")
    assert [t.reward for t in traj.turns] == [0.0, 0.0, 0.0, 1.0]
    told = traj.turns[1].observation
    assert told == ({"role": "user", "content": load_task(MULTI).steps[1].instruction},)
    assert traj.reward == 1.0 and traj.stop_reason.value == "done"


@needs_bwrap
def test_llm_agent_stops_at_min_reward_and_mean_rolls_up(tmp_path: Path) -> None:
    from skyrl_sdk.agents.scripted import ScriptedPolicy
    from tests.skyrl_gym.envs.harbor.conftest import ANSWER, bash_call

    config = JobConfig(MULTI, tmp_path / "out", agent="llm", policy="x", concurrency=1)
    job = arun(run_job(config, policy=ScriptedPolicy([ANSWER])), 60)
    (trial,) = job.trials
    assert trial.reward == 0.0 and trial.error is None
    assert [(s.name, s.reward, s.stopped_trial) for s in trial.steps] == [("01-create", 0.0, True)]
    # Without the min_reward the second step runs; it fails; the mean is 0.5.
    task = _copy(tmp_path)
    (task / "task.toml").write_text(
        (task / "task.toml").read_text().replace("min_reward = 1.0\n", "")
    )
    script = [bash_call("echo first > notes.txt"), ANSWER, ANSWER]
    config = JobConfig(task, tmp_path / "out2", agent="llm", policy="x", concurrency=1)
    job = arun(run_job(config, policy=ScriptedPolicy(script)), 60)
    (trial,) = job.trials
    assert [s.reward for s in trial.steps] == [1.0, 0.0] and trial.reward == 0.5, trial


@needs_bwrap
def test_llm_agent_out_of_turns_grades_the_step_it_was_in(tmp_path: Path) -> None:
    """The episode ends inside step 2 (max turns): that step is verified as it stands."""
    from skyrl_sdk.agents.scripted import ScriptedPolicy
    from tests.skyrl_gym.envs.harbor.conftest import ANSWER, bash_call

    script = [bash_call("echo first > notes.txt"), ANSWER, bash_call("echo second >> notes.txt")]
    config = JobConfig(MULTI, tmp_path / "out", agent="llm", policy="x", concurrency=1, max_turns=3)
    job = arun(run_job(config, policy=ScriptedPolicy(script)), 60)
    (trial,) = job.trials
    assert [s.reward for s in trial.steps] == [1.0, 1.0] and trial.reward == 1.0, trial


@needs_bwrap
@pytest.mark.parametrize(
    ("table", "agent", "want"),
    [
        ("{ reward = 1.0 }", "oracle", [("01-create", 1.0), ("02-append", 1.0)]),
        ("{ reward = 1.0 }", "nop", [("01-create", 0.0)]),
        # A key the step's rewards lack is below its threshold (as in Harbor).
        ("{ style = 0.5 }", "oracle", [("01-create", 1.0)]),
    ],
)
def test_min_reward_per_reward_key(tmp_path: Path, table: str, agent: str, want: list) -> None:
    task = _copy(tmp_path)
    toml = (task / "task.toml").read_text().replace("min_reward = 1.0", f"min_reward = {table}")
    (task / "task.toml").write_text(toml)
    assert isinstance(load_task(task).steps[0].min_reward, dict)
    job = arun(run_job(JobConfig(task, tmp_path / "out", agent=agent, concurrency=1)), 120)
    (trial,) = job.trials
    assert [(s.name, s.reward) for s in trial.steps] == want
    assert trial.steps[-1].stopped_trial is (len(want) == 1)


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ('{ reward = "high" }', r"steps\[0\]\.min_reward\]\.reward: must be a number"),
        ("{}", r"steps\[0\]\]\.min_reward: must name at least one reward key"),
    ],
)
def test_malformed_per_key_min_reward(tmp_path: Path, table: str, match: str) -> None:
    task = _copy(tmp_path)
    toml = (task / "task.toml").read_text().replace("min_reward = 1.0", f"min_reward = {table}")
    (task / "task.toml").write_text(toml)
    with pytest.raises(TaskFormatError, match=match):
        load_task(task)
