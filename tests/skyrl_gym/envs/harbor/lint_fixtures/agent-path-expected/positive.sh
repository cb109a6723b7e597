#!/bin/bash
# The expected count comes from the log the agent was asked to read, and can edit.
expected=$(grep -c ERROR /app/app.log)  # lint: flagged
got=$(tr -d '[:space:]' < /app/errors.txt)
ok=1
[ "$got" = "$expected" ] || ok=0
# Both sides of this comparison are files in the agent's directory.
[ "$(cat /app/out.txt)" = "$(sort /app/input.txt)" ] || ok=0  # lint: flagged
# The grader lives in the agent's image: it says whatever the agent wants it to say.
timeout 60 python3 /app/verify.py > /tmp/grade.txt  # lint: flagged
grep -q SUCCESS /tmp/grade.txt || ok=0
echo $ok > /logs/verifier/reward.txt
