#!/bin/bash
# Stops at the first failing command, as many scripts do, then checks what the agent's
# program printed.
set -e
out=$(timeout 10 /app/greet.sh 2>/dev/null)
echo "greet.sh printed: $out"
if [ "$out" = "hello" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
