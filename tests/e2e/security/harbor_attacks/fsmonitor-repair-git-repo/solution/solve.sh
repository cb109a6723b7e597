#!/bin/bash
# Attack (issue 23, item 2) on the bundled repair-git-repo: the repository is not repaired;
# instead its .git/config names a core.fsmonitor hook, which `git status` (run by test.sh)
# runs through the shell: it writes reward.json, which used to win over test.sh's
# reward.txt (0).
cd /app/project || exit 1
rm -f .git/index.lock
git config core.fsmonitor 'echo "{\"reward\": 1.0}" > /logs/verifier/reward.json || echo "reward.json refused" >&2; exit 1'
echo "reward.json writer planted"
