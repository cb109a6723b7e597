"""Check /app/stats.py's mean and median without running the agent's code in this process.

The probe that loads stats.py runs as a child, with a timeout, from a copy in /app (the
agent's directory, so a two-uid grading sandbox runs it under the agent's uid: it can
neither write the verifier's files nor touch this process). It only reports values; this
process compares them with the expected ones and its exit status is the verdict.
"""

import json
import os
import subprocess
import sys
import tempfile

CASES = [
    ("mean", [], None),
    ("median", [], None),
    ("mean", [1, 2, 3, 4], 2.5),
    ("median", [3, 1, 2], 2),
    ("median", [4, 1, 3, 2], 2.5),
    ("median", [7], 7),
    ("median", [10, -5, 0, 5, 100, 3], 4.0),
]


def probe_copy() -> str:
    """A fresh copy of the probe in /app (O_EXCL: nothing the agent left is written through)."""
    with open("/tests/probe_stats.py", encoding="utf-8") as f:
        source = f.read()
    try:
        fd, path = tempfile.mkstemp(prefix=".stats-probe-", suffix=".py", dir="/app")
    except OSError:
        return "/tests/probe_stats.py"
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(source)
    os.chmod(path, 0o644)
    return path


def run_probe() -> list:
    probe = probe_copy()
    try:
        run = subprocess.run(
            [sys.executable, probe],
            input=json.dumps([[name, arg] for name, arg, _ in CASES]),
            capture_output=True,
            text=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired:
        print("FAILED: stats.py did not finish in 20 s")
        return []
    finally:
        if probe.startswith("/app/"):
            os.unlink(probe)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULTS ")]
    if not lines:
        print(f"FAILED: stats.py could not be loaded: {run.stderr.strip()[-500:]}")
        return []
    try:
        results = json.loads(lines[-1][len("RESULTS ") :])
    except ValueError:
        return []
    return results if isinstance(results, list) and len(results) == len(CASES) else []


def good(got: object, want: object) -> bool:
    if want is None:
        return got is None
    return isinstance(got, int | float) and not isinstance(got, bool) and abs(got - want) < 1e-9


results = run_probe()
ok = len(results) == len(CASES)
for (name, arg, want), got in zip(CASES, results, strict=False):
    right = good(got, want)
    print(name, arg, "ok" if right else f"FAILED: got {got!r}, want {want!r}")
    ok &= right
sys.exit(0 if ok else 1)
