"""The docker backend: the task's Dockerfile is built on a local engine (nothing is pulled)."""

from __future__ import annotations

import json

import pytest

from skyrl_sdk.benchmarks.harbor.job import JobConfig, TrialError, run_job
from tests.harbor.conftest import arun, make_task

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("docker")]


def test_docker_builds_the_dockerfile_and_grades(tmp_path, docker_engine):
    tasks = tmp_path / "tasks"
    make_task(
        tasks,
        "greet",
        shebang="#!/bin/sh",
        instruction="Append 'world' to /srv/app/greeting.txt.",
        dockerfile=(
            f"FROM {docker_engine}\nWORKDIR /srv/app\nCOPY greeting.txt .\n"
            "ENV TARGET=world\nRUN echo built > /srv/app/built.txt\n"
        ),
        files={"environment/greeting.txt": "hello\n"},
        test_sh=(
            'if [ "$(cat /srv/app/greeting.txt)" = "hello\n$TARGET" ] || '
            '[ "$(tr "\\n" " " < /srv/app/greeting.txt)" = "hello $TARGET " ] && '
            '[ -f /srv/app/built.txt ] && [ "$PWD" = /srv/app ]; then r=1; else r=0; fi; '
            'echo "{\\"reward\\": $r, \\"built\\": 1}" > /logs/verifier/reward.json'
        ),
        solve_sh='echo "$TARGET" >> greeting.txt; echo 1 > /logs/verifier/reward.txt',
    )
    make_task(
        tasks,
        "no-image",
        toml='schema_version = "1.4"\n[environment]\ndocker_image = "nowhere/none:1"\n',
        dockerfile=None,
    )
    for agent, want in (("oracle", 1.0), ("nop", 0.0)):
        out = tmp_path / agent
        arun(run_job(JobConfig(tasks, out, agent=agent, backend="docker", concurrency=2)), 240)
        trials = {t["task"]: t for t in json.loads((out / "job.json").read_text())["trials"]}
        assert trials["greet"]["rewards"] == {"reward": want, "built": 1.0}, trials["greet"]
        assert trials["greet"]["error"] is None
        assert trials["no-image"]["error"] == TrialError.ENVIRONMENT.value
        result = json.loads((out / trials["no-image"]["trial_name"] / "result.json").read_text())
        assert "cannot be pulled" in result["error_message"]
        if agent == "oracle":
            trial_dir = out / trials["greet"]["trial_name"]
            log = trial_dir / "agent" / "oracle.txt"
            assert log.is_file(), (trials["greet"], (trial_dir / "result.json").read_text()[-2000:])
