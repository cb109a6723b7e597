"""The docker backend on a multi-step task: each step's workdir/ and setup.sh (sh where the
image has no bash), solve.sh and verifier in the step's own container on the same working
directory."""

from __future__ import annotations

import json

import pytest

from skyrl_sdk.benchmarks.harbor.job import JobConfig, TrialError, run_job
from tests.skyrl_gym.envs.harbor.conftest import arun

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("docker")]

TOML = """\
schema_version = "1.1"
[environment]
workdir = "/srv/app"
network_mode = "no-network"
[[steps]]
name = "one"
min_reward = 1.0
[[steps]]
name = "two"
"""


def _write(root, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_docker_multi_step_runs_each_steps_setup_and_grades_each_step(tmp_path, docker_engine):
    task = tmp_path / "tasks" / "batches"
    files = {
        "task.toml": TOML,
        "environment/Dockerfile": f"FROM {docker_engine}\nWORKDIR /srv/app\n",
        "tests/test.sh": (
            "#!/bin/sh\n"
            'if [ "$(cat /srv/app/sum.txt)" = "$(cat /tests/expected.txt)" ]; '
            "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
        ),
    }
    for name, numbers, total in (("one", "1\n2\n", "3"), ("two", "5\n5\n", "10")):
        files |= {
            f"steps/{name}/instruction.md": "Sum /srv/app/input.txt into /srv/app/sum.txt.\n",
            f"steps/{name}/workdir/batch.txt": numbers,
            f"steps/{name}/workdir/setup.sh": "mv batch.txt input.txt\n",
            f"steps/{name}/solution/solve.sh": (
                "#!/bin/sh\nawk '{ s += $1 } END { print s }' input.txt > sum.txt\n"
            ),
            f"steps/{name}/tests/expected.txt": f"{total}\n",
        }
    _write(task, files)
    out = tmp_path / "out"
    arun(run_job(JobConfig(task, out, agent="oracle", backend="docker", concurrency=1)), 300)
    (trial,) = json.loads((out / "job.json").read_text())["trials"]
    assert trial["reward"] == 1.0 and trial["error"] is None, trial
    assert [(s["name"], s["reward"]) for s in trial["steps"]] == [("one", 1.0), ("two", 1.0)]
    # A failing setup.sh in step two: step_setup_failed naming it.
    (task / "steps" / "two" / "workdir" / "setup.sh").write_text("exit 4\n")
    out = tmp_path / "out2"
    arun(run_job(JobConfig(task, out, agent="oracle", backend="docker", concurrency=1)), 300)
    (trial,) = json.loads((out / "job.json").read_text())["trials"]
    assert trial["error"] == TrialError.STEP_SETUP.value and trial["reward"] is None, trial
    assert "step two: workdir/setup.sh exited with 4" in trial["stages"]["start"]["error"]
