#!/bin/bash
# Agent programs run under timeout; the verifier's own scripts need none.
out=$(timeout 10 python3 /app/solve.py 3 4)
timeout -k 5 30 ./run.sh > /tmp/run.log
python3 /tests/check.py "$out"
python3 - <<'PY'
import subprocess

run = subprocess.run(["python3", "/app/solve.py", "1", "2"], capture_output=True, timeout=10)
print(run.stdout)
PY
if [ "$out" = 7 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
