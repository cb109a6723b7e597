"""A user's own envs and rows on the command line (issue 24), run as the installed `skyrl`
script from a directory outside the checkout: `env list --import`, `env check`'s warning for
an env whose seeds reach nothing, a multi-argument tool in the default (XML) format, `--tasks`
rows checked once with a one-line error naming the field, and `skyrl eval --env-kwarg`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from skyrl_gym.checker import CHECKS

SKYRL = Path(sys.executable).with_name("skyrl")
REPO = Path(__file__).resolve().parents[2]


def environment(*paths: Path) -> dict[str, str]:
    """A bare environment, with `paths` (and the caller's PYTHONPATH, if any) importable."""
    python_path = [str(p) for p in paths] + [os.environ.get("PYTHONPATH", "")]
    return {
        "COLUMNS": "200",
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        "PYTHONPATH": os.pathsep.join(p for p in python_path if p),
    }


USER_ENVS = textwrap.dedent(
    '''
    import skyrl_gym
    from skyrl_gym import TextEnv, ToolEnv
    from skyrl_gym.tool_env import Tooling
    from skyrl_sdk.tools import tool


    @tool
    def add(a: int, b: int) -> str:
        """Add two integers.

        Args:
            a: The first.
            b: The second.
        """
        return str(a + b)


    class AddEnv(ToolEnv):
        """Add the task's numbers with the two-argument `add` tool, then answer."""

        required_fields = ("a", "b")

        def __init__(self, tasks=None, tool_format="xml"):
            tasks = tasks or [{"task_id": "t0", "a": 2, "b": 3}, {"task_id": "t1", "a": 4, "b": 5}]
            super().__init__(tasks, Tooling.build([add], tool_format, "Add numbers."))

        def prompt(self, task):
            return f"What is {task['a']} + {task['b']}?"

        def score(self, task, answer):
            return float(answer.strip() == str(task["a"] + task["b"]))


    class Deaf(TextEnv):
        """Its seed reaches nothing: every seed plays the same episode."""

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return [{"role": "user", "content": "Guess my number."}], {}

        def step(self, action):
            return [{"role": "user", "content": "no"}], 0.0, False, False, {}


    class Broken(Deaf):
        """Its constructor refuses, as an env whose settings name a missing file."""

        def __init__(self):
            raise ValueError("no database at /data/shop.db")


    skyrl_gym.register("user-add", AddEnv, description="adds with a tool", max_turns=3)
    '''
)


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "user_envs.py").write_text(USER_ENVS)
    return tmp_path


