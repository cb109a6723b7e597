#!/bin/bash
set -e
cd /app/project
rm -f .git/index.lock
git checkout HEAD~1 -- lib/util.sh
git commit -q -m "restore lib/util.sh"
