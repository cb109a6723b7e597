#!/bin/bash
# Reward 1 only when the package the Dockerfile pip-installed answered.
if [ "$(cat /app/out.txt 2>/dev/null)" = "hello, world" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
