"""Docker's verifier phase reads test.sh's verdict from a copy of the container's
/logs/verifier: when that copy fails, the verdict is a sandbox error saying so, never
`reward_file_not_found` (test.sh may well have written its reward file)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from skyrl_gym.envs.harbor.verifier_phase import _run_test_sh
from skyrl_sdk.sandboxes import Backend, ExecResult, SandboxError


class _Container:
    """A docker grading sandbox whose test.sh run gives `ran` and whose download fails."""

    def __init__(self, ran: ExecResult):
        self.ran = ran

    async def exec(self, argv: list[str], **_: Any) -> ExecResult:
        return self.ran

    async def download(self, path: str, dest: Path) -> Path:
        raise SandboxError("tar failed in the container (exit 2): unexpected EOF")


def _runtime() -> Any:
    return SimpleNamespace(
        task=SimpleNamespace(verifier=SimpleNamespace(timeout_s=5.0)),
        _shell="sh",
        backend=Backend.DOCKER,
        _real=lambda path: f"/tmp/harbor{path}",
    )


def test_a_failed_copy_of_the_verdict_is_a_sandbox_error(tmp_path: Path) -> None:
    ran = ExecResult(exit_code=0, stdout="", stderr="", timed_out=False, duration_s=0.1)
    with pytest.raises(SandboxError, match="cannot copy /logs/verifier out of the container"):
        asyncio.run(_run_test_sh(_runtime(), _Container(ran), "true", {}, tmp_path / "v"))


def test_a_timed_out_test_sh_stays_a_timeout_when_the_copy_fails(tmp_path: Path) -> None:
    ran = ExecResult(exit_code=-9, stdout="", stderr="", timed_out=True, duration_s=5.0)
    got = asyncio.run(_run_test_sh(_runtime(), _Container(ran), "true", {}, tmp_path / "v"))
    assert got.timed_out
