#!/bin/bash
if [ "$(cat /app/limit.txt 2>/dev/null)" = unlimited ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
