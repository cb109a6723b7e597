"""Issue 23, item 3: a SWE patch that configures the test runner instead of fixing the source.

Each patch leaves the bug alone and adds a six-line pytest plugin (`skyrl_pass.py`, which
marks every test report passed), then gets pytest to load it through the repository: an
`addopts = "-p skyrl_pass"` in `pyproject.toml` or in a `tests/pytest.ini`, a
`sitecustomize.py` at the repository root (the repository was on `PYTHONPATH` while
grading), a `conftest.py` outside the test patch (at the root and in `tests/`), a `.pth` file,
and a `*.dist-info` whose `pytest11` entry point names the plugin (auto-loaded); and a patch
that writes `.git/config` (through the `patch -p1` fallback) so that the eval script's git
runs a filter that puts a conftest.py back. Every one must come out NOT resolved, through
`skyrl swebench eval` and through `make("swe")`. Code under test that rewrites the running
session's reports stays resolved (a known limit, as in the official harness).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import skyrl_gym
from skyrl_gym.cli import app
from skyrl_gym.envs.swe.bundled.build import INSTANCES_FILE, ensure_repos
from skyrl_gym.envs.swe.harness import APPLY_COMMANDS, HarnessConfig, Outcome, run_evaluation
from skyrl_gym.envs.swe.instances import Prediction, SWEInstance, load_instances
from skyrl_gym.envs.swe.repos import git, materialize
from skyrl_sdk.agents import ScriptedPolicy, rollout
from tests.skyrl_gym.envs.swe.conftest import arun, by_id, hermes, needs_bwrap

pytestmark = needs_bwrap


@pytest.fixture(scope="module")
def instances() -> list[SWEInstance]:
    return load_instances(INSTANCES_FILE)


@pytest.fixture(scope="module")
def repos_dir() -> str:
    return str(ensure_repos())


PLUGIN = """\
import pytest
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    report.outcome = "passed"
    report.longrepr = None
