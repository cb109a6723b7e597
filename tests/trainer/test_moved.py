"""The modules issue 26 moved out of `skyrl_sdk.trainer`'s top level keep their old import path
for one release: each old path re-exports the new module and warns, and no code of ours (nor any
test but this one) imports an old path, so the warning only ever reaches users."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import skyrl_gym
from skyrl_sdk.trainer._moved import MOVES, NAME_MOVES

REPO = Path(skyrl_gym.__file__).resolve().parents[1]
OURS = ("agents", "benchmarks", "sandboxes", "skyrl_gym", "skyrl_sdk", "tools", "trainer", "tests")
SHIMS = {REPO / "trainer" / f"{m.old.rsplit('.', 1)[1]}.py" for m in MOVES}


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


def test_the_old_lookup_env_path_keeps_its_tokenizer_and_hook():
    code = """
import warnings
warnings.simplefilter("ignore", DeprecationWarning)
from skyrl_sdk.trainer.lookup_env import lookup_tokenizer, register_lookup, ENV_ID
import skyrl_gym
register_lookup()
print(len(lookup_tokenizer()), skyrl_gym.spec(ENV_ID).entry_point)
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["19", "skyrl_gym.envs.lookup:LookupEnv"]


def test_python_dash_m_on_an_old_self_check_path_still_runs_and_warns():
    done = _python("", "-m", "skyrl_sdk.trainer.gpu_check", "--help")
    assert done.returncode == 0, done.stderr
    assert "usage: python -m skyrl_sdk.trainer.selfcheck.gpu" in done.stdout
    # Python's default filters show a DeprecationWarning raised in `__main__`.
    assert "DeprecationWarning: `skyrl_sdk.trainer.gpu_check` moved to" in done.stderr


def test_no_module_of_ours_imports_an_old_path():
    old = {m.old for m in MOVES} | {"skyrl_sdk.trainer.terminal_tiny"}
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


def test_lookup_is_a_built_in_env_not_an_entry_point_of_ours():
    import importlib.metadata

    from skyrl_gym.envs import PLUGIN_GROUP

    ours = importlib.metadata.distribution("skyrl-sdk").entry_points.select(group=PLUGIN_GROUP)
    assert list(ours) == []
    assert skyrl_gym.spec("lookup").entry_point == "skyrl_gym.envs.lookup:LookupEnv"
    env = skyrl_gym.make("lookup")
    obs, _ = env.reset(seed=0)
    key = obs[-1]["content"].split()[-1]
    assert key in ("a", "b", "c", "d")
    _, reward, terminated, _, _ = env.step("lookup")
    assert (reward, terminated) == (0.0, False)


def test_every_moved_name_warns_at_its_old_path_and_is_the_new_object():
    """Backends by composition moved names out of `loop`, `async_trainer`, `ray_mode` and
    `tinker_trainer`, which stay: `from OLD import NAME` still works, with one warning."""
    code = f"""
import importlib, json, warnings
out = []
for old, name, new in {[(m.old, m.name, m.new) for m in NAME_MOVES]!r}:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scope = {{}}
        exec(compile(f"from {{old}} import {{name}} as got", "user.py", "exec"), scope)
    same = scope["got"] is getattr(importlib.import_module(new), name)
    deprecations = [(str(w.message), w.filename) for w in caught if w.category is DeprecationWarning]
    out.append([old, name, new, same, deprecations])
print(json.dumps(out))
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    for old, name, new, same, deprecations in json.loads(done.stdout):
        assert same, (old, name)
        ours = [d for d in deprecations if f"`{old}.{name}` moved to `{new}.{name}`" in d[0]]
        assert len(ours) == 1, (old, name, deprecations)
        assert ours[0][1] == "user.py", (old, name, ours)  # the importer's line, not ours


def test_a_name_that_never_was_there_is_still_an_attribute_error():
    import pytest

    from skyrl_sdk.trainer import loop

    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        loop.no_such_name  # noqa: B018


def test_no_module_of_ours_imports_a_moved_name_from_its_old_module():
    moved = {(m.old, m.name) for m in NAME_MOVES}
    offenders = []
    for folder in OURS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if path == Path(__file__).resolve():
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    offenders += [
                        f"{path.relative_to(REPO)}: {node.module}.{a.name}"
                        for a in node.names
                        if (node.module, a.name) in moved
                    ]
    assert offenders == []
