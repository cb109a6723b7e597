"""The `skyrl` command line, run as a real subprocess."""

import json
import subprocess
import sys

import pytest

from skyrl_gym.checker import CHECKS

ENV_MODULE = "tests.skyrl_gym.user_envs"


def skyrl(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "skyrl_gym.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )


def test_env_list_shows_ids_and_descriptions():
    out = skyrl("env", "list")
    assert out.returncode == 0, out.stderr
    for env_id in ("math", "math-answer", "sql-basic"):
        assert env_id in out.stdout
    assert "calculator" in out.stdout


@pytest.mark.parametrize("env_id", ["math", "sql-basic", f"{ENV_MODULE}:CountdownEnv"])
def test_env_check_passes(env_id):
    out = skyrl("env", "check", env_id)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"all {len(CHECKS)} checks passed" in out.stdout


def test_env_check_fails_with_exit_1_and_names_the_check():
    out = skyrl("env", "check", f"{ENV_MODULE}:IntReward")
    assert out.returncode == 1
    assert "check_step_return_type" in out.stdout and "FAIL" in out.stdout


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("nope", "no env registered as 'nope'"),
        ("tests.nowhere:Env", "cannot import module 'tests.nowhere'"),
    ],
)
def test_env_check_bad_ids_are_clear_errors(env_id, message):
    out = skyrl("env", "check", env_id)
    assert out.returncode == 2
    assert message in out.stdout
    assert "Traceback" not in out.stdout + out.stderr


def test_env_play_runs_an_episode_from_typed_turns():
    script = "I will add. \\\n<calculator>2 + 2</calculator>\nnot a tool call\n<answer>4</answer>\nmore\n/reset\n/quit\n"
    out = skyrl("env", "play", "math", "--task", "math-001", stdin=script)
    assert out.returncode == 0, out.stderr
    assert "A library has" in out.stdout  # task math-001's question
    assert "<observation>" in out.stdout and "4" in out.stdout
    assert "parse error" in out.stdout and "no_action" in out.stdout
    assert "episode over" in out.stdout
    assert "the episode has ended" in out.stdout  # the turn typed after the end
    assert out.stdout.count("episode started") == 2
    assert "bye" in out.stdout


def test_env_play_unknown_task_is_a_clear_error():
    out = skyrl("env", "play", "math", "--task", "nope", stdin="")
    assert out.returncode == 2 and "has no task 'nope'" in out.stdout


def test_bench_rejects_unknown_names():
    out = skyrl("bench", "nope")
    assert out.returncode != 0 and "unknown benchmark 'nope'" in out.stdout + out.stderr


def test_demo_writes_results(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "skyrl_gym.cli", "demo", "--model", "tiny", "--steps", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": "/tmp",
            "PYTHONPATH": str(__import__("pathlib").Path(__file__).resolve().parents[2]),
        },
    )
    assert out.returncode == 0, out.stderr
    demo_dir = tmp_path / "runs" / "demo"
    results = json.loads((demo_dir / "results.json").read_text())
    assert results["steps"] == 3 and len(results["rewards"]) == 3
    assert (results["model"], results["env"]) == ("tiny", "lookup")
    assert (demo_dir / "report.md").exists() and (demo_dir / "trajectories.jsonl").exists()
    assert list(demo_dir.glob("reward_curve.*"))
    report = (demo_dir / "report.md").read_text()
    assert "](trajectories.html)" in report and (demo_dir / "trajectories.html").exists()
    # The headline is held-out success, before and after training, with its interval.
    for end in ("start", "end"):
        assert 0.0 <= results[f"heldout_success_{end}"] <= 1.0
        low, high = results[f"heldout_ci_{end}"]
        assert low <= results[f"heldout_success_{end}"] <= high
    assert results["heldout_episodes"] == 64
    assert "**Held-out success" in report
    # It ends by naming the report and the viewer, one path a line; the chart shows the
    # held-out evaluations; library bars and warnings stay off the console.
    lines = out.stdout.splitlines()
    assert f"Report: {demo_dir.resolve() / 'report.md'}" in lines
    assert f"Viewer: {demo_dir.resolve() / 'trajectories.html'}" in lines
    assert (demo_dir / "reward_curve.svg").read_text().count('class="heldout"') == 2
    for noise in ("Loading weights", "Writing model shards", "Setting accelerator", "Warning"):
        assert noise not in out.stdout + out.stderr


def test_demo_rejects_unknown_models():
    out = skyrl("demo", "--model", "gpt5")
    assert out.returncode != 0 and "choose from smollm2, tiny" in out.stdout + out.stderr


def test_a_command_whose_module_fails_to_import_fails_alone(monkeypatch):
    from typer.testing import CliRunner

    from skyrl_gym import cli

    broken = cli.CommandEntry("broken", "tests.nowhere:app")
    monkeypatch.setattr(cli, "_commands", lambda: {**cli.discover_commands(), "broken": broken})
    runner = CliRunner()
    out = runner.invoke(cli.app, ["broken", "--flag", "x"])
    assert out.exit_code == 1
    assert "`skyrl broken` is unavailable: ModuleNotFoundError" in out.output + str(out.exception)
    assert runner.invoke(cli.app, ["env", "list"]).exit_code == 0
    assert "broken" in runner.invoke(cli.app, ["--help"]).output  # listed; help imports nothing
