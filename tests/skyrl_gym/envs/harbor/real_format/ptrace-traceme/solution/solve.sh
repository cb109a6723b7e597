#!/bin/bash
set -e
python3 /app/guarded.py > /app/key.txt
