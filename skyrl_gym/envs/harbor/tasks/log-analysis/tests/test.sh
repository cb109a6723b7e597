#!/bin/bash
got=$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)
echo "got '$got', want '192.168.1.20'"
if [ "$got" = "192.168.1.20" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
