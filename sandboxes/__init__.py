"""Sandboxes: one async interface to run untrusted commands, with three backends.

    from skyrl_sdk.sandboxes import SandboxSpec, create_sandbox

    async with create_sandbox(SandboxSpec(memory_bytes=256 << 20)) as sb:
        result = await sb.exec("echo hi", timeout=5)

Backends: `bwrap` (default; Linux namespaces, no network unless asked, a minimal read-only
system (no host project, venv or home directories), writable workspace, seccomp, caps on
memory, pids, CPU, disk and output by default), `local` (plain subprocess, trusted code only)
and `docker` (docker SDK; `pip install 'skyrl-sdk[docker]'`). Every sandbox and every
`Workspace` is recorded with its owner process; `reap()` removes those whose owner died.

Hardening helpers for envs that grade agents: `Workspace` (a size-capped, reaped directory
shared by the agent and grading sandboxes), `grading_env()` (a verifier environment the agent
never wrote) and `read_regular_file()` (read result files without following symlinks).
A grading sandbox (`SandboxSpec(grading=True)`) has a read-only /proc and, on bwrap as root,
two uids: the verifier (uid 0 inside, host `VERIFIER_HOST_UID`) and the programs it runs from
the agent's files (`AGENT_UID`); `Sandbox.grading_isolation` says which it got
(`GradingIsolation`).
This package imports nothing from `tools`, `skyrl_gym` or `agents`.
"""

from skyrl_sdk.sandboxes.base import Command, Sandbox
from skyrl_sdk.sandboxes.factory import Backend, create_sandbox, sandbox_class
from skyrl_sdk.sandboxes.grading import grading_env
from skyrl_sdk.sandboxes.pool import PoolStats, SandboxPool
from skyrl_sdk.sandboxes.portal import BackgroundLoop, background_loop
from skyrl_sdk.sandboxes.safe_files import UnsafeFileError, read_regular_file
from skyrl_sdk.sandboxes.spec import (
    AGENT_UID,
    DEFAULT_DISK_BYTES,
    VERIFIER_HOST_UID,
    BackendUnavailable,
    ExecResult,
    ExecStatus,
    GradingIsolation,
    SandboxError,
    SandboxSpec,
)
from skyrl_sdk.sandboxes.tracking import ReapReport, SandboxRecord, reap, records
from skyrl_sdk.sandboxes.workspace import DiskCap, Workspace, chown_tree

__all__ = [
    "AGENT_UID",
    "DEFAULT_DISK_BYTES",
    "VERIFIER_HOST_UID",
    "Backend",
    "BackendUnavailable",
    "BackgroundLoop",
    "Command",
    "DiskCap",
    "ExecResult",
    "ExecStatus",
    "GradingIsolation",
    "PoolStats",
    "ReapReport",
    "Sandbox",
    "SandboxError",
    "SandboxPool",
    "SandboxRecord",
    "SandboxSpec",
    "UnsafeFileError",
    "Workspace",
    "background_loop",
    "chown_tree",
    "create_sandbox",
    "grading_env",
    "read_regular_file",
    "reap",
    "records",
    "sandbox_class",
]
