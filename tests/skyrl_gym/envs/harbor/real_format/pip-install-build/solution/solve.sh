#!/bin/bash
set -e
python3 -c 'import greetlib; print(greetlib.greet("world"))' > /app/out.txt
