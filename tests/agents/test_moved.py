"""The engine modules issue 26 moved into `skyrl_sdk.agents.engine` keep their old import paths
for one release: each old path warns once, attributed to the importing file, and is the new
module (public names the same objects, private names the tests used still reachable)."""

from __future__ import annotations

import json
import subprocess
import sys

from skyrl_sdk.agents._moved import MOVES

CODE = """
import importlib, json, warnings
out = {}
for old, new in %r:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile("import " + old, "user.py", "exec"), {})
    shim, moved = importlib.import_module(old), importlib.import_module(new)
    public = [n for n in vars(moved) if not n.startswith("_")]
    out[old] = {
        "warnings": [(w.category.__name__, str(w.message), w.filename) for w in caught],
        "same": all(getattr(shim, n) is getattr(moved, n) for n in public),
    }
from skyrl_sdk.agents.local_engine import _Request, _sample, EngineStats, LocalEngine, Scheduling
from skyrl_sdk.agents.engine import LocalEngine as new_engine
from skyrl_sdk.agents.engine.request import Request
from skyrl_sdk.agents.engine.sampler import _sample as new_sample
out["private"] = _Request is Request and _sample is new_sample and LocalEngine is new_engine
print(json.dumps(out))
"""


def test_every_old_engine_path_warns_once_and_is_the_new_module() -> None:
    pairs = [(m.old, m.new) for m in MOVES]
    done = subprocess.run(
        [sys.executable, "-c", CODE % (pairs,)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out.pop("private") is True
    for move in MOVES:
        got = out[move.old]
        deprecations = [w for w in got["warnings"] if w[0] == "DeprecationWarning"]
        assert len(deprecations) == 1, (move.old, got["warnings"])
        _, message, filename = deprecations[0]
        assert move.old in message and move.new in message
        assert filename == "user.py"  # attributed to the importer, shown by default filters
        assert got["same"], move.old


def test_the_engine_package_loads_without_torch() -> None:
    code = "import sys, skyrl_sdk.agents.engine; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
