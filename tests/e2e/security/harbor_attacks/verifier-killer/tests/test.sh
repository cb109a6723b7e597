#!/bin/bash
# Runs the agent's program and checks what it prints, as many real tasks do. Like a failing
# pytest run, it exits 1 when the check fails (Harbor ignores the status).
out=$(timeout 10 /app/greet.sh 2>/dev/null)
echo "greet.sh printed: $out"
if [ "$out" = "hello" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
  exit 1
fi
