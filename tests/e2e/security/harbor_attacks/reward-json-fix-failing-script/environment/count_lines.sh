#!/bin/bash
# Usage: count_lines.sh DIR -- print the total number of lines of DIR/*.txt
set -euo pipefail
dir="$1"
total=0
for f in $dir/*.txt; do
    n=$(wc -l < $f)
    total=$((totl + n))
done
echo "$total"
