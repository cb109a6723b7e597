"""Stage budgets of `skyrl swebench run` (issue 28, part 4): the agent's limit (`--timeout`)
and the evaluation's (`--eval-timeout`) end an instance with distinct stop reasons,
`agent_timeout` and `verifier_timeout`, in report.json and each instance's result.json."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from skyrl_gym.cli import app
from skyrl_gym.envs.swe.bundled.build import INSTANCES_FILE
from tests.skyrl_gym.envs.swe.conftest import hermes, needs_bwrap

runner = CliRunner()
SEMVER = "skyrl-bench__semver-7"


def _run(tmp_path: Path, repos_dir: str, actions: list[str], *limits: str) -> dict:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"actions": {SEMVER: actions}}))
    out = tmp_path / "run"
    args = ["swebench", "run", "--instances", str(INSTANCES_FILE), "--repos", repos_dir]
    result = runner.invoke(
        app,
        [*args, "--policy", f"scripted:{script}", "--out", str(out), "--ids", SEMVER, *limits],
    )
    assert result.exit_code == 0, result.output
    return json.loads((out / "report.json").read_text())


@needs_bwrap
def test_an_agent_past_its_timeout_is_an_agent_timeout(repos_dir: str, tmp_path: Path) -> None:
    report = _run(tmp_path, repos_dir, [hermes("bash", command="sleep 60")], "--timeout", "3")
    assert report["stop_reasons"] == {SEMVER: "agent_timeout"}
    assert report["timeout_ids"] == []  # SWE-bench's own: the evaluation's timeouts only
    instance = report["instances"][SEMVER]
    assert instance["outcome"] == "empty_patch" and instance["stop_reason"] == "agent_timeout"


@needs_bwrap
def test_an_evaluation_past_its_timeout_is_a_verifier_timeout(
    repos_dir: str, tmp_path: Path
) -> None:
    # The agent's change makes the tests hang: the evaluation, not the agent, runs out.
    hang = hermes(
        "edit_file",
        path="semver/version.py",
        old_text='    return tuple(version.split("."))\n',
        new_text='    import time; time.sleep(120)\n    return tuple(version.split("."))\n',
    )
    report = _run(tmp_path, repos_dir, [hang, hermes("submit")], "--eval-timeout", "5")
    assert report["stop_reasons"] == {SEMVER: "verifier_timeout"}
    assert report["timeout_ids"] == [SEMVER] and report["resolved_ids"] == []
    result = json.loads((tmp_path / "run" / "logs" / SEMVER / "result.json").read_text())
    assert result["outcome"] == "timeout" and result["stop_reason"] == "verifier_timeout"
