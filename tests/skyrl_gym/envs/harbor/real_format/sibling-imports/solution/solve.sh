#!/bin/bash
echo "gamma alpha beta" > /app/tasks.txt
