"""`view_file` and `edit_file`: read and change files in a sandbox's workspace."""

from __future__ import annotations

from skyrl_sdk.sandboxes import Sandbox
from skyrl_sdk.tools.core import Tool, tool

MAX_FILE_BYTES = 4 << 20


def _text(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a UTF-8 text file") from None


def file_tools(sandbox: Sandbox, *, max_view_chars: int = 12_000) -> list[Tool]:
    """`view_file` and `edit_file` bound to `sandbox` (paths are relative to its workspace)."""

    async def view_file(path: str, start_line: int = 1, end_line: int | None = None) -> str:
        """Show a file with line numbers.

        Args:
            path: File path, relative to the workspace or absolute.
            start_line: First line to show (1-based).
            end_line: Last line to show (inclusive); omit for the end of the file.
        """
        if start_line < 1 or (end_line is not None and end_line < start_line):
            raise ValueError("need 1 <= start_line <= end_line")
        data = await sandbox.read_file(path, max_bytes=MAX_FILE_BYTES)
        lines = data.decode("utf-8", "replace").splitlines()
        if not lines:
            return f"[{path} is empty]"
        last = len(lines) if end_line is None else min(end_line, len(lines))
        if start_line > len(lines):
            raise ValueError(f"{path} has only {len(lines)} lines")
        shown = "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(start_line, last + 1))
        if len(shown) > max_view_chars:
            shown = shown[:max_view_chars] + "\n[... cut; view a smaller line range]"
        return shown

    async def edit_file(path: str, old_text: str, new_text: str) -> str:
        """Replace the one occurrence of `old_text` in a file by `new_text`.

        With an empty `old_text` the file is created (or overwritten) with `new_text`.

        Args:
            path: File path, relative to the workspace or absolute.
            old_text: Exact text to replace; it must occur exactly once in the file.
            new_text: The replacement text.
        """
        if old_text == "":
            await sandbox.write_file(path, new_text)
            return f"wrote {path} ({len(new_text.splitlines())} lines)"
        content = _text(await sandbox.read_file(path, max_bytes=MAX_FILE_BYTES), path)
        count = content.count(old_text)
        if count == 0:
            raise ValueError(f"old_text was not found in {path}; view the file and copy it exactly")
        if count > 1:
            raise ValueError(
                f"old_text occurs {count} times in {path}; include more surrounding lines"
            )
        at = content.index(old_text)
        updated = content[:at] + new_text + content[at + len(old_text) :]
        await sandbox.write_file(path, updated)
        line = content.count("\n", 0, at) + 1
        return f"edited {path} at line {line}"

    return [tool(view_file), tool(edit_file)]
