"""`sandboxes.cow_root`: a bwrap sandbox on a copy-on-write root behaves like a container's
filesystem (one root for the workspace and /tmp) and keeps the layers' permissions."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

import pytest

from skyrl_sdk.sandboxes import SandboxSpec, Workspace, cow_root
from skyrl_sdk.sandboxes.bwrap import _ETC_FILES, _ETC_NETWORK_FILES, BwrapSandbox
from tests.conftest import arun, needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(cow_root.supported() is not None, reason="no copy-on-write roots here"),
]


def _start(ws: Path, base: cow_root.HostBase, spec: SandboxSpec) -> BwrapSandbox:
    root = cow_root.layout(
        upper=ws / "up", work=ws / "work", mountpoint=ws / "merged", layer=None, host=base
    )
    app = root.upper_of("/app")
    app.mkdir(parents=True)
    os.chown(app, 65534, 65534)
    (ws / "ws").mkdir()
    sandbox = BwrapSandbox(dataclasses.replace(spec, workspace_dir=str(ws / "ws")))
    sandbox.cow_root = root
    return sandbox


def test_workspace_and_tmp_are_one_filesystem_and_tmp_stays_open(tmp_path: Path) -> None:
    base = cow_root.host_base(tmp_path / "cache", _ETC_FILES + _ETC_NETWORK_FILES)
    bound = Path(tempfile.mkdtemp(prefix="skyrl-cow-bind-"))  # a bind below /tmp
    bound.chmod(0o755)

    async def run() -> str:
        with Workspace.create("skyrl-cow-test-") as ws:
            sandbox = _start(ws.path, base, SandboxSpec(workdir="/app", ro_binds=(str(bound),)))
            async with sandbox:
                ran = await sandbox.exec(
                    "echo x > /tmp/x && mv /tmp/x /app/x && cat /app/x && stat -c %a /tmp && "
                    "mkdir /tmp/mine && touch /usr/local/y 2>/dev/null; echo $?"
                )
                return ran.output

    try:
        out = arun(run(), 60).split()
    finally:
        os.rmdir(bound)
    # rename works (no EXDEV), /tmp is still 1777 although a bind below it made a mount point
    # there, and the system's directories stay read-only to the sandbox user.
    assert out[:2] == ["x", "1777"] and out[-1] != "0", out


def test_the_host_never_sees_the_overlays(tmp_path: Path) -> None:
    base = cow_root.host_base(tmp_path / "cache", _ETC_FILES + _ETC_NETWORK_FILES)

    async def run() -> tuple[bool, bool]:
        with Workspace.create("skyrl-cow-test-") as ws:
            sandbox = _start(ws.path, base, SandboxSpec(workdir="/app"))
            async with sandbox:
                await sandbox.exec("echo hi > /app/f")
                mounted = str(ws.path / "merged") in Path("/proc/mounts").read_text()
                written = (ws.path / "up" / "root" / "app" / "f").read_text() == "hi\n"
                return mounted, written

    assert arun(run(), 60) == (False, True)


def test_layer_paths_with_option_separators_are_refused(tmp_path: Path) -> None:
    base = cow_root.host_base(tmp_path / "cache", _ETC_FILES)
    with pytest.raises(ValueError, match="may not contain"):
        cow_root.layout(
            upper=tmp_path / "a,b",
            work=tmp_path / "w",
            mountpoint=tmp_path / "m",
            layer=None,
            host=base,
        )
