"""Helpers for Harbor tests: build task folders on the fly. The sandbox fixtures (bwrap probe,
one dockerd with a local busybox image per test session) live in tests/conftest.py."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.conftest import arun, needs_bwrap

__all__ = ["arun", "bash_call", "make_task", "needs_bwrap"]

DEFAULT_TOML = """\
schema_version = "1.4"
[agent]
timeout_sec = 60.0
[verifier]
timeout_sec = 30.0
[environment]
network_mode = "no-network"
"""


def make_task(
    root: Path,
    name: str,
    *,
    toml: str | None = DEFAULT_TOML,
    instruction: str | None = "Create /app/done.txt containing ok.",
    test_sh: str | None = (
        '[ "$(cat /app/done.txt 2>/dev/null)" = ok ] && echo 1 > /logs/verifier/reward.txt '
        "|| echo 0 > /logs/verifier/reward.txt"
    ),
    solve_sh: str | None = "echo ok > /app/done.txt",
    dockerfile: str | None = "FROM debian:bookworm-slim\nWORKDIR /app\n",
    files: dict[str, str] | None = None,
    shebang: str = "#!/bin/bash",
) -> Path:
    """Write a task folder; pass None to leave a part out."""
    task = root / name
    task.mkdir(parents=True)
    if toml is not None:
        (task / "task.toml").write_text(textwrap.dedent(toml))
    if instruction is not None:
        (task / "instruction.md").write_text(instruction + "\n")
    if test_sh is not None:
        (task / "tests").mkdir()
        (task / "tests" / "test.sh").write_text(f"{shebang}\n{test_sh}\n")
        (task / "tests" / "test.sh").chmod(0o755)
    if solve_sh is not None:
        (task / "solution").mkdir()
        (task / "solution" / "solve.sh").write_text(f"{shebang}\n{solve_sh}\n")
    if dockerfile is not None:
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text(dockerfile)
    for rel, content in (files or {}).items():
        path = task / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return task


def bash_call(command: str) -> str:
    """A Hermes-format `bash` tool call, as a model would write it."""
    return (
        f"<tool_call>{json.dumps({'name': 'bash', 'arguments': {'command': command}})}</tool_call>"
    )


ANSWER = '<tool_call>{"name": "answer", "arguments": {"answer": "done"}}</tool_call>'
