"""Runs as the agent's code: load /app/stats.py, call each case read from stdin (JSON
`[[function, argument], ...]`), and print the results as the last line of stdout, after
`RESULTS ` (a value, or `{"error": "..."}` for an exception or a value that is not JSON)."""

import json
import sys
from importlib.util import module_from_spec, spec_from_file_location

cases = json.loads(sys.stdin.read())
# This probe is the agent's program: a child of test_stats.py, with a timeout, run from a
# copy in /app (so with the agent's uid in two-uid grading).
spec = spec_from_file_location("stats", "/app/stats.py")  # skyrl-lint: ignore[imports-agent-code]
stats = module_from_spec(spec)
spec.loader.exec_module(stats)
results = []
for name, arg in cases:
    try:
        value = getattr(stats, name)(list(arg))
        json.dumps(value)
    except Exception as e:
        value = {"error": f"{type(e).__name__}: {e}"}
    results.append(value)
print("RESULTS " + json.dumps(results), flush=True)