def skyrl(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SKYRL), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(),
    )


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The error a command printed; asserts it was one line, no traceback, exit 2."""
    text = done.stdout + done.stderr
    assert done.returncode == 2, text
    assert "Traceback" not in text
    assert text.count("error:") == 1, text
    return " ".join(text.split())


def test_env_list_takes_import(user_dir: Path) -> None:
    done = skyrl(user_dir, "env", "list", "--import", "user_envs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "user-add" in done.stdout and "adds with a tool" in done.stdout
    missing = one_line_error(skyrl(user_dir, "env", "list", "--import", "no_such_module"))
    assert "--import: cannot import module 'no_such_module'" in missing


def test_env_check_warns_when_seeds_reach_nothing(user_dir: Path) -> None:
    done = skyrl(user_dir, "env", "check", "user_envs:Deaf")
    assert done.returncode == 0, done.stdout + done.stderr  # a warning, not a failure
    out = " ".join(done.stdout.split())
    assert "warning: check_reset_seed_determinism: seeds 1234..1237 gave the same opening" in out
    assert f"all {len(CHECKS)} checks passed (1 with a warning)" in out


def test_the_readme_guess_env_checks_without_a_warning(user_dir: Path) -> None:
    done = subprocess.run(
        [str(SKYRL), "env", "check", "examples.guess_env:GuessEnv"],
        cwd=user_dir,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(REPO),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning" not in done.stdout and f"all {len(CHECKS)} checks passed\n" in done.stdout


def test_a_two_argument_tool_passes_every_check_in_the_default_format(user_dir: Path) -> None:
    done = skyrl(user_dir, "env", "check", "--import", "user_envs", "user-add")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"all {len(CHECKS)} checks passed" in done.stdout


def test_env_check_and_play_tasks_rows_missing_a_field_name_it_once(user_dir: Path) -> None:
    (user_dir / "rows.jsonl").write_text(
        '{"task_id": "x", "a": 1, "b": 2}\n{"task_id": "y", "a": 1}\n'
    )
    for command in ("check", "play"):
        done = skyrl(user_dir, "env", command, "user_envs:AddEnv", "--tasks", "rows.jsonl")
        out = one_line_error(done)
        assert "rows.jsonl:2: task 'y' is missing field(s) 'b'" in out


def test_env_check_on_rows_of_the_users_own(user_dir: Path) -> None:
    rows = [{"task_id": f"r{i}", "a": i, "b": 1} for i in range(3)]
    (user_dir / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = skyrl(user_dir, "env", "check", "user_envs:AddEnv", "--tasks", "rows.jsonl")
    assert done.returncode == 0, done.stdout + done.stderr


def test_eval_tasks_rows_and_a_bad_row(user_dir: Path) -> None:
    (user_dir / "script.json").write_text(
        json.dumps({"r0": ["<add><a>7</a><b>1</b></add>", "<answer>8</answer>"]})
    )
    (user_dir / "rows.jsonl").write_text('{"task_id": "r0", "a": 7, "b": 1}\n')
    done = skyrl(
        user_dir, "eval", "user_envs:AddEnv", "-p", "scripted:script.json", "--tasks", "rows.jsonl"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((user_dir / "runs" / "eval" / "results.json").read_text())
    assert [(e["task_id"], e["reward"]) for e in data["episodes"]] == [("r0", 1.0)]

    (user_dir / "bad.jsonl").write_text('{"task_id": "r0", "a": 7}\n')
    out = one_line_error(
        skyrl(
            user_dir,
            "eval",
            "user_envs:AddEnv",
            "-p",
            "scripted:script.json",
            "--tasks",
            "bad.jsonl",
            "-o",
            "bad",
        )
    )
    assert "bad.jsonl:1: task 'r0' is missing field(s) 'b'" in out


def test_eval_env_kwarg_reaches_the_constructor(user_dir: Path) -> None:
    call = '<tool_call>{"name": "answer", "arguments": {"answer": "5"}}</tool_call>'
    (user_dir / "script.json").write_text(json.dumps({"t0": [call], "t1": [call]}))
    args = ("eval", "user_envs:AddEnv", "-p", "scripted:script.json")
    done = skyrl(user_dir, *args, "--env-kwarg", "tool_format=hermes", "-o", "hermes")
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((user_dir / "hermes" / "results.json").read_text())
    assert [e["reward"] for e in data["episodes"]] == [1.0, 0.0]  # hermes calls were read

    out = one_line_error(skyrl(user_dir, *args, "--env-kwarg", "colour=red", "-o", "x"))
    assert "--env-kwarg: env 'user_envs:AddEnv' does not take colour=red" in out
    out = one_line_error(skyrl(user_dir, *args, "--env-kwarg", "tool_format", "-o", "y"))
    assert "--env-kwarg 'tool_format': expected KEY=VALUE" in out


def test_an_env_that_cannot_be_built_is_one_line_not_a_failure_per_check(user_dir: Path) -> None:
    done = skyrl(user_dir, "env", "check", "user_envs:Broken")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines == [
        "FAIL: env 'user_envs:Broken' cannot be built: ValueError: no database at /data/shop.db"
    ]
    out = one_line_error(skyrl(user_dir, "eval", "user_envs:Broken", "-p", "tiny", "-n", "1"))
    assert "env 'user_envs:Broken' cannot be built: ValueError: no database at /data/shop.db" in out


def test_eval_tasks_parquet_rows(user_dir: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")  # the optional `parquet` extra
    import pyarrow as pa

    rows = [{"task_id": "p0", "a": 1, "b": 1}, {"task_id": "p1", "a": 2, "b": 2}]
    pq.write_table(pa.Table.from_pylist(rows), user_dir / "rows.parquet")
    answer = "<answer>{}</answer>"
    (user_dir / "script.json").write_text(
        json.dumps({"p0": [answer.format(2)], "p1": [answer.format(5)]})
    )
    done = skyrl(
        user_dir,
        "eval",
        "user_envs:AddEnv",
        "-p",
        "scripted:script.json",
        "--tasks",
        "rows.parquet",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((user_dir / "runs" / "eval" / "results.json").read_text())
    assert [(e["task_id"], e["reward"]) for e in data["episodes"]] == [("p0", 1.0), ("p1", 0.0)]
