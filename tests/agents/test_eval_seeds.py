"""`skyrl eval` on an env without a task list: the README's `GuessEnv` (examples/guess_env.py,
its state drawn from the seed) is played by seeds, run as a user runs it: the installed `skyrl`
script in a directory of their own, with the checkout on PYTHONPATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from examples.guess_env import GuessEnv

SKYRL = Path(sys.executable).with_name("skyrl")
REPO = Path(__file__).resolve().parents[2]
ENV = "examples.guess_env:GuessEnv"


def skyrl(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [str(SKYRL), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": path},
    )


def secret(seed: int) -> int:
    """The number GuessEnv hides under `seed`, read the way any user can: `reset(seed=s)`."""
    env = GuessEnv()
    env.reset(seed=seed)
    return env.secret


def wrong(seed: int) -> str:
    return str(secret(seed) % 100 + 1)  # in 1..100, never the secret


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    # Right guesses for even seeds, eight wrong ones (the whole turn limit) for odd seeds,
    # keyed by the seed episodes' task ids.
    script = {f"seed-{s}": [str(secret(s))] if s % 2 == 0 else [wrong(s)] * 8 for s in range(8)}
    (tmp_path / "guesses.json").write_text(json.dumps(script))
    return tmp_path


def episodes(out_dir: Path) -> list[dict]:
    return json.loads((out_dir / "results.json").read_text())["episodes"]


def test_guess_env_is_played_by_seeds(user_dir: Path) -> None:
    args = ("eval", ENV, "--policy", "scripted:guesses.json", "--num", "4")
    runs = []
    for out in ("first", "second"):
        done = skyrl(user_dir, *args, "--out", out)
        assert done.returncode == 0, done.stdout + done.stderr
        runs.append(episodes(user_dir / out))
    for rows in runs:  # two runs, one answer: the seed alone decides each episode
        assert [r["reward"] for r in rows] == [1.0, 0.0, 1.0, 0.0]
        assert [r["seed"] for r in rows] == [0, 1, 2, 3]
        assert [r["task_id"] for r in rows] == ["seed-0", "seed-1", "seed-2", "seed-3"]
    lines = (user_dir / "first" / "trajectories.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["seed"] for line in lines) == [0, 1, 2, 3]

    shifted = skyrl(user_dir, *args, "--seed-offset", "4", "--out", "shifted")
    assert shifted.returncode == 0, shifted.stdout + shifted.stderr
    rows = episodes(user_dir / "shifted")
    assert [r["task_id"] for r in rows] == ["seed-4", "seed-5", "seed-6", "seed-7"]
    assert [r["seed"] for r in rows] == [4, 5, 6, 7]
    assert [r["reward"] for r in rows] == [1.0, 0.0, 1.0, 0.0]


def test_resume_keys_seed_episodes_on_their_task_id(user_dir: Path) -> None:
    args = ("eval", ENV, "--policy", "scripted:guesses.json", "--out", "run")
    assert skyrl(user_dir, *args, "--num", "2").returncode == 0
    more = skyrl(user_dir, *args, "--num", "4", "--resume")
    assert more.returncode == 0, more.stdout + more.stderr
    assert "2 episode(s) kept, 2 to run" in more.stdout
    assert [r["task_id"] for r in episodes(user_dir / "run")] == [f"seed-{s}" for s in range(4)]


def test_a_seed_env_without_num_says_how_to_play_it(user_dir: Path) -> None:
    done = skyrl(user_dir, "eval", ENV, "--policy", "scripted:guesses.json")
    assert done.returncode == 2
    out = " ".join((done.stdout + done.stderr).split())
    assert "--num: env 'examples.guess_env:GuessEnv' has no task list" in out
    assert "Traceback" not in out


def test_seed_offset_on_an_env_with_tasks_is_refused(user_dir: Path) -> None:
    done = skyrl(user_dir, "eval", "math", "-p", "scripted:guesses.json", "--seed-offset", "3")
    assert done.returncode == 2
    assert "--seed-offset: env 'math' has" in " ".join(done.stdout.split())


def test_env_play_task_seed_n_plays_that_seed(user_dir: Path) -> None:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [str(SKYRL), "env", "play", ENV, "--task", "seed-3"],
        cwd=user_dir,
        input=f"{secret(3)}\n/quit\n",
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reward 1  return 1  terminated=True" in done.stdout  # seed 3's secret, first try


def test_bad_eval_settings_are_one_line(user_dir: Path) -> None:
    args = ("eval", ENV, "--policy", "scripted:guesses.json", "--num", "2")
    for extra, message in (
        (("--out", "guesses.json"), "--out guesses.json: not a directory"),
        (("--env-kwarg", "tasks=rows.jsonl"), "--env-kwarg tasks=...: give task rows as --tasks"),
    ):
        done = skyrl(user_dir, *args, *extra)
        text = done.stdout + done.stderr
        assert done.returncode == 2 and "Traceback" not in text, text
        assert message in " ".join(text.split())
