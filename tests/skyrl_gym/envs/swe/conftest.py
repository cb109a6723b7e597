"""Fixtures for the SWE-bench tests: the bundled instances and their locally built repositories.

Evaluations run in real bwrap sandboxes with the host Python; they skip (saying why) where
bwrap cannot start. The repositories are built once into the cache (`ensure_repos`), which is
safe under pytest-xdist.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("swebench", reason="the swebench extra is not installed")

from skyrl_gym.envs.swe.bundled.build import INSTANCES_FILE, ensure_repos
from skyrl_gym.envs.swe.harness import HarnessConfig
from skyrl_gym.envs.swe.instances import SWEInstance, load_instances
from tests.conftest import arun, needs_bwrap

__all__ = ["arun", "by_id", "hermes", "needs_bwrap"]


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
