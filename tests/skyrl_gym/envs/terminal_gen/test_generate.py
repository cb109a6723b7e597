"""`skyrl terminal gen` without sandboxes: determinism, splits, the folder format, CLI errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyrl_gym.envs.harbor.dockerfile import plan_dockerfile
from skyrl_gym.envs.harbor.task import load_task
from skyrl_gym.envs.terminal_gen import FAMILIES, SPLITS, make_spec, plan, write_tasks
from skyrl_gym.envs.terminal_gen.cli import app
from skyrl_gym.envs.terminal_gen.env import family_success, task_rows


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        digest.update(str(p.relative_to(root)).encode())
        if p.is_file():
            digest.update(p.read_bytes())
            digest.update(oct(p.stat().st_mode).encode())
    return digest.hexdigest()


def _fingerprint(family: str, seed: int) -> str:
    """What makes an instance: its instruction, starting files and verifier."""
    spec = make_spec(family, seed)
    files = json.dumps({k: v.hex() for k, v in sorted(spec.files.items())})
    return hashlib.sha256(f"{spec.instruction}\0{files}\0{spec.checks}".encode()).hexdigest()


def test_generation_is_deterministic_per_seed(tmp_path):
    names = list(FAMILIES)
    a = write_tasks(plan(2 * len(names), 7, names), tmp_path / "a")
    b = write_tasks(plan(2 * len(names), 7, names), tmp_path / "b")
    assert [p.name for p in a] == [p.name for p in b]
    assert {p.name for p in a} == {f"{f}-s{s}" for f in names for s in (7, 8)}
    for x, y in zip(a, b, strict=True):
        assert _tree_digest(x) == _tree_digest(y), x.name


@pytest.mark.parametrize("family", list(FAMILIES))
def test_seeds_change_the_task_and_splits_share_no_instance(family):
    train = {_fingerprint(family, s) for s in SPLITS["train"].seeds(150)}
    heldout = {_fingerprint(family, s) for s in SPLITS["heldout"].seeds(150)}
    # Seeds change the task (a rare repeat within a split is possible, never across splits).
    assert len(train) >= 147 and len(heldout) >= 147
    assert train.isdisjoint(heldout)


def test_split_rows_are_disjoint_and_cover_every_family():
    train = task_rows("train", None, 20)
    heldout = task_rows("heldout", None, 20)
    assert {r["family"] for r in train} == set(FAMILIES)
    assert not {r["task_id"] for r in train} & {r["task_id"] for r in heldout}
    assert len(train) == 20 * len(FAMILIES)


def test_folders_are_harbor_1_4_tasks_the_runtime_can_read(tmp_path):
    for d in write_tasks(plan(len(FAMILIES), 0, list(FAMILIES)), tmp_path):
        task = load_task(d)
        assert task.schema_version == "1.4"
        assert task.metadata["family"] == d.name.rsplit("-s", 1)[0]
        assert task.metadata["difficulty"] in (1, 2, 3)
        assert task.environment.network_mode.value == "no-network"
        assert task.solution_dir is not None and (task.tests_dir / "test.sh").is_file()
        steps = plan_dockerfile(task.dockerfile)
        assert steps.workdir == "/app"
        # Everything but the base image applies without building an image.
        assert [n for n in steps.not_applied if "FROM" not in n] == []
        test_sh = (task.tests_dir / "test.sh").read_text()
        assert test_sh.rstrip().endswith('main "$@"; exit 0')  # parsed fully before it runs


def test_verifiers_never_read_expected_answers_from_the_workspace():
    """Expected values are embedded in test.sh; a solution's text never appears in a check."""
    for family in FAMILIES:
        spec = make_spec(family, 3)
        assert "/tests/" not in spec.checks
        assert spec.solution.strip() not in spec.checks


def test_family_success_groups_by_family():
    got = family_success([("echo-word-s1", 1.0), ("echo-word-s2", 0.0), ("sort-unique-s9", 1.0)])
    assert got == {
        "echo-word": {"episodes": 2.0, "success": 0.5},
        "sort-unique": {"episodes": 1.0, "success": 1.0},
    }


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--families", "echo-word,nope"], "unknown families nope"),
        (["--split", "test"], "unknown split 'test'"),
        (["--n", "-1"], "n must be >= 0"),
    ],
)
def test_cli_rejects_bad_input_in_one_line(tmp_path, args, words):
    base = ["gen", "--n", "2", "--out", str(tmp_path / "o"), "--no-check"]
    result = CliRunner().invoke(app, [*base, *args])
    assert result.exit_code == 2, result.output
    assert words in result.output.replace("\n", " ")
    assert not (tmp_path / "o").exists()  # nothing written


def test_cli_no_check_writes_folders_and_manifest(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "gen",
            "--n",
            "4",
            "--seed",
            "5",
            "--out",
            str(tmp_path),
            "--families",
            "awk-sum,permissions",
            "--no-check",
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "tasks.json").read_text())
    assert [r["task_id"] for r in manifest] == [
        "awk-sum-s5",
        "permissions-s5",
        "awk-sum-s6",
        "permissions-s6",
    ]
    heldout = CliRunner().invoke(
        app, ["gen", "--n", "1", "--split", "heldout", "--out", str(tmp_path / "h"), "--no-check"]
    )
    assert heldout.exit_code == 0
    assert (tmp_path / "h" / f"echo-word-s{SPLITS['heldout'].start}").is_dir()
