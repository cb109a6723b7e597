#!/bin/bash
set -e
[ "$(cat /data/stamp)" = prepared ]
/build/tool.sh | awk '{s += $1} END {print s}' > /app/total.txt
