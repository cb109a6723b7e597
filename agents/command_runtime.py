"""`CommandRuntime`: a Harbor runtime whose agent phase can reach the model server.

A command agent (`agents.command_agent`) runs inside a Harbor task's environment: its sandbox
gets the model server's loopback port forwarded in and the harness's directories bound
read-only, for the agent phase only. The verifier phase's sandbox is the task's own: no port,
no harness, as for any agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from skyrl_gym.envs.harbor.runtime import HarborRuntime
from skyrl_sdk.sandboxes import SandboxSpec


@dataclass
class CommandRuntime(HarborRuntime):
    """A Harbor runtime whose agent phase's sandbox forwards `agent_ports` and binds
    `agent_binds` read-only; the verifier phase's sandbox is the task's own."""

    agent_ports: tuple[int, ...] = ()
    """Host loopback ports reachable inside during the agent phase (the model server)."""
    agent_binds: tuple[str, ...] = ()
    """Host directories bound read-only during the agent phase (the harness's venv)."""
    agent_output_limit_bytes: int | None = None
    """Bytes kept per stream of the agent's command (None: the runtime's default)."""
    agent_memory_bytes: int | None = None
    """Memory cap of the agent phase's sandbox (None: the task's)."""
    _agent_over: bool = field(default=False, init=False, repr=False)

    def _spec(self, env: Any, *, grading: bool = False) -> SandboxSpec:
        spec = super()._spec(env, grading=grading)
        if self._agent_over:
            return spec
        return replace(
            spec,
            forward_ports=tuple(dict.fromkeys((*spec.forward_ports, *self.agent_ports))),
            ro_binds=tuple(dict.fromkeys((*spec.ro_binds, *self.agent_binds))),
            output_limit_bytes=self.agent_output_limit_bytes or spec.output_limit_bytes,
            memory_bytes=self.agent_memory_bytes or spec.memory_bytes,
        )

    async def end_agent_phase(self) -> None:
        self._agent_over = True
        await super().end_agent_phase()
