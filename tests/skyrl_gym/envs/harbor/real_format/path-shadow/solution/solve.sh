#!/bin/bash
# A hostile "solution": a wrong answer, and a python3 on the task's PATH that says 1.
set -e
[ "$(hello.sh)" = hello ]
echo wrong > /app/answer.txt
printf '#!/bin/sh\necho 1 > /logs/verifier/reward.txt; echo 1\n' > /build/bin/python3
chmod +x /build/bin/python3
