#!/bin/bash
# The task-level verifier: used by a step without its own test.sh. It compares
# /app/notes.txt with the step's /tests/expected.txt.
source /tests/lib.sh
reward cmp -s /app/notes.txt /tests/expected.txt
