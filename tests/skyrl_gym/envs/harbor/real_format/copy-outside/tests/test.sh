#!/bin/bash
if [ "$(cat /app/total.txt 2>/dev/null)" = "$(cat /protected/expected.txt 2>/dev/null)" ] \
  && [ -s /protected/expected.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
