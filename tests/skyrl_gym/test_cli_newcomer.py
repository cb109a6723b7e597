"""A newcomer's own env on the command line: `module:Class` and `--import MODULE` for
`skyrl env check` / `skyrl env play`, run as the installed `skyrl` script from a directory
outside the checkout, where only the user's module file lives."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skyrl_gym.checker import CHECKS

SKYRL = Path(sys.executable).with_name("skyrl")

GUESS_ENV = textwrap.dedent(
    '''
    from skyrl_gym import TextEnv


    class MyGuess(TextEnv):
        """Guess 7; the env answers higher or lower."""

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return [{"role": "user", "content": "Guess my number (1-9)."}], {}

        def step(self, action):
            guess = int(action) if action.strip().isdigit() and len(action) < 5 else 0
            if guess == 7:
                return [], 1.0, True, False, {}
            hint = "higher" if guess < 7 else "lower"
            return [{"role": "user", "content": hint}], 0.0, False, False, {}
    '''
)

REGISTERS = textwrap.dedent(
    """
    import skyrl_gym

    skyrl_gym.register("my-guess", "my_guess_env:MyGuess", description="mine", max_turns=4)
    """
)


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    """A directory outside the checkout holding the user's env module and a registering one."""
    (tmp_path / "my_guess_env.py").write_text(GUESS_ENV)
    (tmp_path / "my_envs.py").write_text(REGISTERS)
    return tmp_path


def skyrl(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SKYRL), *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )


def test_the_skyrl_script_exists() -> None:
    assert SKYRL.is_file(), f"the console script is installed next to {sys.executable}"


def test_env_check_module_class_from_the_modules_directory(user_dir: Path) -> None:
    out = skyrl(user_dir, "env", "check", "my_guess_env:MyGuess")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"all {len(CHECKS)} checks passed" in out.stdout


def test_env_check_registered_id_after_import(user_dir: Path) -> None:
    out = skyrl(user_dir, "env", "check", "--import", "my_envs", "my-guess")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"all {len(CHECKS)} checks passed" in out.stdout
    # Without --import the id is unknown: a one-line error, not a traceback.
    missing = skyrl(user_dir, "env", "check", "my-guess")
    assert missing.returncode == 2
    assert "no env registered as 'my-guess'" in missing.stdout
    assert "Traceback" not in missing.stdout + missing.stderr


def test_env_check_bad_import_is_a_clear_error(user_dir: Path) -> None:
    out = skyrl(user_dir, "env", "check", "--import", "not_a_module_here", "math")
    assert out.returncode == 2
    assert "cannot import module 'not_a_module_here'" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr


def test_env_play_module_class_and_imported_id(user_dir: Path) -> None:
    out = skyrl(user_dir, "env", "play", "my_guess_env:MyGuess", stdin="3\n7\n/quit\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "higher" in out.stdout and "episode over" in out.stdout
    # The registered id's turn limit (4) applies: the fourth wrong guess truncates.
    out = skyrl(user_dir, "env", "play", "--import", "my_envs", "my-guess", stdin="1\n1\n1\n1\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "truncated=True" in out.stdout


def test_repo_example_checks_from_the_repo_root() -> None:
    root = Path(__file__).resolve().parents[2]
    out = skyrl(root, "env", "check", "examples.guess_env:GuessEnv")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"all {len(CHECKS)} checks passed" in out.stdout
