"""Compares the agent's output with the input it was given: both are the agent's to edit."""

import subprocess
from pathlib import Path

for path in ("/tests/case1.txt", "/app/sample.txt"):
    reference = sorted(Path(path).read_text().split())  # lint: flagged
    got = Path("/app/sorted.txt").read_text().split()
    print(path, got == reference)

# The agent's image ships the grader, so the agent decides what it reports.
graded = subprocess.run(  # lint: flagged
    ["python3", "/app/grade.py"], capture_output=True, timeout=30
)

source = Path("/app/data.csv").read_text()
expected_rows = len(source.splitlines()) - 1  # lint: flagged
rows = int(Path("/app/count.txt").read_text())
Path("/logs/verifier/reward.txt").write_text("1" if rows == expected_rows else "0")
