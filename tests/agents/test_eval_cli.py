"""`skyrl eval` as a newcomer meets it, run as the installed `skyrl` script in a directory
outside the checkout: a custom env by `module:Class` or `--import`, `--resume` refusing another
policy, the exit code when the env broke every episode, `--max-turns` above the env's limit,
and `skyrl view` on a file that is not trajectories."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SKYRL = Path(sys.executable).with_name("skyrl")

ENV_MODULE = textwrap.dedent(
    '''
    import skyrl_gym
    from skyrl_gym import TextEnv

    TASKS = [{"task_id": f"t{i}", "answer": str(i)} for i in range(3)]


    class Echo(TextEnv):
        """Say the task's answer; reward 1 when right, the episode goes on when wrong."""

        tasks = TASKS

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.task = (options or {}).get("task") or TASKS[0]
            return [{"role": "user", "content": "Say " + self.task["answer"]}], {}

        def step(self, action):
            if action.strip() == self.task["answer"]:
                return [], 1.0, True, False, {}
            return [{"role": "user", "content": "no"}], 0.0, False, False, {}


    class NoDatabase(Echo):
        """Every reset fails, like an env whose database file is missing."""

        def reset(self, *, seed=None, options=None):
            raise FileNotFoundError("database /data/missing.db not found")


    skyrl_gym.register("echo-2", Echo, description="echo, two turns", max_turns=2)
    '''
)


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "echo_env.py").write_text(ENV_MODULE)
    right = {t: [str(i)] for i, t in enumerate(["t0", "t1", "t2"])}
    (tmp_path / "right.json").write_text(json.dumps({"actions": right}))
    (tmp_path / "wrong.json").write_text(json.dumps({"actions": ["x", "y", "z", "w"]}))
    return tmp_path


def skyrl(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SKYRL), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": "/tmp", "HF_HUB_OFFLINE": "1"},
    )


def results(out_dir: Path) -> dict:
    return json.loads((out_dir / "results.json").read_text())


def test_eval_module_class_from_the_modules_directory(user_dir: Path) -> None:
    out = skyrl(user_dir, "eval", "echo_env:Echo", "-p", "scripted:right.json", "-o", "run")
    assert out.returncode == 0, out.stdout + out.stderr
    data = results(user_dir / "run")
    assert data["env"] == "echo_env:Echo"
    assert data["summary"]["episodes"] == 3 and data["summary"]["success_rate"] == 1.0


def test_eval_imported_id_uses_its_turn_limit_and_scoring_zero_exits_0(user_dir: Path) -> None:
    out = skyrl(user_dir, "eval", "--import", "echo_env", "echo-2", "-p", "scripted:wrong.json")
    assert out.returncode == 0, out.stdout + out.stderr  # episodes ran; they merely scored 0
    data = results(user_dir / "runs" / "eval")
    assert data["summary"]["mean_reward"] == 0.0
    assert data["summary"]["stop_reasons"] == {"max_turns": 3}
    assert data["summary"]["mean_turns"] == 2.0  # the env's limit is the default
    assert "warning" not in out.stdout


def test_max_turns_above_the_envs_limit_warns_and_applies(user_dir: Path) -> None:
    out = skyrl(
        user_dir,
        "eval",
        *("--import", "echo_env", "echo-2", "-p", "scripted:wrong.json"),
        *("--max-turns", "4", "-o", "run"),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "--max-turns 4 is above the turn limit of env 'echo-2' (2)" in out.stdout
    assert results(user_dir / "run")["summary"]["mean_turns"] == 4.0  # not silently capped at 2


def test_every_episode_an_env_error_exits_1_with_a_summary(user_dir: Path) -> None:
    out = skyrl(user_dir, "eval", "echo_env:NoDatabase", "-p", "scripted:right.json", "-o", "r")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "all 3 episodes failed (3 env_error)" in out.stdout
    assert "database /data/missing.db not found" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr
    assert results(user_dir / "r")["summary"]["errored"] == 3  # results are still written


def test_resume_refuses_another_policy_naming_both(user_dir: Path) -> None:
    args = ("eval", "echo_env:Echo", "-o", "run", "-n", "2")
    first = skyrl(user_dir, *args, "-p", "scripted:right.json")
    assert first.returncode == 0, first.stdout + first.stderr
    before = (user_dir / "run" / "trajectories.jsonl").read_text()
    (user_dir / "other.json").write_text((user_dir / "right.json").read_text())
    refused = skyrl(user_dir, *args, "-p", "scripted:other.json", "-n", "3", "--resume")
    assert refused.returncode == 2
    assert "policy was 'scripted:right.json', now 'scripted:other.json'" in refused.stdout
    assert (user_dir / "run" / "trajectories.jsonl").read_text() == before  # nothing mixed
    # The same policy resumes and runs only the missing episode.
    same = skyrl(user_dir, *args, "-p", "scripted:right.json", "-n", "3", "--resume")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "2 episode(s) kept, 1 to run" in same.stdout


def test_view_on_a_non_jsonl_file_is_a_one_line_error(user_dir: Path) -> None:
    (user_dir / "notes.txt").write_text("these are my notes\n")
    out = skyrl(user_dir, "view", "notes.txt")
    assert out.returncode == 2
    assert "notes.txt: line 1 is not a trajectory" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr
    (user_dir / "rows.jsonl").write_text('{"task_id": "t0"}\n')  # JSON, but not a trajectory
    out = skyrl(user_dir, "view", "rows.jsonl")
    assert out.returncode == 2 and "line 1 is not a trajectory" in out.stdout
