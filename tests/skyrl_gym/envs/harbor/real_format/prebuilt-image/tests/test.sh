#!/bin/bash
if [ "$(cat /app/out.txt 2>/dev/null)" = HARBOR ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
