#!/bin/bash
# The repository (its .git/config included) is the agent's: git runs with hooks and
# fsmonitor off, a repository that defines filter drivers (run by `git status`) fails, and
# the verdict is written last, once every check is done.
cd /app/project || { echo 0 > /logs/verifier/reward.txt; exit 0; }
g() {
    GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null \
        git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c safe.directory=/app/project "$@"
}
ok=1
check() { if "$@"; then echo "ok: $*"; else echo "FAILED: $*"; ok=0; fi; }
check test ! -e .git/index.lock
check test "$(g rev-list --count HEAD 2>/dev/null)" = 4
check test "$(g log -1 --format=%s HEAD~1 2>/dev/null)" = "remove util"
check test "$(g log -1 --format=%s HEAD~3 2>/dev/null)" = "initial version"
check test "$(g rev-parse --abbrev-ref HEAD 2>/dev/null)" = main
check test "$(g show HEAD:lib/util.sh 2>/dev/null)" = "$(g show HEAD~3:lib/util.sh 2>/dev/null)"
check test -n "$(g show HEAD:lib/util.sh 2>/dev/null)"
filters=$(g config --get-regexp '^filter\.' 2>&1)
check test -z "$filters"
if [ -z "$filters" ]; then
    check test -z "$(g status --porcelain 2>&1)"
fi
echo $ok > /logs/verifier/reward.txt
