"""Harbor's per-step verifier settings and verifier modes, on real-format fixtures:

- `real_format/multi-step-checks`: `[steps.verifier.env]` is merged over `[verifier].env`
  for that step's test.sh (its keys win), with the same `${VAR}` rules (a host variable only
  with `--pass-env`); before, the step's table was ignored and the oracle scored 0.5;
- `real_format/separate-verifier`: `[verifier] environment_mode = "separate"` (Harbor: a
  verifier environment of its own, built from tests/) is not built here; the trial says so
  in a note and runs test.sh as in shared mode (before: silently).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from skyrl_gym.envs.harbor.task import TaskFormatError, VerifierMode, load_task
from tests.skyrl_gym.envs.harbor.test_healthcheck import FIXTURES, STEPS, harbor_run

SEPARATE = FIXTURES / "separate-verifier"


def test_step_verifier_env_is_merged_over_the_tasks() -> None:
    task = load_task(STEPS)
    first, second = task.steps
    assert task.for_step(first, task.tests_dir).verifier.env == {
        "GREETER": "/app/greet.sh",
        "EXPECTED_GREETING": "hello",
    }
    assert task.for_step(second, task.tests_dir).verifier.env == {
        "GREETER": "/app/greet.sh",
        "EXPECTED_GREETING": "Hello, Harbor!",  # ${GREETED_NAME:-Harbor}: not passed
        "NAME_FILE": "/app/name.txt",
    }


def test_step_verifier_env_takes_host_variables_only_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREETED_NAME", "World")
    monkeypatch.setenv("STEP_TOKEN", "s3cret")
    task_dir = tmp_path / STEPS.name
    shutil.copytree(STEPS, task_dir)
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text() + 'TOKEN = "${STEP_TOKEN}"\n')
    task = load_task(task_dir)
    env = task.for_step(task.steps[1], task.tests_dir).verifier.env
    assert env["EXPECTED_GREETING"] == "Hello, Harbor!" and env["TOKEN"] == ""
    (note,) = [n for n in task.notes if "STEP_TOKEN" in n]
    assert note.startswith("[steps[1].verifier].env.TOKEN: ${STEP_TOKEN} is not passed")
    assert "s3cret" not in " ".join(task.notes)
    passed = load_task(task_dir, pass_env=["GREETED_NAME", "STEP_TOKEN"])
    env = passed.for_step(passed.steps[1], passed.tests_dir).verifier.env
    assert env["EXPECTED_GREETING"] == "Hello, World!" and env["TOKEN"] == "s3cret"


def test_step_verifier_env_reaches_the_steps_test_sh(tmp_path: Path) -> None:
    trial = harbor_run(STEPS, tmp_path / "out")
    assert [(s["name"], s["reward"]) for s in trial["steps"]] == [
        ("01-greet", 1.0),
        ("02-personalise", 1.0),  # NAME_FILE and EXPECTED_GREETING from [steps.verifier.env]
    ]


def test_separate_verifier_runs_shared_with_a_note(tmp_path: Path) -> None:
    assert load_task(SEPARATE).verifier.mode is VerifierMode.SEPARATE
    out = tmp_path / "oracle"
    trial = harbor_run(SEPARATE, out)
    assert (trial["reward"], trial["error"]) == (1.0, None), trial
    result = json.loads((out / trial["trial_name"] / "result.json").read_text())
    (note,) = [n for n in result["environment_notes"] if "environment_mode=separate" in n]
    assert note.startswith("environment_mode=separate ([verifier]): not applied")
    trial = harbor_run(SEPARATE, tmp_path / "nop", agent="nop")
    assert (trial["reward"], trial["error"]) == (0.0, None), trial


def _toml(tmp_path: Path, src: Path, extra: str) -> Path:
    task_dir = tmp_path / src.name
    shutil.copytree(src, task_dir)
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text() + extra)
    return task_dir


def test_a_verifier_environment_table_implies_separate_per_step(tmp_path: Path) -> None:
    extra = '\n[steps.verifier.environment]\ndocker_image = "grader:latest"\n'
    task = load_task(_toml(tmp_path, STEPS, extra))  # the table belongs to the last step
    assert [s.verifier_mode for s in task.steps] == [None, VerifierMode.SEPARATE]
    assert task.for_step(task.steps[1], task.tests_dir).verifier.mode is VerifierMode.SEPARATE
    (note,) = [n for n in task.notes if "environment_mode=separate" in n]
    assert note.startswith("environment_mode=separate (steps 02-personalise): not applied")


def test_shared_mode_with_a_verifier_environment_is_an_invalid_task(tmp_path: Path) -> None:
    text = (SEPARATE / "task.toml").read_text().replace('"separate"', '"shared"')
    task_dir = _toml(tmp_path, SEPARATE, "\n[verifier.environment]\ncpus = 1\n")
    (task_dir / "task.toml").write_text(text + "\n[verifier.environment]\ncpus = 1\n")
    with pytest.raises(TaskFormatError, match=r"\[verifier\]\.environment_mode"):
        load_task(task_dir)
    (task_dir / "task.toml").write_text(text.replace('"shared"', '"elsewhere"'))
    with pytest.raises(TaskFormatError, match="must be one of shared, separate"):
        load_task(task_dir)


def test_harbor_settings_not_applied_here_each_get_a_note(tmp_path: Path) -> None:
    extra = (
        '\n[environment.healthcheck]\ncommand = "true"\n'  # read: no note
        '\n[agent]\nnetwork_mode = "public"\n'
        '\n[[verifier.collect]]\nservice = "db"\ncommand = "pg_dump > /tmp/d.sql"\n'
    )
    text = (SEPARATE / "task.toml").read_text().replace("[agent]\ntimeout_sec = 60.0\n", "")
    task_dir = _toml(tmp_path, SEPARATE, "")
    (task_dir / "task.toml").write_text(
        text.replace(
            "[environment]\n", '[environment]\nmcp_servers = [{ name = "x", url = "http://x" }]\n'
        )
        + extra
    )
    notes = load_task(task_dir).notes
    assert "artifacts: not applied; not collected; only /logs/artifacts is copied" in notes[1]
    joined = "\n".join(notes)
    for where in ("[environment].mcp_servers", "[agent].network_mode", "[verifier].collect"):
        assert f"{where}: not applied" in joined, joined
    assert "healthcheck" not in joined
    plain = load_task(STEPS).notes  # sets none of them
    assert not [n for n in plain if "not applied" in n], plain
