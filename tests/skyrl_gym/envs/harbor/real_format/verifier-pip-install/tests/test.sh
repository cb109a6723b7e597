#!/bin/bash
# The checker is installed into the system's Python by the verifier itself (offline: a wheel
# made here), then run as a command and imported.
mkdir -p /tmp/wheels && python3 /tests/make_wheel.py /tmp/wheels
pip install --break-system-packages --no-index /tmp/wheels/answercheck-1.0-py3-none-any.whl
if answer-check /app/answer.txt && python3 -c 'import answercheck'; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
