#!/bin/bash
answer=$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)
echo "answer: $answer"
if [ "$answer" = "49" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
