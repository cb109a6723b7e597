#!/bin/bash
grep -rl '^ACCESS-CODE:' /app/docs | head -n 1 > /app/answer.txt
