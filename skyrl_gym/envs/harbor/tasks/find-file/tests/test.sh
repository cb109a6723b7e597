#!/bin/bash
want=/app/docs/team3/week2/.handover.txt
got=$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)
echo "got '$got', want '$want'"
if [ "$got" = "$want" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
