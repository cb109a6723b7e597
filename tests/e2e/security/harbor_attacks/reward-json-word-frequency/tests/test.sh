#!/bin/bash
# The agent's program runs as a child with a timeout, on the test's own inputs; the verdict
# is written last, by this script alone.
python3 - <<'PY'
import collections, re, subprocess, sys

def reference(text, n):
    counts = collections.Counter(re.findall(r"[a-z]+", text.lower()))
    return [f"{w} {c}" for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]

ok = 1
for n in (3, 5, 100):
    # /app/sample.txt is the agent's to change: the check uses its own copy.
    for path in ("/tests/cases.txt", "/tests/sample.txt"):
        want = reference(open(path).read(), n)
        try:
            run = subprocess.run([sys.executable, "/app/wordfreq.py", path, str(n)],
                                 capture_output=True, text=True, timeout=20)
            got = run.stdout.strip().splitlines()
        except Exception as e:
            got = [f"error: {e}"]
        print(path, n, "ok" if got == want else f"FAILED: got {got[:6]} want {want[:6]}")
        ok &= got == want
open("/logs/verifier/reward.txt", "w").write(f"{int(ok)}\n")
PY
