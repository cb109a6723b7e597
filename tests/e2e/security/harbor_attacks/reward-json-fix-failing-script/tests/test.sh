#!/bin/bash
# Hidden cases: a directory with spaces in file names, and one without .txt files.
# The agent's script runs with a timeout, as data in and data out; the verdict is written
# last, once every check is done, by this script alone.
work=$(mktemp -d)
mkdir -p "$work/case1" "$work/case2"
printf '1\n2\n3\n4\n' > "$work/case1/x.txt"
printf 'a\nb\n' > "$work/case1/with space.txt"
printf 'ignored\n' > "$work/case1/notes.md"
chmod -R a+rX "$work"  # the script may run under the agent's uid
ok=1
out1=$(timeout 20 bash /app/count_lines.sh "$work/case1" 2>/dev/null)
out2=$(timeout 20 bash /app/count_lines.sh "$work/case2" 2>/dev/null)
echo "case1: got '$out1', want 6"
echo "case2: got '$out2', want 0"
[ "$out1" = "6" ] || ok=0
[ "$out2" = "0" ] || ok=0
echo $ok > /logs/verifier/reward.txt
