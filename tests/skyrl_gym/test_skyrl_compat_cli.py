"""A SkyRL env on the command line, as a user coming from SkyRL runs it: the installed `skyrl`
script, in a directory outside the checkout holding only their module (registered the SkyRL
way) and SkyRL-format rows. `env check` passes, `eval` gives the rewards PyPI `skyrl-gym`
gives for the same env and actions (run in its own virtualenv), and `train` runs on it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import skyrl_gym
from skyrl_sdk.benchmarks.perf.peer_venv import VENVS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SKYRL = Path(sys.executable).with_name("skyrl")
PEER_PYTHON = VENVS / "skyrl-gym" / "bin" / "python"
PEER_MISSING = (
    None
    if (VENVS / "skyrl-gym" / ".ready").is_file() and PEER_PYTHON.is_file()
    else f"the PyPI skyrl-gym side venv ({VENVS / 'skyrl-gym'}) is absent; build it with "
    '.venv/bin/python -c "from skyrl_sdk.benchmarks.perf.peer_venv import peer_python; '
    "peer_python('skyrl-gym')\" (needs PyPI)"
)
MAX_TURNS = 2  # below the fixture's own default (3): the limit must reach extras["max_turns"]
EXPECTED_RETURNS = {"0": 1.0, "1": 1.0, "2": 0.0, "3": 0.25, "4": 1.0}
EXPECTED_TURNS = {"0": 1, "1": 2, "2": 2, "3": 2, "4": 2}  # the 3-reply scripts end at 2


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    """The user's files, outside the checkout: env module, SkyRL rows, scripted replies."""
    for name in ("skyrl_user_env.py", "skyrl_multiply_rows.jsonl", "skyrl_multiply_script.json"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    return tmp_path


def skyrl(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SKYRL), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": "/tmp", "HF_HUB_OFFLINE": "1"},
    )


