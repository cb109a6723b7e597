#!/bin/bash
source /tests/lib.sh
reward [ "$(cat /app/notes.txt 2>/dev/null)" = first ]
