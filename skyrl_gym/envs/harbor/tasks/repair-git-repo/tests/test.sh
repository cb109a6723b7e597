#!/bin/bash
cd /app/project || { echo 0 > /logs/verifier/reward.txt; exit 0; }
ok=1
check() { if "$@"; then echo "ok: $*"; else echo "FAILED: $*"; ok=0; fi; }
check test ! -e .git/index.lock
check test "$(git rev-list --count HEAD 2>/dev/null)" = 4
check test "$(git log -1 --format=%s HEAD~1 2>/dev/null)" = "remove util"
check test "$(git log -1 --format=%s HEAD~3 2>/dev/null)" = "initial version"
check test "$(git rev-parse --abbrev-ref HEAD 2>/dev/null)" = main
check test "$(git show HEAD:lib/util.sh 2>/dev/null)" = "$(git show HEAD~3:lib/util.sh 2>/dev/null)"
check test -n "$(git show HEAD:lib/util.sh 2>/dev/null)"
check test -z "$(git status --porcelain 2>&1)"
echo $ok > /logs/verifier/reward.txt
