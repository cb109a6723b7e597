#!/bin/bash
set -e
tmux new-session -d -s work
sleep 0.5
tmux send-keys -t work 'echo done > /app/out.txt' Enter
for _ in $(seq 50); do [ -s /app/out.txt ] && break; sleep 0.1; done
tmux kill-server || true
