"""`bash`: run a shell command in a sandbox and show the model its output and exit status."""

from __future__ import annotations

from skyrl_sdk.sandboxes import ExecResult, ExecStatus, Sandbox
from skyrl_sdk.tools.core import Tool, tool


def describe_result(result: ExecResult, timeout_s: float) -> str:
    """Output, then one bracketed line saying how the command ended (unless it succeeded)."""
    text = result.output
    status = result.status
    note = {
        ExecStatus.OK: "",
        ExecStatus.FAILED: f"[exit code {result.exit_code}]",
        ExecStatus.TIMEOUT: f"[timed out after {timeout_s:g}s; the command was killed]",
        ExecStatus.CANCELLED: "[cancelled]",
        ExecStatus.KILLED: (
            "[killed: out of memory]"
            if result.oom_killed
            else f"[killed by signal {-result.exit_code}]"
            if result.exit_code < 0
            else f"[killed; exit code {result.exit_code}]"
        ),
    }[status]
    if note:
        text = f"{text}{'' if not text or text.endswith(chr(10)) else chr(10)}{note}"
    return text or "[no output]"


def bash_tool(sandbox: Sandbox, *, timeout_s: float = 30.0, shell: str = "bash") -> Tool:
    """A `bash` tool bound to `sandbox`: each call is one `exec` of `shell -c command`.

    State lives in the sandbox's files, not in the shell: every call starts a fresh shell in
    the workspace (as `docker exec` would).
    """

    async def bash(command: str) -> str:
        """Run a shell command in the workspace and return its output (stdout, then stderr).

        Args:
            command: The command line to run with bash, e.g. `ls -la` or `python3 main.py`.
        """
        result = await sandbox.exec([shell, "-c", command], timeout=timeout_s)
        return describe_result(result, timeout_s)

    return tool(bash)
