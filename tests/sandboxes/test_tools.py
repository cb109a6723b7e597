"""bash, python (persistent interpreter) and file tools on a real sandbox."""

from __future__ import annotations

from skyrl_sdk.sandboxes import SandboxSpec, create_sandbox
from skyrl_sdk.tools import ToolCall, Toolset
from skyrl_sdk.tools.bash import bash_tool
from skyrl_sdk.tools.files import file_tools
from skyrl_sdk.tools.python_exec import python_tool
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


def test_file_tools_view_and_edit() -> None:
    async def go():
        async with create_sandbox() as sb:
            view, edit = file_tools(sb)
            tools = Toolset([view, edit])
            created = await edit.fn(path="m.py", old_text="", new_text="a = 1\nb = 2\nb = 2\n")
            ambiguous = await tools.aexecute(
                ToolCall("edit_file", {"path": "m.py", "old_text": "b = 2", "new_text": "c"})
            )
            missing = await tools.aexecute(
                ToolCall("edit_file", {"path": "m.py", "old_text": "zzz", "new_text": "c"})
            )
            changed = await edit.fn(path="m.py", old_text="a = 1", new_text="a = 10")
            shown = await view.fn(path="m.py", start_line=1, end_line=2)
            return created, ambiguous, missing, changed, shown

    created, ambiguous, missing, changed, shown = arun(go())
    assert created == "wrote m.py (3 lines)"
    assert ambiguous.is_error and "occurs 2 times" in ambiguous.output
    assert missing.is_error and "not found" in missing.output
    assert changed == "edited m.py at line 1"
    assert shown == "     1\ta = 10\n     2\tb = 2"
