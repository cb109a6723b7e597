#!/bin/bash
# Expected values live in the verifier's text or in /tests; the agent's files are the answer.
want=/app/docs/team3/week2/.handover.txt
expected=$(cat /tests/expected.txt)
got=$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)
ok=1
[ "$got" = "$want" ] || ok=0
[ "$(cat /app/count.txt)" = "$expected" ] || ok=0
diff -q /app/out.txt /tests/golden.txt > /dev/null || ok=0
python3 - <<'PY' || ok=0
import json
expected = json.load(open("/tests/expected.json"))
got = json.load(open("/app/summary.json"))
raise SystemExit(0 if got == expected else 1)
PY
echo $ok > /logs/verifier/reward.txt
