#!/bin/bash
# A deliberately bad verifier: every line below is a pattern `skyrl harbor lint` names.
echo 1 > /logs/verifier/reward.txt
source /app/env.sh
expected=$(cat /app/expected.txt)
out=$(python3 /app/solve.py 3 4)
[ "$out" = "$expected" ] || echo 0 > /logs/verifier/reward.txt
cd /app/repo && git status --porcelain
cd /app && python3 -m pytest -q || echo 0 >> /logs/verifier/reward.txt
python3 /tests/test_outputs.py || echo 0 > /logs/verifier/reward.txt
