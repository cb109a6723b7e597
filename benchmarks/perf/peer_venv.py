"""Peer packages installed in their own virtualenvs, for same-run baseline measurements.

A peer (e.g. PyPI `skyrl-gym`) must never share our environment: its pins could change what we
measure. `peer_python("skyrl-gym")` creates `.venvs/<name>` once and returns its interpreter.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENVS = ROOT / ".venvs"


class PeerUnavailable(RuntimeError):
    """The peer package could not be installed (no registry access, build failure)."""


def peer_python(package: str, *, extra_packages: tuple[str, ...] = ()) -> Path:
    """The interpreter of a virtualenv holding `package` (installed on first use)."""
    home = VENVS / package.replace("==", "-")
    python = home / "bin" / "python"
    marker = home / ".ready"
    if not marker.exists():
        if not python.exists():
            venv.EnvBuilder(with_pip=True, clear=True).create(home)
        cmd = [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            package,
            *extra_packages,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise PeerUnavailable(f"pip install {package} failed:\n{proc.stderr[-2000:]}")
        marker.write_text(package)
    return python


def run_in_peer(package: str, script: str, *args: str, timeout: float = 600) -> dict:
    """Run `script` (Python source) with the peer's interpreter; it must print one JSON line last."""
    python = peer_python(package)
    # Run outside the repo: `python -c` puts the cwd on sys.path, and a peer may share an
    # import name with one of our packages (PyPI skyrl-gym is `import skyrl_gym`, like ours).
    with tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.run(
            [str(python), "-c", script, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
        )
    if proc.returncode != 0:
        raise PeerUnavailable(f"peer script failed ({package}):\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
