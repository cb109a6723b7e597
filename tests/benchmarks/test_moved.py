"""The performance benchmarks issue 26 moved into `skyrl_sdk.benchmarks.perf` keep their old
import path for one release: each old path re-exports the new module and warns, and no code of
ours (nor any test but this one) imports an old path, so the warning only ever reaches users."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import skyrl_gym
from skyrl_sdk.benchmarks._moved import MOVES
from skyrl_sdk.benchmarks.perf import BENCHMARKS

REPO = Path(skyrl_gym.__file__).resolve().parents[1]
OURS = ("agents", "benchmarks", "sandboxes", "skyrl_gym", "skyrl_sdk", "tools", "trainer", "tests")
SHIMS = {REPO / "benchmarks" / f"{m.old.rsplit('.', 1)[1]}.py" for m in MOVES}


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args, "-c", code] if code else [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def test_every_old_path_warns_once_and_is_the_new_module():
    code = f"""
import importlib, json, warnings
out = {{}}
for old, new in {[(m.old, m.new) for m in MOVES]!r}:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # An `import` statement in the user's file, as a user writes it.
        exec(compile("import " + old, "user.py", "exec"), {{}})
    shim = importlib.import_module(old)
    moved = importlib.import_module(new)
    public = [n for n in vars(moved) if not n.startswith("_")]
    out[old] = {{
        "warnings": [(w.category.__name__, str(w.message), w.filename) for w in caught],
        "same": all(getattr(shim, n) is getattr(moved, n) for n in public),
        "private": all(getattr(shim, n) is getattr(moved, n) for n in vars(moved) if n.startswith("_") and not n.startswith("__")),
    }}
print(json.dumps(out))
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    for move in MOVES:
        got = out[move.old]
        deprecations = [w for w in got["warnings"] if w[0] == "DeprecationWarning"]
        assert len(deprecations) == 1, (move.old, got["warnings"])
        _, message, filename = deprecations[0]
        assert f"`{move.old}` moved to `{move.new}`" in message
        assert filename == "user.py", (move.old, filename)  # the importer's line, not ours
        assert got["same"] and got["private"], move.old


def test_the_makefile_side_venv_line_still_runs_and_warns():
    # `make side-venvs` imports `peer_python` from the old path with `python -c`.
    done = _python("from skyrl_sdk.benchmarks.peer_venv import peer_python, VENVS; print(VENVS)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(REPO / ".venvs")  # the checkout's, as before the move
    assert "DeprecationWarning: `skyrl_sdk.benchmarks.peer_venv` moved to" in done.stderr


def test_the_old_bench_entry_point_runs_the_same_benchmarks():
    from skyrl_sdk.benchmarks.perf.cli import bench

    code = """
import warnings
warnings.simplefilter("ignore", DeprecationWarning)
from skyrl_sdk.benchmarks.cli import bench, BENCHMARKS
import skyrl_sdk.benchmarks
print(bench.__module__, BENCHMARKS is skyrl_sdk.benchmarks.BENCHMARKS)
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [bench.__module__, "True"]


def test_every_benchmark_of_perf_lives_in_perf():
    for name, target in BENCHMARKS.items():
        module = target.partition(":")[0]
        assert module.startswith("skyrl_sdk.benchmarks.perf."), name


def test_no_module_of_ours_imports_an_old_path():
    old = {m.old for m in MOVES}
    offenders = []
    for folder in OURS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path in SHIMS or path == Path(__file__).resolve():
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if n in old]
    assert offenders == []
