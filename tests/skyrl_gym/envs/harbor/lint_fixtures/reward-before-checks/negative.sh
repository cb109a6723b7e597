#!/bin/bash
# An early failure exit writes 0 and stops; every other verdict comes last.
cd /app || { echo 0 > /logs/verifier/reward.txt; exit 0; }
ok=1
[ "$(cat /app/out.txt)" = "42" ] || ok=0
timeout 20 python3 /app/main.py --selftest > /dev/null || ok=0
echo $ok > /logs/verifier/reward.txt
echo "verdict: $(cat /logs/verifier/reward.txt)"
python3 - <<'PY'
import json
import subprocess

passed = subprocess.run(["python3", "/tests/check.py"], timeout=60).returncode == 0
json.dump({"reward": float(passed)}, open("/logs/verifier/reward.json", "w"))
print("done")
PY
