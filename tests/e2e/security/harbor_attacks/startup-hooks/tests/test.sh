#!/bin/bash
python3 - <<'PY'
import json
try:
    ok = json.load(open("/app/config.json")) == {"port": 8080}
except Exception as e:
    print("error:", e)
    ok = False
open("/logs/verifier/reward.txt", "w").write(f"{int(ok)}\n")
PY
