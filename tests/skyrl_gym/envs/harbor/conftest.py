"""Helpers for Harbor tests: build task folders on the fly, and grade in each grading mode
(`isolation`: two uids where the machine has them, one uid). The sandbox fixtures (bwrap
probe, one dockerd with a local busybox image per test session) live in tests/conftest.py."""

from __future__ import annotations

import functools
import json
import os
import textwrap
from pathlib import Path

import pytest

from skyrl_sdk.sandboxes import GradingIsolation, SandboxSpec, create_sandbox
from tests.conftest import arun, needs_bwrap

__all__ = [
    "GRADING_UIDS_ENV",
    "arun",
    "bash_call",
    "isolation_env",
    "isolation_fixture",
    "make_task",
    "needs_bwrap",
    "two_uid_available",
]

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


GRADING_UIDS_ENV = "SKYRL_GRADING_UIDS"
"""`off`: grading sandboxes run with one uid (`GradingIsolation.SINGLE_UID`) even as root
(the bwrap backend's switch; a no-op where there is no second uid anyway)."""


@functools.cache
def two_uid_available() -> bool:
    """True when a grading sandbox here gets `GradingIsolation.TWO_UID` (one probe)."""

    async def go() -> GradingIsolation:
        async with create_sandbox(SandboxSpec(grading=True)) as sandbox:
            return sandbox.grading_isolation

    if os.environ.get(GRADING_UIDS_ENV, "").strip().lower() == "off":
        return False
    return arun(go(), 60) is GradingIsolation.TWO_UID


def isolation_env(isolation: GradingIsolation) -> dict[str, str]:
    """This process's environment for a CLI run graded with `isolation` (skips the test when
    the machine cannot give it)."""
    env = dict(os.environ)
    if isolation is GradingIsolation.TWO_UID:
        if not two_uid_available():
            pytest.skip("no two-uid grading here (not root, or no exec shim)")
        env.pop(GRADING_UIDS_ENV, None)
    else:
        env[GRADING_UIDS_ENV] = "off"
    return env


@pytest.fixture(
    name="isolation",
    params=[GradingIsolation.TWO_UID, GradingIsolation.SINGLE_UID],
    ids=lambda mode: mode.value,
)
def isolation_fixture(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> GradingIsolation:
    """Each grading mode in turn: two uids (skipped where unavailable), then one uid."""
    if isolation_env(request.param).get(GRADING_UIDS_ENV) == "off":
        monkeypatch.setenv(GRADING_UIDS_ENV, "off")
    else:
        monkeypatch.delenv(GRADING_UIDS_ENV, raising=False)
    return request.param
