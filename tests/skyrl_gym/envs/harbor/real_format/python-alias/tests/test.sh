#!/bin/bash
# `python`, as the image has it; reward 1 only for the right answer.
if [ "$(cat /app/built.txt 2>/dev/null)" = built ] &&
  python -c 'import sys; sys.exit(0 if open("/app/answer.txt").read().strip() == "42" else 1)'; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
