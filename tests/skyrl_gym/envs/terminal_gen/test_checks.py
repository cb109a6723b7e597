"""Generated tasks in the sandbox: oracle 1, nop 0, `ls` 0, another seed's oracle 0.

Issue 18's "Must show": 100 generated tasks across every family, checked in the runtime
`skyrl harbor run` uses (bwrap); and the folders run unchanged through the CLI.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyrl_gym.envs.terminal_gen import FAMILIES, SPLITS, plan, write_tasks
from skyrl_gym.envs.terminal_gen.cli import app
from skyrl_gym.envs.terminal_gen.validate import Probe, check_tasks, run_probe
from tests.conftest import needs_bwrap

pytestmark = needs_bwrap
REPO = Path(__file__).parents[4]


@pytest.mark.slow
@pytest.mark.parametrize("split", ["train", "heldout"])
def test_100_generated_tasks_oracle_1_nop_0_ls_0_cross_0(tmp_path, split):
    names = list(FAMILIES)
    dirs = write_tasks(plan(100, SPLITS[split].start + 40, names), tmp_path)
    assert len(dirs) == 100
    assert Counter(d.name.rsplit("-s", 1)[0] for d in dirs).keys() == set(names)
    results = asyncio.run(check_tasks(dirs, concurrency=4))
    by_probe = Counter((r.probe, r.reward) for r in results)
    bad = [r for r in results if not r.ok]
    assert bad == [], bad[:5]
    assert by_probe[(Probe.ORACLE, 1.0)] == 100
    assert by_probe[(Probe.NOP, 0.0)] == 100
    assert by_probe[(Probe.LS, 0.0)] == 100
    assert by_probe[(Probe.CROSS, 0.0)] == 100


def test_a_broken_task_fails_its_checks(tmp_path):
    """The checks can fail: a verifier that passes everything fails `nop`, a wrong solution
    fails `oracle`."""
    (lenient, wrong) = write_tasks(plan(2, 0, ["grep-count", "sort-unique"]), tmp_path)
    test_sh = lenient / "tests" / "test.sh"
    test_sh.write_text(
        test_sh.read_text().replace("main() { checks; finish; }", "main() { finish; }")
    )
    (wrong / "solution" / "solve.sh").write_text("#!/bin/bash\ncd /app\necho nobody > x.txt\n")
    nop = asyncio.run(run_probe(lenient, Probe.NOP))
    oracle = asyncio.run(run_probe(wrong, Probe.ORACLE))
    assert (nop.reward, nop.ok) == (1.0, False)
    assert (oracle.reward, oracle.ok) == (0.0, False)


def test_cli_gen_checks_and_records_each_probe(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "gen",
            "--n",
            "3",
            "--seed",
            "11",
            "--out",
            str(tmp_path),
            "-j",
            "3",
            "--families",
            "echo-word,permissions,fix-script",
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "tasks.json").read_text())
    assert [r["checks"] for r in manifest] == [{"oracle": 1.0, "nop": 0.0, "ls": 0.0}] * 3


@pytest.mark.slow
def test_generated_folders_run_unchanged_in_skyrl_harbor_run(tmp_path):
    names = list(FAMILIES)
    write_tasks(plan(len(names), 3, names), tmp_path / "tasks")
    for agent, want in (("oracle", 1.0), ("nop", 0.0)):
        out = tmp_path / agent
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "skyrl_gym",
                "harbor",
                "run",
                "-a",
                agent,
                "-p",
                str(tmp_path / "tasks"),
                "-o",
                str(out),
                "-n",
                "4",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
        )
        job = json.loads((out / "job.json").read_text())
        assert job["n_trials"] == len(names), done.stdout + done.stderr
        assert job["n_errors"] == 0, job["errors_by_kind"]
        assert job["mean_reward"] == want
