"""Runs the agent's binary with no limit."""

import subprocess

run = subprocess.run(  # lint: flagged
    ["/app/bin/solver", "--input", "/tests/in.txt"], capture_output=True
)
assert run.stdout.strip() == b"42"
