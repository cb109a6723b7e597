#!/bin/bash
set -e
ulimit -c unlimited
ulimit -c > /app/limit.txt
