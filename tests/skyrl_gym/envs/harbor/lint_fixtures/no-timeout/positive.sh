#!/bin/bash
# A solver that never returns takes the verdict with it.
out=$(python3 /app/solve.py 3 4)  # lint: flagged
./run.sh > /tmp/run.log  # lint: flagged
if [ "$out" = 7 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
