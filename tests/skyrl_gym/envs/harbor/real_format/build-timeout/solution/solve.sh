#!/bin/bash
# Leaves a mark in /logs/agent: a trial whose build timed out must never get this far.
echo ran > /logs/agent/solve-ran.txt
cp /var/lib/build.stamp /app/answer.txt
