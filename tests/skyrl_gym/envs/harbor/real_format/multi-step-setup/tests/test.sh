#!/bin/bash
# Shared verifier: /app/sum.txt must hold the step's expected sum (/tests/expected.txt, the
# step's own file), and the step's setup hook must have left /app/input.txt in place.
if [ -f /app/input.txt ] && [ "$(cat /app/sum.txt 2>/dev/null)" = "$(cat /tests/expected.txt)" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
