#!/bin/bash
# Reward 1 only when the build's log reached the agent and the build's state file is there.
if [ "$(cat /app/answer.txt 2>/dev/null)" = configured ] && [ -f /var/lib/setup.state ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
