"""Checks the agent's repository with plain git."""

import subprocess

GIT = ["git", "-c", "core.fsmonitor=false"]
status = subprocess.run(  # lint: flagged
    ["git", "status", "--porcelain"], cwd="/app/repo", capture_output=True, timeout=30
)
assert status.stdout == b""
log = subprocess.run(  # lint: flagged
    [*GIT, "-C", "/app/repo", "log", "--oneline"], capture_output=True, timeout=30
)
assert len(log.stdout.splitlines()) == 3
