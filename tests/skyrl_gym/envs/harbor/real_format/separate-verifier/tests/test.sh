#!/bin/bash
# Reads only what Harbor copies into a separate verifier: the artifacts.
reward=1
[ "$(cat /logs/artifacts/count.txt 2>/dev/null)" = 4 ] || { echo "bad /logs/artifacts/count.txt"; reward=0; }
[ "$(cat /app/report.txt 2>/dev/null)" = 4 ] || { echo "bad /app/report.txt"; reward=0; }
echo $reward > /logs/verifier/reward.txt
