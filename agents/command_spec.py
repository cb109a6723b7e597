"""A command agent's spec: `--agent "command:CMD"` and the settings that confine it.

`parse_agent(spec, ...)` reads an agent spec (`loop`, or `command:CMD`) into a `CommandAgent`
(None for our agent loop); `CommandAgent` checks its settings when built (a harness venv that
is a virtualenv other than the SDK's own, read-only binds that are directories the sandbox's
user can read, positive limits) and says which host directories the sandbox binds. How CMD is
run and played: `skyrl_sdk.agents.command_agent`.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PREFIX = "command:"
"""How an agent spec names a command agent (`--agent "command:CMD"`)."""
LOOP = "loop"
"""The agent spec of our own agent loop (the default)."""
AGENT_DIR = "/tmp/skyrl-agent"
"""Directory in the sandbox's private `/tmp` with the instruction file and the agent's HOME."""
INSTRUCTION_FILE = f"{AGENT_DIR}/instruction.md"
"""Where the task's instruction is written inside the sandbox."""
AGENT_HOME = f"{AGENT_DIR}/home"
"""The agent command's HOME inside the sandbox (not the graded workspace)."""
MAX_INSTRUCTION_ENV_BYTES = 64 << 10
"""Longer instructions are only in the file (Linux caps one variable at 128 KiB)."""
DEFAULT_TIMEOUT_S = 600.0
"""Default wall-clock limit of one run of CMD."""
DEFAULT_OUTPUT_LIMIT_BYTES = 256 << 10
"""Default bytes of CMD's stdout and of its stderr kept (head and tail, marked when cut)."""
_SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin")


class CommandAgentError(ValueError):
    """An agent spec or a command agent's settings are invalid (one line, names the field)."""


@dataclass(frozen=True)
class CommandAgent:
    """An external agent program run as each episode's agent, inside its sandbox."""

    command: str
    """Shell command line (`/bin/sh -c`), run in the sandbox's workspace."""
    venv: str | None = None
    """Host virtualenv of the harness, bound read-only at its own path; its `bin/` leads PATH.
    Never the project's own venv: its packages and the checkout it points to would be readable."""
    binds: tuple[str, ...] = ()
    """More host directories bound read-only at their own paths (the harness's scripts)."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    """Wall-clock limit of CMD; its process group is killed after it (the episode: `timeout`)."""
    output_limit_bytes: int = DEFAULT_OUTPUT_LIMIT_BYTES
    """Bytes kept of CMD's stdout and of its stderr (first three quarters and last quarter)."""
    memory_bytes: int | None = None
    """Memory cap of the agent's sandbox (None: the env's own; a Python harness may need more)."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment variables of CMD (a dict is accepted)."""

    def __post_init__(self) -> None:
        if not isinstance(self.command, str) or not self.command.strip():
            raise CommandAgentError("the agent command is empty: use --agent 'command:CMD'")
        if "\0" in self.command:
            raise CommandAgentError("the agent command contains a NUL byte")
        if self.venv is not None:
            venv = os.path.abspath(os.fspath(self.venv))
            if not os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
                raise CommandAgentError(
                    f"agent venv {self.venv!r} is not a virtualenv (no pyvenv.cfg); create it "
                    "with `python -m venv DIR` and install the harness there"
                )
            if os.path.realpath(venv) == os.path.realpath(sys.prefix):
                raise CommandAgentError(
                    f"agent venv {self.venv!r} is the SDK's own virtualenv: its packages and "
                    "the checkout it points to would be readable by the agent; give the "
                    "harness a venv of its own"
                )
            object.__setattr__(self, "venv", venv)
        binds = (self.binds,) if isinstance(self.binds, str) else tuple(self.binds)
        resolved = []
        for path in binds:
            path = os.path.abspath(os.fspath(path))
            if not os.path.isdir(path) or path == "/":
                raise CommandAgentError(f"agent bind {path!r} is not a directory other than /")
            resolved.append(path)
        object.__setattr__(self, "binds", tuple(resolved))
        for path in (*([self.venv] if self.venv else []), *resolved):
            problem = _unreachable(path)
            if problem:
                raise CommandAgentError(problem)
        prefix = _base_prefix(self.venv) if self.venv else None
        if prefix is not None and not _under_system(prefix):
            problem = _unreachable(prefix) if os.path.isdir(prefix) else f"{prefix} is missing"
            if problem:
                raise CommandAgentError(
                    f"agent venv {self.venv!r} runs the interpreter under {prefix}, which the "
                    f"sandbox cannot use ({problem}); make the venv from /usr/bin/python3 "
                    "(`python -m skyrl_sdk.benchmarks.harness_venv` does)"
                )
        if (
            isinstance(self.timeout_s, bool)
            or not isinstance(self.timeout_s, int | float)
            or not math.isfinite(self.timeout_s)
            or self.timeout_s <= 0
        ):
            raise CommandAgentError(
                f"agent timeout must be a positive number of seconds, got {self.timeout_s!r}"
            )
        if not isinstance(self.output_limit_bytes, int) or self.output_limit_bytes < 64:
            raise CommandAgentError(
                f"agent output limit must be an int >= 64, got {self.output_limit_bytes!r}"
            )
        items = self.env.items() if isinstance(self.env, Mapping) else self.env
        object.__setattr__(self, "env", tuple(sorted((str(k), str(v)) for k, v in items)))

    @property
    def spec(self) -> str:
        """The agent spec string (`command:CMD`)."""
        return PREFIX + self.command

    def sandbox_binds(self) -> tuple[str, ...]:
        """Host directories to bind read-only: the venv, the base interpreter's prefix when
        it lies outside the sandbox's system directories (a pyenv or /opt Python), `binds`."""
        out: list[str] = []
        if self.venv is not None:
            out.append(self.venv)
            prefix = _base_prefix(self.venv)
            if prefix is not None and not _under_system(prefix):
                out.append(prefix)
        out.extend(self.binds)
        return tuple(dict.fromkeys(out))


