#!/bin/bash
# Every git on the agent's repository turns hooks and fsmonitor off.
cd /app/repo || { echo 0 > /logs/verifier/reward.txt; exit 0; }
g() {
    git -c core.hooksPath=/dev/null -c core.fsmonitor=false "$@"
}
ok=1
[ -z "$(g status --porcelain)" ] || ok=0
[ "$(git -C /app/repo -c core.hooksPath=/dev/null -c core.fsmonitor=false rev-list --count HEAD)" = 3 ] || ok=0
git clone -q /tests/reference.git /tmp/reference
[ "$(git -C /tests/reference.git rev-parse HEAD)" != "" ] || ok=0
echo $ok > /logs/verifier/reward.txt
