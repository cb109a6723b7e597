"""`skyrl train` as a newcomer meets it, run as the installed `skyrl` script in a directory
outside the checkout: `--print-config`, one-line errors for a bad env id or config file, a
custom env by `module:Class` or `--import`, and `--resume` refusing a changed config."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from skyrl_sdk.trainer.checkpoint import config_changes
from skyrl_sdk.trainer.config import TrainConfig, build_config

SKYRL = Path(sys.executable).with_name("skyrl")

ENV_MODULE = textwrap.dedent(
    '''
    import skyrl_gym
    from skyrl_gym import TextEnv

    TASKS = [{"task_id": f"t{i}", "answer": str(i)} for i in range(4)]


    class Echo(TextEnv):
        """Say the task's answer."""

        tasks = TASKS

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.task = (options or {}).get("task") or TASKS[0]
            return [{"role": "user", "content": "Say " + self.task["answer"]}], {}

        def step(self, action):
            reward = float(action.strip() == self.task["answer"])
            return [], reward, True, False, {}


    skyrl_gym.register("echo", Echo, description="echo", max_turns=1)
    '''
)

TINY_RUN = (
    "trainer.steps=1",
    "trainer.groups_per_step=1",
    "rollout.group_size=2",
    "logging.console=false",
    "logging.trajectories=false",
)
"""Overrides for a one-step run (a few seconds on a CPU)."""


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "echo_env.py").write_text(ENV_MODULE)
    return tmp_path


def skyrl(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SKYRL), "train", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": "/tmp", "HF_HUB_OFFLINE": "1"},
    )


def assert_clean_error(out: subprocess.CompletedProcess, message: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stdout, out.stdout
    assert "Traceback" not in out.stdout + out.stderr


def test_print_config_is_the_full_default_config(tmp_path: Path) -> None:
    out = skyrl(tmp_path, "--print-config")
    assert out.returncode == 0, out.stdout + out.stderr
    assert yaml.safe_load(out.stdout) == TrainConfig().model_dump(mode="json")


def test_print_config_merges_the_file_and_overrides(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("seed: 7\ntrainer:\n  steps: 5\n")
    out = skyrl(tmp_path, "mine.yaml", "trainer.steps=9", "rollout.group_size=3", "--print-config")
    assert out.returncode == 0, out.stdout + out.stderr
    printed = yaml.safe_load(out.stdout)
    expected = build_config(
        {"seed": 7, "trainer": {"steps": 5}}, ["trainer.steps=9", "rollout.group_size=3"]
    )
    assert printed == expected.model_dump(mode="json")
    assert printed["seed"] == 7 and printed["trainer"]["steps"] == 9
    # With no file, the overrides alone.
    only = skyrl(tmp_path, "--print-config", "seed=3")
    assert only.returncode == 0 and yaml.safe_load(only.stdout)["seed"] == 3


def test_no_config_argument_says_what_to_pass(tmp_path: Path) -> None:
    assert_clean_error(skyrl(tmp_path), "missing CONFIG")


def test_unknown_env_id_is_one_line_with_a_suggestion(tmp_path: Path) -> None:
    out = skyrl(tmp_path, "-", "env.id=lokup")
    assert_clean_error(out, "env.id: no env registered as 'lokup'. Did you mean 'lookup'")
    assert len(out.stdout.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "config file not found"),
        ("trainer: [1,\n", "not valid YAML"),
        ("- 1\n- 2\n", "the top level must be a mapping"),
        ("trainer:\n  stepz: 3\n", "trainer.stepz: unknown field"),
        (b"\xff\xfe\x00binary", "cannot read config file"),
    ],
)
def test_bad_config_files_are_clean_errors(tmp_path: Path, content, message: str) -> None:
    path = tmp_path / "train.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    assert_clean_error(skyrl(tmp_path, "train.yaml"), message)


def test_a_directory_as_config_is_a_clean_error(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    assert_clean_error(skyrl(tmp_path, "conf"), "conf")


def test_trains_a_module_class_env_and_an_imported_id(user_dir: Path) -> None:
    out = skyrl(user_dir, "-", "env.id=echo_env:Echo", "out_dir=a", *TINY_RUN)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "trained 1 steps" in out.stdout
    out = skyrl(user_dir, "--import", "echo_env", "-", "env.id=echo", "out_dir=b", *TINY_RUN)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "trained 1 steps" in out.stdout
    # The config's env.max_turns (3) is above the registered limit (1): said, not hidden.
    assert "env.max_turns=3 is above the turn limit of env 'echo' (1)" in out.stdout
    assert "warning" not in skyrl(user_dir, "-", "env.id=echo_env:Echo", "--print-config").stdout
    missing = skyrl(user_dir, "-", "env.id=echo", "out_dir=c", *TINY_RUN)
    assert_clean_error(missing, "no env registered as 'echo'")


def test_resume_refuses_a_changed_config_naming_the_keys(user_dir: Path) -> None:
    run = ("-", "env.id=echo_env:Echo", "out_dir=run", *TINY_RUN)
    first = skyrl(user_dir, *run)
    assert first.returncode == 0, first.stdout + first.stderr
    saved = (user_dir / "run" / "config.yaml").read_text()
    refused = skyrl(user_dir, *run, "rollout.group_size=4", "seed=1", "--resume")
    assert_clean_error(refused, "different config")
    assert "rollout.group_size: was 2, now 4" in refused.stdout
    assert "seed: was 0, now 1" in refused.stdout
    assert (user_dir / "run" / "config.yaml").read_text() == saved  # the run is untouched
    # Training longer is what resuming is for: allowed.
    longer = skyrl(user_dir, *run, "trainer.steps=2", "--resume")
    assert longer.returncode == 0, longer.stdout + longer.stderr
    assert "trained 2 steps" in longer.stdout


def test_config_changes_ignores_only_the_resumable_keys() -> None:
    base = build_config().model_dump(mode="json")
    same_run = build_config(
        None, ["trainer.steps=99", "logging.wandb=true", "out_dir=/elsewhere"]
    ).model_dump(mode="json")
    assert config_changes(base, same_run) == []
    other = build_config(None, ["optim.lr=0.5", "env.max_turns=5"]).model_dump(mode="json")
    changes = config_changes(base, other)
    assert [c.split(":")[0] for c in changes] == ["env.max_turns", "optim.lr"]
