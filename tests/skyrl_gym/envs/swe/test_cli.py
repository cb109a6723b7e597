"""`skyrl swebench eval` and `skyrl swebench run` end to end."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from skyrl_gym.cli import app
from skyrl_gym.envs.swe.bundled.build import INSTANCES_FILE
from skyrl_gym.envs.swe.instances import SWEInstance
from tests.skyrl_gym.envs.swe.conftest import by_id, hermes, needs_bwrap

runner = CliRunner()


@needs_bwrap
def test_eval_command_writes_the_report(
    instances: list[SWEInstance], repos_dir: str, tmp_path: Path
) -> None:
    a, b = "skyrl-bench__textkit-2", "skyrl-bench__textkit-5"
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        json.dumps(
            {"instance_id": a, "model_name_or_path": "m", "model_patch": by_id(instances, a).patch}
        )
        + "\n"
        + json.dumps({"instance_id": b, "model_name_or_path": "m", "model_patch": ""})
        + "\n"
    )
    out = tmp_path / "out"
    args = ["swebench", "eval", "--instances", str(INSTANCES_FILE), "--predictions", str(preds)]
    result = runner.invoke(
        app, [*args, "--repos", repos_dir, "--out", str(out), "--ids", f"{a},{b}"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["resolved_ids"] == [a] and report["empty_patch_ids"] == [b]
    assert report["total_instances"] == 2 and "resolved 1/2" in result.output


@needs_bwrap
def test_run_command_plays_a_policy_then_evaluates(
    instances: list[SWEInstance], repos_dir: str, tmp_path: Path
) -> None:
    iid = "skyrl-bench__semver-7"
    fix = hermes(
        "edit_file",
        path="semver/version.py",
        old_text='    return tuple(version.split("."))\n',
        new_text='    return tuple(int(part) for part in version.split("."))\n',
    )
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"actions": {iid: [fix, hermes("submit")]}}))
    out = tmp_path / "run"
    args = ["swebench", "run", "--instances", str(INSTANCES_FILE), "--repos", repos_dir]
    result = runner.invoke(
        app, [*args, "--policy", f"scripted:{script}", "--out", str(out), "--ids", iid]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["resolved_ids"] == [iid]
    (prediction,) = [
        json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()
    ]
    assert prediction["instance_id"] == iid and "int(part)" in prediction["model_patch"]
    assert (out / "trajectories.jsonl").is_file() and (out / "results.json").is_file()
