#!/bin/bash
# This step's verifier: NAME_FILE comes from [steps.verifier.env] only, GREETER from the task's.
[ "$(cat "$NAME_FILE" 2>/dev/null)" = Harbor ] || { echo "NAME_FILE=$NAME_FILE"; echo 0 > /logs/verifier/reward.txt; exit 0; }
out=$("$GREETER" 2>&1)
echo "greet.sh printed: $out; expected: $EXPECTED_GREETING"
if [ "$out" = "$EXPECTED_GREETING" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
