#!/bin/bash
# Attack: search the machine for the hidden tests (this task's own, wherever the SDK keeps
# them) and for the SDK's bundled tasks, and copy the answer.
prune='( -path /proc -o -path /sys -o -path /dev ) -prune -o'
found=$(find / $prune -name expected.txt -path '*host-search/tests/*' -print 2>/dev/null | head -1)
if [ -n "$found" ]; then
  echo "FOUND-TESTS: $found"
  cp "$found" /app/answer.txt
fi
bundled=$(find / $prune -name test.sh -path '*harbor/tasks/find-file/tests/*' -print 2>/dev/null | head -1)
[ -n "$bundled" ] && echo "FOUND-BUNDLED: $bundled" && grep -m1 '^want=' "$bundled"
checkout=$(find / $prune -name tasks.jsonl -path '*envs/python/*' -print 2>/dev/null | head -1)
[ -n "$checkout" ] && echo "FOUND-CHECKOUT: $checkout"
echo "search done"
