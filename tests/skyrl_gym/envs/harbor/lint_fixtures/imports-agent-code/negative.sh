#!/bin/bash
# Helpers come from /tests; the agent's code runs as a program, in its own process.
source /tests/helpers.sh
source $HOME/.local/bin/env
PYTHONPATH=/tests python3 /tests/check.py
PYTHONPATH=/app timeout 20 python3 /app/main.py --selftest
uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
