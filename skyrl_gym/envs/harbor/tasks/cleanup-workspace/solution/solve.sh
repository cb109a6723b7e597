#!/bin/bash
find /app/build -type f \( -name '*.tmp' -o -name '*.o' \) -delete
find /app/build -mindepth 1 -type d -empty -delete