def _base_prefix(venv: str) -> str | None:
    """The prefix of the interpreter a venv was made from (pyvenv.cfg's `home` is its bin/)."""
    with contextlib.suppress(OSError):
        for line in Path(venv, "pyvenv.cfg").read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "home":
                home = os.path.realpath(value.strip())
                return os.path.dirname(home) if os.path.basename(home) == "bin" else home
    return None


def _unreachable(path: str) -> str | None:
    """Why the sandbox's user cannot read `path`, or None. As root, bwrap runs commands as
    uid 65534, which needs search permission on every ancestor and read on the directory."""
    if os.geteuid() != 0:
        return None
    current = Path(path)
    for part in (current, *current.parents):
        mode = part.stat().st_mode
        if not mode & stat.S_IXOTH or (part == current and not mode & stat.S_IROTH):
            return (
                f"agent bind {path!r} is not readable by the sandbox's user (uid 65534): "
                f"{part} has mode {stat.filemode(mode)}; chmod o+rx it (o+x on its parents)"
            )
    return None


def _under_system(path: str) -> bool:
    real = os.path.realpath(path)
    return any(real == d or real.startswith(d + "/") for d in _SYSTEM_DIRS)


def parse_agent(
    spec: str | None,
    *,
    venv: str | None = None,
    binds: Sequence[str] = (),
    timeout_s: float | None = None,
    memory_bytes: int | None = None,
) -> CommandAgent | None:
    """`None` for our agent loop (`loop` or nothing), a `CommandAgent` for `command:CMD`.

    The other arguments configure a command agent; given with the loop they are an error
    (they would be silently unused).
    """
    if spec is None or spec.strip() == LOOP:
        extras = {
            "--agent-venv": venv,
            "--agent-bind": list(binds) or None,
            "--agent-memory-mb": memory_bytes,
        }
        given = [name for name, value in extras.items() if value]
        if given:
            raise CommandAgentError(f"{', '.join(given)} only apply to --agent 'command:CMD'")
        return None
    if not spec.startswith(PREFIX):
        raise CommandAgentError(f"--agent must be 'loop' or 'command:CMD', got {spec!r}")
    return CommandAgent(
        spec.removeprefix(PREFIX),
        venv=venv,
        binds=tuple(binds),
        timeout_s=DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s,
        memory_bytes=memory_bytes,
    )
