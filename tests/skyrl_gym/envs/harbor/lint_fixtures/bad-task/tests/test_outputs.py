"""A deliberately bad checker: imports the agent's code and trusts the agent's files."""

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, "/app")
import solve

expected = Path("/app/expected.txt").read_text().strip()
assert str(solve.add(3, 4)) == expected
run = subprocess.run(["python3", "/app/solve.py", "3", "4"], capture_output=True, text=True)
assert run.stdout.strip() == expected
subprocess.run(["git", "status"], cwd="/app/repo", timeout=10)
if Path("/logs/verifier/reward.txt").read_text().strip() == "1":
    print("already passed")
