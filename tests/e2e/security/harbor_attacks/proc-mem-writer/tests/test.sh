#!/bin/bash
# Runs the agent's program and checks what it prints, then exits 0.
out=$(timeout 10 python3 /app/greet.py 2>&1)
echo "greet.py printed: $out"
if [ "$out" = "hello" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
exit 0
