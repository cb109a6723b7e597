"""Sandboxes: one async interface to run untrusted commands, with three backends.

    from skyrl_sdk.sandboxes import SandboxSpec, create_sandbox

    async with create_sandbox(SandboxSpec(memory_bytes=256 << 20)) as sb:
        result = await sb.exec("echo hi", timeout=5)

Backends: `bwrap` (default; Linux namespaces, no network unless asked, read-only host root,
writable workspace, cgroup v1 caps), `local` (plain subprocess, trusted code only) and
`docker` (docker SDK; `pip install 'skyrl-sdk[docker]'`). Every sandbox is recorded with its
owner process; `reap()` removes those whose owner died. This package imports nothing from
`tools`, `skyrl_gym` or `agents`.
"""

from skyrl_sdk.sandboxes.base import Command, Sandbox
from skyrl_sdk.sandboxes.factory import Backend, create_sandbox, sandbox_class
from skyrl_sdk.sandboxes.pool import PoolStats, SandboxPool
from skyrl_sdk.sandboxes.portal import BackgroundLoop, background_loop
from skyrl_sdk.sandboxes.spec import (
    BackendUnavailable,
    ExecResult,
    ExecStatus,
    SandboxError,
    SandboxSpec,
)
from skyrl_sdk.sandboxes.tracking import ReapReport, SandboxRecord, reap, records

__all__ = [
    "Backend",
    "BackendUnavailable",
    "BackgroundLoop",
    "Command",
    "ExecResult",
    "ExecStatus",
    "PoolStats",
    "ReapReport",
    "Sandbox",
    "SandboxError",
    "SandboxPool",
    "SandboxRecord",
    "SandboxSpec",
    "background_loop",
    "create_sandbox",
    "reap",
    "records",
    "sandbox_class",
]
