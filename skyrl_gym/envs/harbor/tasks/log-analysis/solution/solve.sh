#!/bin/bash
grep 'Failed password' /app/auth.log | sed -E 's/.* from ([0-9.]+) port .*/\1/' \
    | sort | uniq -c | sort -rn | head -n 1 | awk '{print $2}' > /app/answer.txt
