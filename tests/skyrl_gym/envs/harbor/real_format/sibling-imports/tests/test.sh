#!/bin/bash
# The task's program in /app imports its sibling module, as in its container.
out=$(cd /app && python3 /app/main.py /app/tasks.txt 2>&1)
echo "main.py printed: $out"
if [ "$out" = "alpha beta gamma" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
