#!/bin/bash
# Runs the agent's program and checks what it prints, writes its verdict, then cleans up
# (a stray writer would have time to act here) and exits 0.
out=$(timeout 10 /app/greet.sh 2>/dev/null)
echo "greet.sh printed: $out"
if [ "$out" = "hello" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
sleep 0.5
exit 0
