#!/bin/bash
# Removes what was there, then writes 1 or 0 on every path.
rm -f /logs/verifier/reward.txt /logs/verifier/reward.json
if uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
cat /logs/verifier/reward.txt
