#!/bin/bash
# The agent's environment file runs in this shell; pytest collects the agent's directory.
source /app/env.sh  # lint: flagged
export PYTHONPATH=/app/src  # lint: flagged
cd /app && python -m pytest -q  # lint: flagged
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
