#!/bin/bash
# Shared by both steps: the greeter's output must be $EXPECTED_GREETING (from the verifier env).
out=$("$GREETER" 2>&1)
echo "greet.sh printed: $out; expected: $EXPECTED_GREETING"
if [ -n "$EXPECTED_GREETING" ] && [ "$out" = "$EXPECTED_GREETING" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
