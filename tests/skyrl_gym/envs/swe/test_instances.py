"""Loading, repositories, eval scripts and grading: the parts that need no sandbox."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_gym.envs.swe import grading
from skyrl_gym.envs.swe.bundled.build import bundled_instances
from skyrl_gym.envs.swe.env import strip_test_changes
from skyrl_gym.envs.swe.harness import build_eval_script, instance_test_command
from skyrl_gym.envs.swe.instances import (
    InstanceError,
    Prediction,
    SWEInstance,
    is_test_path,
    load_instances,
    load_predictions,
    split_patch,
)
from skyrl_gym.envs.swe.repos import RepoError, find_repo, materialize, workspace_patch
from tests.skyrl_gym.envs.swe.conftest import by_id

ROW = {
    "instance_id": "acme__widget-1",
    "repo": "acme/widget",
    "base_commit": "abc123",
    "test_patch": "diff --git a/tests/test_w.py b/tests/test_w.py\n--- a/tests/test_w.py\n+++ b/tests/test_w.py\n",
    "FAIL_TO_PASS": '["tests/test_w.py::test_a"]',
    "PASS_TO_PASS": [],
}


def test_load_jsonl_json_list_and_keyed_dict(tmp_path: Path) -> None:
    jsonl = tmp_path / "i.jsonl"
    jsonl.write_text(json.dumps(ROW) + "\n\n")
    listed = tmp_path / "i.json"
    listed.write_text(json.dumps([ROW]))
    keyed = tmp_path / "k.json"
    keyed.write_text(
        json.dumps({ROW["instance_id"]: {k: v for k, v in ROW.items() if k != "instance_id"}})
    )
    for path in (jsonl, listed, keyed):
        (inst,) = load_instances(path)
        assert inst.FAIL_TO_PASS == ["tests/test_w.py::test_a"]  # JSON string decoded
        assert inst.test_files == ["tests/test_w.py"] and inst.owner == "acme"
    assert load_instances([inst.to_row()])[0] == inst  # rows round-trip (task_id dropped)


def test_bad_instances_name_the_problem(tmp_path: Path) -> None:
    dup = tmp_path / "d.jsonl"
    dup.write_text(json.dumps(ROW) + "\n" + json.dumps(ROW) + "\n")
    with pytest.raises(InstanceError, match="duplicate"):
        load_instances(dup)
    with pytest.raises(InstanceError, match="owner/name"):
        load_instances([{**ROW, "repo": "no-slash"}])
    with pytest.raises(InstanceError, match="unknown instance ids"):
        load_instances([ROW], ids=["nope"])


def test_predictions_and_gold(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(
        json.dumps({"instance_id": "a", "model_name_or_path": "m", "model_patch": None}) + "\n"
    )
    preds = load_predictions(path)
    assert preds["a"].is_empty and preds["a"].model_name_or_path == "m"
    inst = SWEInstance.model_validate({**ROW, "patch": "diff --git a/x b/x\n"})
    gold = load_predictions("gold", [inst])
    assert gold[inst.instance_id].model_patch == inst.patch


def test_bundled_instances_are_real_swebench_rows(instances: list[SWEInstance]) -> None:
    assert len(instances) >= 6
    assert len({i.repo for i in instances}) >= 6
    for inst in instances:
        assert inst.patch.startswith("diff --git") and inst.test_patch.startswith("diff --git")
        assert inst.FAIL_TO_PASS and inst.PASS_TO_PASS
        assert not set(inst.FAIL_TO_PASS) & set(inst.PASS_TO_PASS)
        assert all(not is_test_path(p) for p, _ in split_patch(inst.patch))
        assert all(is_test_path(p) for p in inst.test_files)


def test_bundled_repos_match_the_instances(instances: list[SWEInstance], repos_dir: str) -> None:
    for row in bundled_instances():
        repo = find_repo(repos_dir, row["repo"])
        assert repo is not None
        subprocess.run(["git", "cat-file", "-e", row["base_commit"]], cwd=repo, check=True)


def test_repo_lookup_layouts_and_history_cut(
    tmp_path: Path, instances: list[SWEInstance], repos_dir: str
) -> None:
    inst = by_id(instances, "skyrl-bench__textkit-2")  # base is the first of two commits
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "textkit").symlink_to(Path(repos_dir) / "skyrl-bench__textkit")
    assert find_repo(plain, inst.repo) == plain / "textkit"
    work = materialize(inst, tmp_path / "ws", repos_dir=plain)
    log = subprocess.run(
        ["git", "log", "--all", "--format=%H"], cwd=work, capture_output=True, text=True
    ).stdout.split()
    assert log == [inst.base_commit]  # the later commit is not in the workspace
    assert not (work / "textkit" / "wrap.py").exists()
    with pytest.raises(RepoError, match="cloning is off"):
        materialize(inst, tmp_path / "ws2", repos_dir=tmp_path)


def test_workspace_patch_ignores_the_workspace_git_dir(
    tmp_path: Path, instances: list[SWEInstance], repos_dir: str
) -> None:
    inst = by_id(instances, "skyrl-bench__statkit-4")
    work = materialize(inst, tmp_path / "ws", repos_dir=repos_dir)
    pristine = tmp_path / "pristine.git"
    subprocess.run(["cp", "-a", str(work / ".git"), str(pristine)], check=True)
    (work / "statkit" / "stats.py").write_text("changed\n")
    (work / "NEW.txt").write_text("new\n")
    # An agent commits its change and points its branch back at the base: the diff still shows it.
    git = ["git", "-c", "user.name=a", "-c", "user.email=a@a"]
    subprocess.run([*git, "commit", "-qam", "x"], cwd=work, check=True)
    patch = workspace_patch(work, pristine, inst.base_commit)
    assert "statkit/stats.py" in patch and "NEW.txt" in patch


def test_strip_test_changes() -> None:
    patch = (
        "diff --git a/pkg/a.py b/pkg/a.py\n+x\n"
        "diff --git a/tests/test_a.py b/tests/test_a.py\n+y\n"
        "diff --git a/conftest.py b/conftest.py\n+z\n"
    )
    kept, dropped = strip_test_changes(patch)
    assert kept == "diff --git a/pkg/a.py b/pkg/a.py\n+x\n"
    assert dropped == ["tests/test_a.py", "conftest.py"]


def test_eval_script_resets_tests_and_marks_output(instances: list[SWEInstance]) -> None:
    inst = by_id(instances, "skyrl-bench__roman-3")
    script = build_eval_script(inst, workdir="/testbed", existing_test_files=inst.test_files)
    c = grading.constants()
    assert f"git checkout -q {inst.base_commit} -- tests/test_numerals.py" in script
    assert script.index(c.START_TEST_OUTPUT) > script.index("git apply -v -")
    assert script.index(c.END_TEST_OUTPUT) > script.index("python3 -m pytest")
    assert c.TEST_EXIT_CODE in script
    assert instance_test_command(inst).endswith(
        "-rA --tb=no -p no:cacheprovider tests/test_numerals.py"
    )
    custom = inst.model_copy(update={"test_cmd": "make test", "test_directives": ["a b"]})
    assert instance_test_command(custom) == "make test 'a b'"
    new_file = build_eval_script(inst, workdir="/testbed", existing_test_files=[])
    assert "rm -rf -- tests/test_numerals.py" in new_file


def test_parsers_come_from_swebench() -> None:
    known = SWEInstance.model_validate({**ROW, "repo": "django/django"})
    assert grading.parser_name(known) == "parse_log_django"
    assert grading.parser_name(SWEInstance.model_validate(ROW)) == "parse_log_pytest"
    forced = SWEInstance.model_validate({**ROW, "log_parser": "parse_log_pytest_v2"})
    assert grading.parser_name(forced) == "parse_log_pytest_v2"
    with pytest.raises(ValueError, match="unknown log parser"):
        grading.parser_name(SWEInstance.model_validate({**ROW, "log_parser": "nope"}))
    log = "PASSED tests/test_w.py::test_a\nFAILED tests/test_w.py::test_b - AssertionError\n"
    assert grading.parse_log(SWEInstance.model_validate(ROW), log) == {
        "tests/test_w.py::test_a": "PASSED",
        "tests/test_w.py::test_b": "FAILED",
    }


def _log(tmp_path: Path, body: str, code: int) -> Path:
    c = grading.constants()
    path = tmp_path / "out.txt"
    path.write_text(
        f"{c.START_TEST_OUTPUT}\n{body}\n{c.END_TEST_OUTPUT}\n{c.TEST_EXIT_CODE}: {code}\n"
    )
    return path


def test_eval_report_applies_the_resolution_rules(tmp_path: Path) -> None:
    inst = SWEInstance.model_validate({**ROW, "PASS_TO_PASS": ["tests/test_w.py::test_p"]})
    pred = Prediction(instance_id=inst.instance_id, model_patch="diff")
    both = "PASSED tests/test_w.py::test_a\nPASSED tests/test_w.py::test_p"
    assert grading.eval_report(inst, pred, _log(tmp_path, both, 0))["resolved"]
    regress = "PASSED tests/test_w.py::test_a\nFAILED tests/test_w.py::test_p"
    assert not grading.eval_report(inst, pred, _log(tmp_path, regress, 1))["resolved"]
    skipped = "SKIPPED tests/test_w.py::test_a\nPASSED tests/test_w.py::test_p"
    assert not grading.eval_report(inst, pred, _log(tmp_path, skipped, 0))["resolved"]
    # Forged PASSED lines with a failing exit status are not believed.
    forged = grading.eval_report(inst, pred, _log(tmp_path, both, 1))
    assert not forged["resolved"] and not forged["patch_successfully_applied"]


def test_grading_import_is_light() -> None:
    code = (
        "import sys; from skyrl_gym.envs.swe import grading; grading.swebench_grading(); "
        "heavy = [m for m in ('datasets', 'modal', 'docker', 'torch') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
