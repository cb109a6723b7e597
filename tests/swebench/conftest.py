"""Fixtures for the SWE-bench tests: the bundled instances and their locally built repositories.

Evaluations run in real bwrap sandboxes with the host Python; they skip (saying why) where
bwrap cannot start. The repositories are built once into the cache (`ensure_repos`), which is
safe under pytest-xdist.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

pytest.importorskip("swebench", reason="the swebench extra is not installed")

from benchmarks.swebench.bundled.build import INSTANCES_FILE, ensure_repos
from benchmarks.swebench.harness import HarnessConfig
from benchmarks.swebench.instances import SWEInstance, load_instances

T = TypeVar("T")


def arun(coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
    """Run a coroutine with a hard timeout (no test can hang)."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def _bwrap_problem() -> str | None:
    if not shutil.which("bwrap"):
        return "bwrap is not installed (apt-get install bubblewrap)"
    probe = subprocess.run(
        ["bwrap", "--ro-bind", "/", "/", "--unshare-all", "true"], capture_output=True, timeout=30
    )
    if probe.returncode != 0:
        return f"bwrap cannot create namespaces here: {probe.stderr.decode(errors='replace')}"
    return None


_PROBLEM = _bwrap_problem()
needs_bwrap = pytest.mark.skipif(_PROBLEM is not None, reason=_PROBLEM or "")


@pytest.fixture(scope="session")
def instances() -> list[SWEInstance]:
    return load_instances(INSTANCES_FILE)


@pytest.fixture(scope="session")
def repos_dir() -> str:
    return str(ensure_repos())


@pytest.fixture(scope="session")
def config(repos_dir: str) -> HarnessConfig:
    return HarnessConfig(repos_dir=repos_dir, workers=2, timeout_s=120)


def by_id(instances: list[SWEInstance], instance_id: str) -> SWEInstance:
    return next(i for i in instances if i.instance_id == instance_id)


def hermes(name: str, **arguments: Any) -> str:
    """One Hermes-format tool call."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
