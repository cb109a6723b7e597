"""Agent harnesses in virtualenvs (PyPI) or npm prefixes of their own, for command-agent tests and runs.

    python -m skyrl_sdk.benchmarks.harness_venv            # build every harness below
    python -m skyrl_sdk.benchmarks.harness_venv openai-agents codex

A harness (mini-swe-agent, the OpenAI Agents SDK) is never a dependency of ours: it lives in
`.venvs/harness-<name>` (gitignored), installed from PyPI with pip, and runs inside an
episode's sandbox with that venv bound read-only (`CommandAgent.venv`). The venv is made
from the system's `/usr/bin/python3` when there is one, so the sandbox's minimal system
already holds its base interpreter and only the venv itself needs binding.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / ".venvs"
SYSTEM_PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class Harness:
    """One harness and what to install for it."""

    name: str
    """Short name; the venv is `.venvs/harness-<name>`."""
    requirements: tuple[str, ...]
    """pip requirement strings (pinned: the tests check exact request shapes)."""
    probe: str
    """Python that must run in the venv once it is ready (an import)."""


HARNESSES: dict[str, Harness] = {
    h.name: h
    for h in (
        Harness("mini-swe-agent", ("mini-swe-agent==2.4.6",), "import minisweagent"),
        Harness("openai-agents", ("openai-agents==0.24.0",), "import agents, openai"),
        Harness("anthropic", ("anthropic==2.15.0",), "import anthropic"),
    )
}


@dataclass(frozen=True)
class NpmHarness:
    """One harness CLI published on npm, installed into a prefix of its own."""

    name: str
    """Short name; the prefix is `.venvs/npm-<name>`."""
    package: str
    """npm package spec, pinned (`@openai/codex@0.171.0`): the tests check exact request shapes."""
    binary: str
    """The command the package installs under `node_modules/.bin`."""


NPM_HARNESSES: dict[str, NpmHarness] = {
    h.name: h
    for h in (
        NpmHarness("codex", "@openai/codex@0.171.0", "codex"),
        NpmHarness("claude-code", "@anthropic-ai/claude-code@2.1.332", "claude"),
    )
}


class HarnessUnavailable(RuntimeError):
    """The harness's venv is missing (or could not be built)."""


def venv_dir(name: str) -> Path:
    """Where harness `name`'s virtualenv lives."""
    return VENVS / f"harness-{name}"


def ready(name: str) -> Path | None:
    """The venv of harness `name` when it is built and its probe imports, else None."""
    home = venv_dir(name)
    marker = home / ".ready"
    if not marker.is_file() or not (home / "bin" / "python").exists():
        return None
    if marker.read_text().strip() != " ".join(HARNESSES[name].requirements):
        return None  # built for other pins
    return home


def build(name: str, *, quiet: bool = True) -> Path:
    """Create `.venvs/harness-<name>` and install the harness (no-op when already ready)."""
    harness = HARNESSES[name]
    found = ready(name)
    if found is not None:
        return found
    home = venv_dir(name)
    base = SYSTEM_PYTHON if os.access(SYSTEM_PYTHON, os.X_OK) else sys.executable
    steps = [
        [base, "-m", "venv", "--clear", str(home)],
        [
            str(home / "bin" / "python"),
            "-m",
            "pip",
            "install",
            *(["-q"] if quiet else []),
            "--disable-pip-version-check",
            *harness.requirements,
        ],
        [str(home / "bin" / "python"), "-c", harness.probe],
    ]
    for cmd in steps:
        # Outside the checkout: `python -c` puts the cwd on sys.path, and our top-level
        # `agents/` folder would shadow openai-agents' `agents` package.
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=1800, cwd=tempfile.gettempdir()
        )
        if proc.returncode != 0:
            raise HarnessUnavailable(
                f"building {home} failed at `{' '.join(cmd[:4])} ...`:\n{proc.stderr[-2000:]}"
            )
    (home / ".ready").write_text(" ".join(harness.requirements))
    return home


def npm_dir(name: str) -> Path:
    """Where npm harness `name`'s prefix lives."""
    return VENVS / f"npm-{name}"


def npm_ready(name: str) -> Path | None:
    """The CLI of npm harness `name` when its prefix is built for today's pin, else None."""
    harness = NPM_HARNESSES[name]
    home = npm_dir(name)
    binary = home / "node_modules" / ".bin" / harness.binary
    marker = home / ".ready"
    if not marker.is_file() or marker.read_text().strip() != harness.package:
        return None
    return binary if binary.exists() else None


def build_npm(name: str) -> Path:
    """Install npm harness `name` into `.venvs/npm-<name>` (no-op when ready); its CLI's path.

    Install scripts run: some CLIs (Claude Code) copy their platform's native binary into
    place in a postinstall step (from an npm optional dependency, not the network)."""
    harness = NPM_HARNESSES[name]
    found = npm_ready(name)
    if found is not None:
        return found
    home = npm_dir(name)
    home.mkdir(parents=True, exist_ok=True)
    cmd = ["npm", "install", "--prefix", str(home), "--no-fund", "--no-audit", harness.package]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=1800, cwd=tempfile.gettempdir()
        )
    except FileNotFoundError as e:
        raise HarnessUnavailable(f"building {home} needs npm (apt-get install npm): {e}") from e
    if proc.returncode != 0:
        raise HarnessUnavailable(f"`{' '.join(cmd)}` failed:\n{proc.stderr[-2000:]}")
    (home / ".ready").write_text(harness.package)
    found = npm_ready(name)
    if found is None:
        raise HarnessUnavailable(f"{harness.package} installed no `{harness.binary}` in {home}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    known = [*HARNESSES, *NPM_HARNESSES]
    parser.add_argument("names", nargs="*", help=f"harnesses (default: all of {known})")
    args = parser.parse_args(argv)
    names = args.names or known
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown harness(es) {unknown}; choose from {known}")
    for name in names:
        try:
            print(f"{name}: {build(name) if name in HARNESSES else build_npm(name)}")
        except (HarnessUnavailable, OSError, subprocess.TimeoutExpired) as e:
            print(f"{name}: error: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