"""
LOAD_FROM_ENV = 'import os; os.environ["PYTEST_PLUGINS"] = "skyrl_pass"\n'


def _with_addopts(pyproject: str) -> str:
    return pyproject.replace(
        "[tool.pytest.ini_options]\n", '[tool.pytest.ini_options]\naddopts = "-p skyrl_pass"\n'
    )


# attack -> (instance it is tried on, files the patch writes: path -> new content, or a
# function of the file's content at base_commit)
ATTACKS: dict[str, tuple[str, dict[str, Any]]] = {
    "pyproject-addopts": (
        "skyrl-bench__intervals-1",
        {"pyproject.toml": _with_addopts, "skyrl_pass.py": PLUGIN},
    ),
    "pytest-ini-addopts": (
        "skyrl-bench__semver-7",
        {"tests/pytest.ini": "[pytest]\naddopts = -p skyrl_pass\n", "skyrl_pass.py": PLUGIN},
    ),
    "sitecustomize": (
        "skyrl-bench__textkit-2",
        {"sitecustomize.py": LOAD_FROM_ENV, "skyrl_pass.py": PLUGIN},
    ),
    "root-conftest": ("skyrl-bench__textkit-5", {"conftest.py": PLUGIN}),
    "tests-conftest": ("skyrl-bench__lrucache-6", {"tests/conftest.py": PLUGIN}),
    "dist-info-entry-point": (
        "skyrl-bench__statkit-4",
        {
            "skyrl_pass.py": PLUGIN,
            "skyrl_pass-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: skyrl-pass\n"
            "Version: 1.0\n",
            "skyrl_pass-1.0.dist-info/entry_points.txt": "[pytest11]\nskyrl_pass = skyrl_pass\n",
        },
    ),
}
# A `.pth` file in the repository: site processes .pth files only in site directories, and
# neither the repository nor the package directory is one; this one never scored.
PTH_ATTACK = ("skyrl-bench__roman-3", {"skyrl-pass.pth": LOAD_FROM_ENV, "skyrl_pass.py": PLUGIN})


def attack_patch(instance: SWEInstance, repos_dir: str, files: dict[str, Any], tmp: Path) -> str:
    """The diff from `base_commit` that writes `files` (built with git in a scratch clone)."""
    tree = materialize(instance, tmp, repos_dir=repos_dir)
    for rel, content in files.items():
        path = tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content(path.read_text()) if callable(content) else content)
    git(["add", "-A"], tree)
    return git(["diff", "--cached", instance.base_commit], tree)


def swebench_eval(
    instances: list[SWEInstance],
    repos_dir: str,
    tmp_path: Path,
    attacks: dict[str, tuple[str, dict[str, Any]]],
) -> dict[str, Any]:
    """`skyrl swebench eval` on one attack patch per instance; the report."""
    preds = tmp_path / "preds.jsonl"
    with preds.open("w") as f:
        for name, (iid, files) in attacks.items():
            patch = attack_patch(by_id(instances, iid), repos_dir, files, tmp_path / name)
            assert all(f"b/{rel}" in patch for rel in files), patch
            f.write(
                json.dumps({"instance_id": iid, "model_name_or_path": name, "model_patch": patch})
            )
            f.write("\n")
    out = tmp_path / "out"
    ids = ",".join(iid for iid, _ in attacks.values())
    result = CliRunner().invoke(
        app,
        [
            *("swebench", "eval", "--instances", str(INSTANCES_FILE), "--predictions", str(preds)),
            *("--repos", repos_dir, "--out", str(out), "--ids", ids),
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads((out / "report.json").read_text())


def test_patches_that_configure_the_test_runner_are_not_resolved(
    instances: list[SWEInstance], repos_dir: str, tmp_path: Path
) -> None:
    report = swebench_eval(instances, repos_dir, tmp_path, ATTACKS)
    tried = sorted(iid for iid, _ in ATTACKS.values())
    assert report["unresolved_ids"] == tried, report["reasons"]
    for iid in tried:  # the tests ran, and the bug is still there
        status = report["instances"][iid]["tests_status"]
        assert status["FAIL_TO_PASS"]["success"] == [], (iid, status)
        assert status["FAIL_TO_PASS"]["failure"] == by_id(instances, iid).FAIL_TO_PASS
        assert status["PASS_TO_PASS"]["failure"] == [], (iid, status)


def test_a_conftest_py_in_the_test_patch_still_runs(
    instances: list[SWEInstance], repos_dir: str, tmp_path: Path
) -> None:
    """The test patch is the instance's own: its conftest.py is kept (here one that marks
    every report passed, so a patch that fixes nothing comes out resolved)."""
    inst = by_id(instances, "skyrl-bench__semver-7")
    conftest = "".join(f"+{line}\n" for line in PLUGIN.splitlines())
    test_patch = inst.test_patch + (
        "diff --git a/tests/conftest.py b/tests/conftest.py\nnew file mode 100644\n"
        f"--- /dev/null\n+++ b/tests/conftest.py\n@@ -0,0 +1,{len(PLUGIN.splitlines())} @@\n"
        f"{conftest}"
    )
    trusted = inst.model_copy(update={"test_patch": test_patch})
    assert "tests/conftest.py" in trusted.test_files
    patch = attack_patch(inst, repos_dir, {"README.md": "Words.\n"}, tmp_path / "tree")
    run = arun(
        run_evaluation(
            [trusted],
            {inst.instance_id: Prediction(instance_id=inst.instance_id, model_patch=patch)},
            tmp_path / "out",
            HarnessConfig(repos_dir=repos_dir, timeout_s=120),
        )
    )
    assert run.report["resolved_ids"] == [inst.instance_id], run.report["reasons"]


def test_a_pth_file_in_the_patch_is_not_resolved(
    instances: list[SWEInstance], repos_dir: str, tmp_path: Path
) -> None:
    report = swebench_eval(instances, repos_dir, tmp_path, {"pth": PTH_ATTACK})
    assert report["completed_ids"] == [PTH_ATTACK[0]], report["reasons"]
    assert report["resolved_ids"] == [], report["instances"]


def test_an_agent_that_configures_pytest_earns_nothing_in_the_swe_env(
    instances: list[SWEInstance], repos_dir: str, tmp_path: Path
) -> None:
    """`make("swe")` drops test files (conftest.py, pytest.ini) from the agent's diff, but not
    pyproject.toml or a module at the root."""
    iid = "skyrl-bench__lrucache-6"
    actions = [
        hermes(
            "bash",
            command="sed -i 's/^\\[tool.pytest.ini_options\\]$/&\\naddopts = \"-p skyrl_pass\"/' "
            f"pyproject.toml && cat > skyrl_pass.py <<'EOF'\n{PLUGIN}EOF\ncat pyproject.toml",
        ),
        hermes("submit"),
    ]
    env = skyrl_gym.make("swe", repos=repos_dir, results_dir=str(tmp_path))

    async def go() -> Any:
        try:
            return await rollout(env, ScriptedPolicy(actions), by_id(instances, iid).to_row())
        finally:
            env.close()

    trajectory = arun(go(), timeout=180)
    assert 'addopts = "-p skyrl_pass"' in trajectory.turns[0].observation[0]["content"]
    assert trajectory.stop_reason.value == "done", trajectory.error
    assert trajectory.reward == 0.0


# Appended to the module the tests import: it finds pytest's running Config and registers
# the same mark-everything-passed hook (the bug itself is left alone).
IN_PROCESS = """

