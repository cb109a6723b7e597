#!/bin/bash
# As Terminal-Bench 2 verifiers do: a runner installed at grading time runs pytest, and the
# reward is its exit status. Here the runner is not installed (as `uvx` is not, offline).
tbench-uvx-runner -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
