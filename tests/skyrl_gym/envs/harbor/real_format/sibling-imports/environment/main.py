import sys

from run import run_tasks

print(run_tasks(sys.argv[1]))