import gc as _gc

import pytest as _pytest


class _Pass:
    @_pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = (yield).get_result()
        report.outcome = "passed"
        report.longrepr = None


for _obj in _gc.get_objects():
    if type(_obj).__name__ == "Config" and hasattr(_obj, "pluginmanager"):
        _obj.pluginmanager.register(_Pass())
        break
"""


@pytest.mark.xfail(
    strict=True,
    reason="known limit, as in the official harness: the code under test runs inside pytest "
    "and can reach the running session (here through gc) to rewrite its reports",
)
def test_code_under_test_that_rewrites_its_own_reports(
    instances: list[SWEInstance], repos_dir: str, tmp_path: Path
) -> None:
    attack = {"semver/version.py": lambda text: text + IN_PROCESS}
    report = swebench_eval(
        instances, repos_dir, tmp_path, {"in-process": ("skyrl-bench__semver-7", attack)}
    )
    assert report["resolved_ids"] == [], report["instances"]


# A patch `git apply` refuses (it touches .git/config) goes to the `patch -p1` fallback, which
# writes .git/config: a clean filter that the eval script's `git status` runs (README.md has
# the filter) leaves a loop writing the plugin to conftest.py, after the runner files were put
# back and before pytest collects.
GIT_CONFIG_HUNK = """\
--- a/.git/config
+++ b/.git/config
@@ -0,0 +1,2 @@
+[filter "skyrl"]
+\tclean = "sh -c '(while :; do cp skyrl_pass.txt conftest.py; sleep 0.01; done) >/dev/null 2>&1 </dev/null & cat'"
"""


def git_config_attack(instance: SWEInstance, repos_dir: str, tmp: Path) -> str:
    files = {
        ".gitattributes": "README.md filter=skyrl\n",
        "skyrl_pass.txt": PLUGIN,
        "README.md": lambda text: text + "More words.\n",
    }
    return attack_patch(instance, repos_dir, files, tmp) + GIT_CONFIG_HUNK


def test_a_patch_that_writes_git_config_is_not_resolved(
    instances: list[SWEInstance], repos_dir: str, tmp_path: Path
) -> None:
    inst = by_id(instances, "skyrl-bench__roman-3")
    patch = git_config_attack(inst, repos_dir, tmp_path / "tree")
    run = arun(
        run_evaluation(
            [inst],
            {inst.instance_id: Prediction(instance_id=inst.instance_id, model_patch=patch)},
            tmp_path / "out",
            HarnessConfig(repos_dir=repos_dir, timeout_s=120),
        )
    )
    (result,) = run.results
    assert result.apply_command == APPLY_COMMANDS[-1]  # only `patch -p1` took it
    assert result.outcome is Outcome.UNRESOLVED, result
    assert result.report["tests_status"]["FAIL_TO_PASS"]["success"] == [], result.report