def run_eval(user_dir: Path, rows: str, out: str) -> list[dict[str, Any]]:
    """`skyrl eval multiply` with the scripted policy; the trajectories it wrote."""
    result = skyrl(
        user_dir,
        "eval",
        "multiply",
        "--import",
        "skyrl_user_env",
        "--tasks",
        rows,
        "--policy",
        "scripted:skyrl_multiply_script.json",
        "--max-turns",
        str(MAX_TURNS),
        "--out",
        out,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = (user_dir / out / "trajectories.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda t: t["task_id"])


def test_env_check_passes_with_skyrl_rows(user_dir: Path) -> None:
    out = skyrl(
        user_dir,
        "env",
        "check",
        "multiply",
        "--import",
        "skyrl_user_env",
        "--tasks",
        "skyrl_multiply_rows.jsonl",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"all \d+ checks passed", out.stdout), out.stdout
    assert "FAIL" not in out.stdout
    # Without rows a SkyRL env has no episode to play: the checks fail and say why.
    bare = skyrl(user_dir, "env", "check", "multiply", "--import", "skyrl_user_env")
    assert bare.returncode == 1 and "has no dataset" in bare.stdout


def test_env_check_rejects_bad_rows_in_one_line(user_dir: Path) -> None:
    (user_dir / "bad.jsonl").write_text('{"prompt": "not a list of messages", "env_class": "x"}\n')
    out = skyrl(
        user_dir, "env", "check", "multiply", "--import", "skyrl_user_env", "--tasks", "bad.jsonl"
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "bad.jsonl:1: task row has no usable 'task_id'" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr
    # An env whose constructor has no `tasks` argument: --tasks is refused by name.
    (user_dir / "fixed_env.py").write_text(
        "from skyrl_gym import TextEnv\n\n"
        "class Fixed(TextEnv):\n"
        "    def reset(self, *, seed=None, options=None):\n"
        "        return [{'role': 'user', 'content': 'hi'}], {}\n\n"
        "    def step(self, action):\n"
        "        return [], 0.0, True, False, {}\n"
    )
    fixed = skyrl(
        user_dir, "env", "check", "fixed_env:Fixed", "--tasks", "skyrl_multiply_rows.jsonl"
    )
    assert fixed.returncode == 2, fixed.stdout + fixed.stderr
    assert "env 'fixed_env:Fixed' does not take --tasks" in fixed.stdout


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_eval_with_skyrl_rows_gives_the_envs_rewards(user_dir: Path, fmt: str) -> None:
    rows = "skyrl_multiply_rows.jsonl"
    if fmt == "parquet":
        pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow (the parquet extra) is absent")
        import pyarrow as pa

        raw = [json.loads(line) for line in (user_dir / rows).read_text().splitlines()]
        for r in raw:  # one parquet column, one type
            r["reward_spec"]["ground_truth"] = str(r["reward_spec"]["ground_truth"])
        rows = "rows.parquet"
        pq.write_table(pa.Table.from_pylist(raw), user_dir / rows)
    trajectories = run_eval(user_dir, rows, f"out-{fmt}")
    assert {t["task_id"]: t["reward"] for t in trajectories} == EXPECTED_RETURNS
    assert all(t["env_id"] == "multiply" and t["stop_reason"] == "done" for t in trajectories)
    assert {t["task_id"]: len(t["turns"]) for t in trajectories} == EXPECTED_TURNS
    results = json.loads((user_dir / f"out-{fmt}" / "results.json").read_text())
    assert results["summary"]["mean_reward"] == pytest.approx(sum(EXPECTED_RETURNS.values()) / 5)


@pytest.mark.skipif(PEER_MISSING is not None, reason=PEER_MISSING or "")
def test_eval_matches_pypi_skyrl_gym_running_the_same_env(user_dir: Path, tmp_path: Path) -> None:
    ours = run_eval(user_dir, "skyrl_multiply_rows.jsonl", "out")
    # The same module, rows and replies under the real skyrl-gym, in its own venv, from a
    # directory where our skyrl_gym cannot be imported.
    peer_cwd = tmp_path / "peer"
    peer_cwd.mkdir()
    proc = subprocess.run(
        [
            str(PEER_PYTHON),
            "-s",
            str(FIXTURES / "skyrl_peer_driver.py"),
            str(user_dir),
            "skyrl_user_env",
            str(user_dir / "skyrl_multiply_rows.jsonl"),
            str(user_dir / "skyrl_multiply_script.json"),
            str(MAX_TURNS),
        ],
        cwd=peer_cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )
    assert proc.returncode == 0, proc.stderr
    peer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert peer["skyrl_gym_file"].startswith(str(VENVS / "skyrl-gym")), peer["skyrl_gym_file"]
    assert Path(skyrl_gym.__file__).resolve() != Path(peer["skyrl_gym_file"]).resolve()
    assert sorted(peer["episodes"]) == [t["task_id"] for t in ours]
    for t in ours:
        theirs = peer["episodes"][t["task_id"]]
        assert t["prompt_messages"] == theirs["prompt"], t["task_id"]
        assert [turn["reward"] for turn in t["turns"]] == [s["reward"] for s in theirs["steps"]]
        assert [turn["observation"] for turn in t["turns"]] == [
            s["observations"] for s in theirs["steps"]
        ]
        assert theirs["steps"][-1]["done"] and t["stop_reason"] == "done"
        assert t["reward"] == pytest.approx(sum(s["reward"] for s in theirs["steps"]))
    assert {t["task_id"]: t["reward"] for t in ours} == EXPECTED_RETURNS


def test_train_runs_on_the_skyrl_env(user_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = skyrl(
        user_dir,
        "train",
        "--import",
        "skyrl_user_env",
        "-",
        "env.id=multiply",
        "env.kwargs.tasks=skyrl_multiply_rows.jsonl",
        f"env.max_turns={MAX_TURNS}",
        "model.source=tiny",
        "out_dir=run",
        "trainer.steps=1",
        "trainer.groups_per_step=2",
        "rollout.group_size=2",
        "logging.console=false",
        "logging.trajectories=true",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "trained 1 steps" in out.stdout
    lines = (user_dir / "run" / "trajectories.jsonl").read_text().splitlines()
    trajectories = [json.loads(line) for line in lines]
    assert len(trajectories) == 4 and all(t["env_id"] == "multiply" for t in trajectories)
    # Every trained episode is what the env says about its actions: replay them in process.
    monkeypatch.syspath_prepend(str(user_dir))
    __import__("skyrl_user_env")
    env = skyrl_gym.make("multiply", tasks=str(user_dir / "skyrl_multiply_rows.jsonl"))
    rows = {r["task_id"]: r for r in env.unwrapped.tasks}
    for t in trajectories:
        assert t["stop_reason"] == "done" and 1 <= len(t["turns"]) <= MAX_TURNS
        messages, _ = env.reset(options={"task": rows[t["task_id"]]})
        assert messages == t["prompt_messages"]
        replayed = [env.step(turn["action"])[1] for turn in t["turns"]]
        assert replayed == [turn["reward"] for turn in t["turns"]]
        assert t["segments"] and all(turn["token_ids"] for turn in t["turns"])  # trainable tokens
