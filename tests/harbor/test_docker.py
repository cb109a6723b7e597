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
        assert "nowhere/none:1" in result["error_message"], result["error_message"]
        assert "--pull" in result["error_message"], result["error_message"]
        if agent == "oracle":
            trial_dir = out / trials["greet"]["trial_name"]
            log = trial_dir / "agent" / "oracle.txt"
            assert log.is_file(), (trials["greet"], (trial_dir / "result.json").read_text()[-2000:])


def test_docker_grading_removes_stale_rewards_and_voids_disagreeing_files(tmp_path, docker_engine):
    """The docker backend applies the reward-file rules it can (issue 23, item 2): no reward
    file is in /logs/verifier when test.sh starts (neither the agent's nor one baked into the
    image: the container's /tmp is its own, and the runtime removes them too), and a
    reward.json that disagrees with test.sh's reward.txt is void. It has one uid for test.sh
    and the programs it runs, so the owner rule cannot apply: every trial says `single_uid`."""
    tasks = tmp_path / "tasks"
    image = f"FROM {docker_engine}\nWORKDIR /srv/app\n"
    stale = (
        "RUN mkdir -p /tmp/harbor/logs/verifier && "
        "echo 1 > /tmp/harbor/logs/verifier/reward.txt && "
        "echo '{\"reward\": 1}' > /tmp/harbor/logs/verifier/reward.json\n"
    )
    make_task(
        tasks,
        "stale",
        shebang="#!/bin/sh",
        dockerfile=image + stale,
        solve_sh="echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 1}' > /logs/verifier/reward.json",
        test_sh="ls /logs/verifier",
    )
    make_task(
        tasks,
        "forged-json",
        shebang="#!/bin/sh",
        dockerfile=image,
        solve_sh=(
            "printf '%s\\n' 'echo {\\\"reward\\\": 1.0} > /logs/verifier/reward.json' > tool.sh"
        ),
        test_sh="sh /srv/app/tool.sh\necho 0 > /logs/verifier/reward.txt",
    )
    out = tmp_path / "out"
    arun(run_job(JobConfig(tasks, out, agent="oracle", backend="docker", concurrency=2)), 240)
    results = {}
    for trial in json.loads((out / "job.json").read_text())["trials"]:
        results[trial["task"]] = json.loads((out / trial["trial_name"] / "result.json").read_text())
    assert results["stale"]["error"] == TrialError.REWARD_FILE_NOT_FOUND.value, results["stale"][
        "error_message"
    ]
    forged = results["forged-json"]
    assert forged["error"] == TrialError.REWARD_FILES_DISAGREE.value, forged
    for result in results.values():
        assert result["verifier_isolation"] == "single_uid", result
        assert any(note.startswith("single_uid: ") for note in result["environment_notes"])
