#!/bin/bash
python -c 'print(2 + 40)' > /app/answer.txt
