"""Evaluating predictions on the bundled instances in real bwrap sandboxes."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from skyrl_gym.envs.swe.harness import (
    APPLY_COMMANDS,
    HarnessConfig,
    Outcome,
    evaluate_instance,
    run_evaluation,
)
from skyrl_gym.envs.swe.instances import Prediction, SWEInstance, load_predictions
from tests.skyrl_gym.envs.swe.conftest import arun, by_id, needs_bwrap

OFFICIAL_KEYS = {
    "total_instances",
    "submitted_instances",
    "completed_instances",
    "resolved_instances",
    "unresolved_instances",
    "empty_patch_instances",
    "error_instances",
    "completed_ids",
    "incomplete_ids",
    "empty_patch_ids",
    "submitted_ids",
    "resolved_ids",
    "unresolved_ids",
    "error_ids",
    "schema_version",
}


@needs_bwrap
def test_gold_patches_resolve_every_bundled_instance(
    instances: list[SWEInstance], config: HarnessConfig, tmp_path: Path
) -> None:
    run = arun(run_evaluation(instances, load_predictions("gold", instances), tmp_path, config))
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report) >= OFFICIAL_KEYS
    ids = sorted(i.instance_id for i in instances)
    assert report["resolved_ids"] == ids, report["reasons"]
    assert report["completed_ids"] == ids and report["error_ids"] == []
    assert report["resolved_instances"] == len(ids) and report["resolved_rate"] == 1.0
    for result in run.results:
        logs = tmp_path / "logs" / result.instance_id
        for name in ("patch.diff", "eval.sh", "test_output.txt", "run_instance.log"):
            assert (logs / name).is_file(), name
        official = json.loads((logs / "report.json").read_text())[result.instance_id]
        assert official["resolved"] and official["patch_successfully_applied"]
        assert result.apply_command == APPLY_COMMANDS[0]


@needs_bwrap
def test_empty_and_irrelevant_patches_resolve_none(
    instances: list[SWEInstance], config: HarnessConfig, tmp_path: Path
) -> None:
    empty = {
        i.instance_id: Prediction(instance_id=i.instance_id, model_patch="") for i in instances
    }
    report = arun(run_evaluation(instances, empty, tmp_path / "empty", config)).report
    assert report["resolved_ids"] == [] and report["completed_ids"] == []
    assert len(report["empty_patch_ids"]) == len(instances)
    # A patch that applies but fixes nothing: every FAIL_TO_PASS test fails, the rest pass.
    readme = (
        "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n"
        "@@ -1 +1,2 @@\n{first}\n+More words.\n"
    )
    noop = {}
    for inst in instances:
        first = f" # {inst.name}"
        noop[inst.instance_id] = Prediction(
            instance_id=inst.instance_id, model_patch=readme.format(first=first)
        )
    run = arun(run_evaluation(instances, noop, tmp_path / "noop", config))
    assert run.report["resolved_ids"] == [], run.report["reasons"]
    assert len(run.report["unresolved_ids"]) == len(instances)
    for result, inst in zip(run.results, instances, strict=True):
        status = result.report["tests_status"]
        assert sorted(status["FAIL_TO_PASS"]["failure"]) == sorted(inst.FAIL_TO_PASS)
        assert status["PASS_TO_PASS"]["failure"] == []


@needs_bwrap
def test_a_patch_that_does_not_apply_is_reported_and_the_run_goes_on(
    instances: list[SWEInstance], config: HarnessConfig, tmp_path: Path
) -> None:
    bad_id, gold_id = "skyrl-bench__semver-7", "skyrl-bench__lrucache-6"
    bad = by_id(instances, bad_id)
    missing = SWEInstance.model_validate(
        {
            **by_id(instances, gold_id).model_dump(),
            "instance_id": "nobody__nothing-1",
            "repo": "nobody/nothing",
        }
    )
    chosen = [bad, by_id(instances, gold_id), missing]
    broken = bad.patch.replace("return tuple(version.split", "return tuple(VERSION.split")
    preds = {
        bad_id: Prediction(instance_id=bad_id, model_patch=broken),
        gold_id: Prediction(instance_id=gold_id, model_patch=by_id(instances, gold_id).patch),
        missing.instance_id: Prediction(instance_id=missing.instance_id, model_patch=bad.patch),
    }
    run = arun(run_evaluation(chosen, preds, tmp_path, config))
    report = run.report
    assert report["patch_apply_failed_ids"] == [bad_id]
    assert bad_id in report["error_ids"] and bad_id not in report["completed_ids"]
    assert report["instances"][bad_id]["outcome"] == Outcome.PATCH_APPLY_FAILED
    assert report["resolved_ids"] == [gold_id]
    assert missing.instance_id in report["error_ids"]
    assert "cloning is off" in report["reasons"][missing.instance_id]
    log = (tmp_path / "logs" / bad_id / "run_instance.log").read_text()
    for command in APPLY_COMMANDS:  # every fallback was tried
        assert f"`{command}` failed" in log
    assert "Patch Apply Failed" in (tmp_path / "logs" / bad_id / "test_output.txt").read_text()


@needs_bwrap
def test_fuzzy_patch_applies_through_the_fallbacks(
    instances: list[SWEInstance], config: HarnessConfig, tmp_path: Path
) -> None:
    inst = by_id(instances, "skyrl-bench__intervals-1")
    # No blob ids (so no 3-way merge) and one context line that no longer matches.
    fuzzy = re.sub(r"^index .*\n", "", inst.patch, flags=re.M)
    fuzzy = fuzzy.replace("     result = []\n", "     result = []  # accumulated\n")
    assert fuzzy != inst.patch
    pred = Prediction(instance_id=inst.instance_id, model_patch=fuzzy)
    result = arun(evaluate_instance(inst, pred, config, tmp_path))
    assert result.outcome is Outcome.RESOLVED, result.error
    assert result.apply_command.startswith("patch --batch")


@needs_bwrap
def test_per_instance_test_command_and_timeout(
    instances: list[SWEInstance], config: HarnessConfig, tmp_path: Path
) -> None:
    inst = by_id(instances, "skyrl-bench__roman-3")
    slow = inst.model_copy(update={"test_cmd": "sleep 60; python3 -m pytest -rA"})
    pred = Prediction(instance_id=inst.instance_id, model_patch=inst.patch)
    result = arun(evaluate_instance(slow, pred, replace(config, timeout_s=4), tmp_path / "slow"))
    assert result.outcome is Outcome.TIMEOUT and result.duration_s < 30
    assert "Tests Timed Out" in (tmp_path / "slow" / "test_output.txt").read_text()
    verbose = inst.model_copy(update={"test_cmd": "python3 -m pytest -rA -v -p no:cacheprovider"})
    ok = arun(evaluate_instance(verbose, pred, config, tmp_path / "ok"))
    assert ok.outcome is Outcome.RESOLVED, ok.error
    assert (
        "-v -p no:cacheprovider tests/test_numerals.py" in (tmp_path / "ok" / "eval.sh").read_text()
    )


def test_docker_without_engine_or_image_is_skipped_with_a_reason(
    instances: list[SWEInstance], tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    inst = by_id(instances, "skyrl-bench__statkit-4")
    pred = Prediction(instance_id=inst.instance_id, model_patch=inst.patch)
    config = HarnessConfig(backend="docker", timeout_s=30)
    run = arun(run_evaluation([inst], {inst.instance_id: pred}, tmp_path, config))
    assert run.results[0].outcome is Outcome.SKIPPED
    assert "docker" in run.results[0].error
    assert run.report["skipped_ids"] == [inst.instance_id]
    assert run.report["incomplete_ids"] == [inst.instance_id]


@needs_bwrap
def test_sandbox_package_directory_holds_pytest_and_is_read_only_inside() -> None:
    """SWE grading's pytest comes from a small read-only directory, not the project's venv."""
    from skyrl_gym.envs.swe.packages import sandbox_packages
    from skyrl_sdk.sandboxes import SandboxSpec, create_sandbox

    packages = sandbox_packages()
    names = {p.name for p in packages.iterdir()}
    assert {"pytest", "_pytest", "pluggy"} <= names
    assert not any(n.startswith(("skyrl", "torch", "transformers")) for n in names), names
    assert sandbox_packages() == packages  # built once

    async def go() -> tuple[str, int]:
        spec = SandboxSpec(ro_binds=(str(packages),), env={"PYTHONPATH": str(packages)})
        async with create_sandbox(spec) as sb:
            version = await sb.exec("python3 -m pytest --version", timeout=60)
            write = await sb.exec(f"touch {packages}/planted", timeout=10)
            return version.output, write.exit_code

    output, write_status = arun(go(), 120)
    assert "pytest" in output and write_status != 0
    assert not (packages / "planted").exists()
