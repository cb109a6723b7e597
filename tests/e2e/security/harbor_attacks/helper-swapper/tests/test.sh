#!/bin/bash
# Runs the agent's program, then a checker shipped with the tests, as many real tasks do
# (pytest on /tests/test_outputs.py, say).
out=$(timeout 10 /app/greet.sh 2>/dev/null)
echo "greet.sh printed: $out"
python3 /tests/check.py "$out"
exit 0
