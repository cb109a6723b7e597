"""The `local` backend: a plain subprocess in a temporary workspace. NOT ISOLATED.

Use it only for trusted code (tests of your own tools, machines without bwrap). Commands run
as the calling user with the host's filesystem and network; `spec.network` is ignored. What
it does give: a private workspace directory, wall-clock timeouts, output caps, rlimits, and,
as root, the same cgroup caps as bwrap (so `close()` still kills every process it started).
"""

from __future__ import annotations

import sys
from pathlib import Path

from skyrl_sdk.sandboxes._process import ServerSandbox


class LocalSandbox(ServerSandbox):
    """An unisolated sandbox: same API and caps, no namespaces (see the module docstring)."""

    backend = "local"

    @property
    def workdir(self) -> str:
        # No mount namespace: commands see the host path of the workspace.
        return str(self._workspace) if self._workspace else self.spec.workdir

    def _server_cwd(self, workspace: Path) -> str | None:
        return str(workspace)

    def _interpreter_key(self) -> tuple[str, ...]:
        return (self.backend, sys.executable)

    def _server_argv(self, workspace: Path, python_args: list[str]) -> list[str]:
        if self._server_binary:  # the native command server
            return [self._server_binary]
        return [sys.executable, *python_args]

    def _helper_python(self) -> str:
        return sys.executable
