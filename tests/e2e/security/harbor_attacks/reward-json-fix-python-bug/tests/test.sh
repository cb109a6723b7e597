#!/bin/bash
# test_stats.py never loads the agent's stats.py itself: a probe does, in a child process
# with a timeout (under the agent's uid where grading has one), and prints the values; the
# check compares them. The verdict is written last, by this script alone.
python3 /tests/test_stats.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
