#!/bin/bash
cat > /app/count_lines.sh <<'SCRIPT'
#!/bin/bash
# Usage: count_lines.sh DIR -- print the total number of lines of DIR/*.txt
set -euo pipefail
shopt -s nullglob
dir="$1"
total=0
for f in "$dir"/*.txt; do
    n=$(wc -l < "$f")
    total=$((total + n))
done
echo "$total"
SCRIPT
