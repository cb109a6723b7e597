#!/bin/bash
set -e
[ "$(pwd)" = /app/sub ]
cat /app/data.txt built.txt > answer.txt
