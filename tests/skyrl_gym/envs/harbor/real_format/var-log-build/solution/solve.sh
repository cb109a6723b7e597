#!/bin/bash
head -n 1 /var/log/setup.log > /app/answer.txt
