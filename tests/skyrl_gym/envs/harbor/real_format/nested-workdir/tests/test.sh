#!/bin/bash
# Reward 1 only when the nested WORKDIR's files and the ones copied above it are all there.
ok=1
[ "$(cat /app/sub/answer.txt 2>/dev/null)" = "$(printf 'from-the-context\nbuilt-here')" ] || ok=0
[ "$(cat /app/config/settings.ini 2>/dev/null)" = "level=3" ] || ok=0
echo $ok > /logs/verifier/reward.txt
