"""The bash tool on a real sandbox: output, exit status, timeouts, the memory cap."""

from __future__ import annotations

from skyrl_sdk.sandboxes import SandboxSpec, create_sandbox
from skyrl_sdk.tools.bash import bash_tool
from tests.conftest import arun, needs_bwrap

pytestmark = needs_bwrap


def test_bash_tool_reports_output_and_status() -> None:
    async def go():
        async with create_sandbox(SandboxSpec(memory_bytes=128 << 20)) as sb:
            bash = bash_tool(sb, timeout_s=1)
            return [
                await bash.fn(command="echo hi; echo oops >&2; exit 4"),
                await bash.fn(command="sleep 5"),
                await bash.fn(command="true"),
                await bash.fn(command="python3 -c \"x = b'a' * (1 << 30)\""),
            ]

    failed, slow, silent, hog = arun(go())
    assert failed == "hi\noops\n[exit code 4]"
    assert slow == "[timed out after 1s; the command was killed]"
    assert silent == "[no output]"
    assert "out of memory" in hog or "killed" in hog
