"""Resource caps through cgroup v1 files (`memory`, `pids`, `cpu`).

The project machines have cgroup v1 controllers only (the v2 hierarchy exists but has no
controllers), so the v1 files are written directly. A sandbox's cgroups are created *below the
caller's own cgroup* in each hierarchy, so the caller's supervisor still accounts for them.
Where a controller is missing or not writable (not root), the caller falls back to rlimits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from skyrl_sdk.sandboxes.spec import SandboxSpec

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "cpu")
CFS_PERIOD_US = 100_000


@cache
def controller_bases() -> dict[str, Path]:
    """The writable directory of this process's cgroup in each available v1 controller."""
    bases: dict[str, Path] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return bases
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(","):
            if controller not in CONTROLLERS:
                continue
            base = CGROUP_ROOT / controller / parts[2].lstrip("/")
            if (base / "cgroup.procs").is_file() and os.access(base, os.W_OK):
                bases[controller] = base
    return bases


@dataclass(frozen=True)
class CgroupSet:
    """The cgroups of one sandbox, one per controller that could be used."""

    paths: dict[str, Path]
    """Controller name -> the sandbox's cgroup directory."""

    @classmethod
    def create(cls, name: str, spec: SandboxSpec) -> CgroupSet:
        """Create the cgroups and write the spec's limits. Controllers not needed are skipped."""
        wanted = {
            "memory": spec.memory_bytes is not None,
            "pids": spec.pids is not None,
            "cpu": spec.cpus is not None,
        }
        bases = controller_bases()
        # The pids hierarchy is made even without a pids cap: its cgroup.procs is how close()
        # and the reaper find every process of the sandbox.
        paths = {
            c: bases[c] / name for c in CONTROLLERS if c in bases and (wanted[c] or c == "pids")
        }
        created = cls({})
        try:
            for controller, path in paths.items():
                path.mkdir()
                created.paths[controller] = path
            if "memory" in paths and spec.memory_bytes is not None:
                _write(paths["memory"] / "memory.limit_in_bytes", spec.memory_bytes)
            if "pids" in paths and spec.pids is not None:
                _write(paths["pids"] / "pids.max", spec.pids)
            if "cpu" in paths and spec.cpus is not None:
                _write(paths["cpu"] / "cpu.cfs_period_us", CFS_PERIOD_US)
                _write(paths["cpu"] / "cpu.cfs_quota_us", max(1000, int(spec.cpus * CFS_PERIOD_US)))
        except OSError:
            created.remove()
            raise
        return created

    def has(self, controller: str) -> bool:
        return controller in self.paths

    def procs_files(self) -> list[Path]:
        return [p / "cgroup.procs" for p in self.paths.values()]

    def pids_inside(self) -> set[int]:
        """Every process currently in the sandbox's cgroups."""
        found: set[int] = set()
        for procs in self.procs_files():
            try:
                found.update(int(x) for x in procs.read_text().split())
            except (OSError, ValueError):
                continue
        return found

    def oom_kills(self) -> int:
        """How many processes the memory cgroup's OOM killer has killed so far."""
        path = self.paths.get("memory")
        if path is None:
            return 0
        try:
            for line in (path / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def kill_all(self, deadline_s: float = 2.0) -> bool:
        """SIGKILL every process in the cgroups until none is left; True if they are all gone."""
        end = time.monotonic() + deadline_s
        while True:
            pids = self.pids_inside()
            if not pids:
                return True
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > end:
                return False
            time.sleep(0.002)

    def remove(self, deadline_s: float = 2.0) -> None:
        """Remove the cgroup directories (they must be empty; retried while processes exit)."""
        end = time.monotonic() + deadline_s
        for path in list(self.paths.values()):
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > end:
                        break
                    self.kill_all(0.1)
                    time.sleep(0.005)


def _write(path: Path, value: int) -> None:
    with open(path, "w") as f:
        f.write(str(value))
