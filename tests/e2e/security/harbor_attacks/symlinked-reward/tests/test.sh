#!/bin/bash
# Runs the agent's tool (as real tasks do), then writes the honest reward last.
printf 'a\nb\nc\n' > /tmp/three.txt
got=$(timeout 20 bash /app/tool.sh /tmp/three.txt 2>/dev/null)
[ "$got" = 3 ] && r=1 || r=0
echo $r > /logs/verifier/reward.txt
