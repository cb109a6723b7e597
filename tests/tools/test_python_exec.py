"""The python tool on a real sandbox: a persistent interpreter that survives timeouts."""

from __future__ import annotations

from skyrl_sdk.sandboxes import create_sandbox
from skyrl_sdk.tools.python_exec import python_tool
from tests.conftest import arun, needs_bwrap

pytestmark = needs_bwrap


def test_python_tool_keeps_state_and_recovers_from_timeouts() -> None:
    async def go():
        async with create_sandbox() as sb:
            py = python_tool(sb, timeout_s=1)
            return [
                await py.fn(code="x = 41\nimport math"),
                await py.fn(code="x + 1"),
                await py.fn(code="print(math.sqrt(16)); 1 / 0"),
                await py.fn(code="while True:\n    pass"),
                await py.fn(code="x"),  # the interrupted cell kept the interpreter alive
                await py.fn(code="import os; os._exit(3)"),
                await py.fn(code="'x' in globals()"),
            ]

    first, second, error, timeout, kept, crash, fresh = arun(go(), timeout=90)
    assert first == "[no output]"
    assert second == "42\n"
    assert error.startswith("4.0\nTraceback") and "ZeroDivisionError" in error
    assert "TimeoutError" in timeout
    assert kept == "41\n"
    assert "restarted" in crash and "lost" in crash
    assert fresh == "False\n"
