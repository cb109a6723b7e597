"""`create_sandbox(spec, backend=...)`: the one way to get a sandbox."""

from __future__ import annotations

import enum
from collections.abc import Generator
from typing import Any

from skyrl_sdk.sandboxes.base import Sandbox
from skyrl_sdk.sandboxes.spec import SandboxSpec


class Backend(enum.StrEnum):
    """Where sandboxes run."""

    BWRAP = "bwrap"
    """Linux namespaces via bubblewrap (the default): isolated, ~20 ms to start (network=True
    adds pasta and a firewall: +5-20 ms; see `network.py`)."""
    LOCAL = "local"
    """A plain subprocess in a temp dir: NOT isolated, for trusted code only."""
    DOCKER = "docker"
    """A container on a Docker engine (needs the `docker` extra and a running dockerd)."""


def sandbox_class(backend: str | Backend) -> type[Sandbox]:
    """The class implementing a backend (imports it lazily)."""
    try:
        name = Backend(backend)
    except ValueError:
        choices = ", ".join(b.value for b in Backend)
        raise ValueError(f"unknown sandbox backend {backend!r}; choose one of {choices}") from None
    if name is Backend.BWRAP:
        from skyrl_sdk.sandboxes.bwrap import BwrapSandbox, bwrap_path

        bwrap_path()  # fail here, with the install hint, not inside start()
        return BwrapSandbox
    if name is Backend.LOCAL:
        from skyrl_sdk.sandboxes.local import LocalSandbox

        return LocalSandbox
    from skyrl_sdk.sandboxes.docker_backend import DockerSandbox

    return DockerSandbox


class _Starting:
    """What `create_sandbox` returns: await it, or use it as an async context manager."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox

    def __await__(self) -> Generator[Any, None, Sandbox]:
        yield from self.sandbox.start().__await__()
        return self.sandbox

    async def __aenter__(self) -> Sandbox:
        await self.sandbox.start()
        return self.sandbox

    async def __aexit__(self, *exc: object) -> None:
        await self.sandbox.close()


def create_sandbox(
    spec: SandboxSpec | None = None, backend: str | Backend = Backend.BWRAP
) -> _Starting:
    """Create and start a sandbox.

    `sb = await create_sandbox(spec)` (then `await sb.close()`), or
    `async with create_sandbox(spec) as sb: ...`.
    """
    if spec is not None and not isinstance(spec, SandboxSpec):
        raise TypeError(f"create_sandbox() takes a SandboxSpec, got {type(spec).__name__}")
    cls = sandbox_class(backend)
    if spec is not None and cls.backend != Backend.LOCAL:
        from skyrl_sdk.sandboxes import network

        if network.network_mode(spec) is not network.NetworkMode.NONE:
            # Fail here, naming the missing packages, not half-way through start(); never
            # fall back to the host's network.
            network.tools()
    return _Starting(cls(spec))
