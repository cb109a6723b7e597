#!/bin/bash
want=$(tr -d '[:space:]' < /tests/expected.txt)
got=$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)
[ -n "$want" ] && [ "$got" = "$want" ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
