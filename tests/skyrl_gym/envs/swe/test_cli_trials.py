"""`skyrl swebench run --trials K`: each trial a complete run of its own, with a sampling
seed of its own (a scripted policy with seeded mistakes: a mistaken trial submits without its
fix), and `OUT/report.json` the statistics over the trials, which `skyrl compare` reads."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner as ClickRunner
from typer.testing import CliRunner

from skyrl_gym.cli import CommandEntry, app, load_command
from skyrl_gym.envs.swe.bundled.build import INSTANCES_FILE
from skyrl_sdk.agents.scripted import Mistakes
from skyrl_sdk.agents.trials import trial_seed
from tests.skyrl_gym.envs.swe.conftest import hermes, needs_bwrap

IID = "skyrl-bench__semver-7"
TRIALS = 4
SEED = 3


@needs_bwrap
def test_run_with_trials_reports_each_trial_and_the_statistics(
    repos_dir: str, tmp_path: Path
) -> None:
    fix = hermes(
        "edit_file",
        path="semver/version.py",
        old_text='    return tuple(version.split("."))\n',
        new_text='    return tuple(int(part) for part in version.split("."))\n',
    )
    mistakes = {"rate": 0.5, "action": hermes("submit")}
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"actions": {IID: [fix, hermes("submit")]}, "mistakes": mistakes}))
    out = tmp_path / "run"
    args = ["swebench", "run", "--instances", str(INSTANCES_FILE), "--repos", repos_dir]
    result = CliRunner().invoke(
        app,
        [
            *(*args, "--policy", f"scripted:{script}", "--out", str(out), "--ids", IID),
            *("--trials", str(TRIALS), "--seed", str(SEED)),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    wrong = Mistakes(**mistakes)
    want = [not wrong.strikes(trial_seed(SEED, k, TRIALS), IID) for k in range(TRIALS)]
    assert 0 < sum(want) < TRIALS  # the seeds make some trials fail: a flip
    for k in range(TRIALS):
        trial = json.loads((out / f"trial-{k}" / "report.json").read_text())
        assert (trial["resolved_ids"] == [IID]) is want[k]
        assert report["per_trial"][str(k)]["resolved_ids"] == trial["resolved_ids"]
        lines = (out / f"trial-{k}" / "trajectories.jsonl").read_text().splitlines()
        assert [json.loads(x)["trial"] for x in lines] == [k]
    assert report["trials"] == TRIALS
    assert report["per_task"] == {IID: {"successes": sum(want), "trials": TRIALS}}
    assert report["flip_rate"] == 1.0
    assert report["pass_at_k"][str(TRIALS)] == 1.0 and report["pass_hat_k"][str(TRIALS)] == 0.0
    assert f"trial 0: resolved {int(want[0])}/1" in result.output
    assert "flip rate: 100.0%" in result.output

    compare = load_command(CommandEntry("compare", "skyrl_sdk.benchmarks.compare:compare_command"))
    compared = ClickRunner().invoke(compare, [str(out), str(out / "report.json")])
    assert compared.exit_code == 0, compared.output
    payload = json.loads(compared.output.strip().splitlines()[-1])
    assert payload["a"]["kind"] == "swebench" and payload["pairs"] == TRIALS
