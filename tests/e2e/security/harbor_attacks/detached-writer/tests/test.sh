#!/bin/bash
# Gives stray writers time: a lax verifier that reads the answer after a while.
sleep 2
want=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
got=$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)
[ "$got" = "$want" ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
