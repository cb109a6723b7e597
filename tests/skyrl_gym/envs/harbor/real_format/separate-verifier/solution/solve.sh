#!/bin/bash
mkdir -p /logs/artifacts
wc -l < /app/input.txt | tr -d ' ' > /app/report.txt
cp /app/report.txt /logs/artifacts/count.txt
