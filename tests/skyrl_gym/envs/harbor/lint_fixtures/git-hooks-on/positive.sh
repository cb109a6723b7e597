#!/bin/bash
# git status in the agent's repository runs its core.fsmonitor command and hooks.
cd /app/repo || { echo 0 > /logs/verifier/reward.txt; exit 0; }
ok=1
[ -z "$(git status --porcelain)" ] || ok=0  # lint: flagged
[ "$(git -c core.hooksPath=/dev/null rev-list --count HEAD)" = 3 ] || ok=0  # lint: flagged
echo $ok > /logs/verifier/reward.txt
