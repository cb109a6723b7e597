"""The file tools on a real sandbox: view and edit."""

from __future__ import annotations

from skyrl_sdk.sandboxes import create_sandbox
from skyrl_sdk.tools import ToolCall, Toolset
from skyrl_sdk.tools.files import file_tools
from tests.conftest import arun, needs_bwrap

pytestmark = needs_bwrap


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
