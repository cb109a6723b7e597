"""Write generated tasks as Harbor task folders (schema 1.4), and name the splits.

    <out>/<family>-s<seed>/
        task.toml            schema 1.4, [metadata] family / seed / difficulty / category
        instruction.md
        environment/Dockerfile   FROM debian:bookworm-slim, WORKDIR /app, COPY files/ /app/,
                                 RUN chmod for non-default modes
        environment/files/...    the starting files of /app
        tests/test.sh        the verifier (`verifier.render_test_sh`)
        solution/solve.sh    the reference solution

A split is a family list plus a seed range: `SPLITS` fixes `train` and `heldout` so that
they never share a (family, seed) pair, hence never an instance.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from skyrl_gym.envs.terminal_gen.families import FAMILIES, HELDOUT_SEEDS, TaskSpec, make_spec
from skyrl_gym.envs.terminal_gen.verifier import render_solve_sh, render_test_sh

BASE_IMAGE = "debian:bookworm-slim"
"""The Dockerfile's base image (the bwrap backend reads the Dockerfile, it does not pull)."""


@dataclass(frozen=True)
class Split:
    """A named seed range; with a family list it makes a split."""

    name: str
    """`train` or `heldout`."""
    start: int
    """First seed."""
    stop: int
    """One past the last seed."""

    def seeds(self, n: int, offset: int = 0) -> range:
        """The first `n` seeds of the split (after `offset`)."""
        if n < 0 or offset < 0 or self.start + offset + n > self.stop:
            raise ValueError(f"split {self.name!r} has {self.stop - self.start} seeds per family")
        return range(self.start + offset, self.start + offset + n)


SPLITS = {
    "train": Split("train", 0, HELDOUT_SEEDS),
    "heldout": Split("heldout", HELDOUT_SEEDS, 2 * HELDOUT_SEEDS),
}
"""Disjoint seed ranges whose instances are disjoint too: `make_spec` gives a seed only
instances whose content hash belongs to its range (`families.is_heldout_instance`)."""


def resolve_families(families: str | Sequence[str] | None) -> list[str]:
    """A family list from names (a comma-separated string is split); None means all."""
    if families is None:
        return list(FAMILIES)
    names = families.split(",") if isinstance(families, str) else list(families)
    names = [n.strip() for n in names if n.strip()]
    unknown = [n for n in names if n not in FAMILIES]
    if unknown or not names:
        raise ValueError(
            f"unknown families {', '.join(unknown) or '(none given)'}; choose from "
            f"{', '.join(FAMILIES)}"
        )
    return names


def plan(n: int, seed: int, families: Sequence[str]) -> list[TaskSpec]:
    """`n` tasks, families taken in turn, family `f` getting seeds `seed, seed + 1, ...`."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [make_spec(families[i % len(families)], seed + i // len(families)) for i in range(n)]


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_task_toml(spec: TaskSpec) -> str:
    """task.toml (schema 1.4) for `spec`."""
    return (
        'schema_version = "1.4"\n'
        'source = "skyrl terminal gen"\n\n'
        "[task]\n"
        f"name = {_toml_str('skyrl-terminal-gen/' + spec.task_id)}\n\n"
        "[metadata]\n"
        f"family = {_toml_str(spec.family)}\n"
        f"seed = {spec.seed}\n"
        f"difficulty = {spec.difficulty}\n"
        f"category = {_toml_str(spec.category.value)}\n"
        f"runs_agent_code = {'true' if spec.runs_agent_code else 'false'}\n\n"
        "[agent]\ntimeout_sec = 300.0\n\n"
        "[verifier]\ntimeout_sec = 60.0\n"
        "# Our extension: the reward counts only if test.sh exited 0 and nothing it\n"
        "# started outlived its parent.\n"
        "require_exit_zero = true\n\n"
        "[environment]\n"
        "build_timeout_sec = 60.0\n"
        "cpus = 1\n"
        "memory_mb = 512\n"
        "storage_mb = 64\n"
        'network_mode = "no-network"\n'
    )


def render_dockerfile(spec: TaskSpec) -> str:
    """environment/Dockerfile for `spec`."""
    lines = [f"FROM {BASE_IMAGE}", "WORKDIR /app"]
    if spec.files:
        lines.append("COPY files/ /app/")
    if spec.modes:
        chmods = " && ".join(f"chmod {mode:o} {path}" for path, mode in sorted(spec.modes.items()))
        lines.append(f"RUN {chmods}")
    return "\n".join(lines) + "\n"


def write_task(spec: TaskSpec, out: str | os.PathLike[str]) -> Path:
    """Write `spec` as `<out>/<task_id>/` (replacing any folder of that name)."""
    root = Path(out) / spec.task_id
    if root.exists():
        shutil.rmtree(root)
    for sub in ("environment", "tests", "solution"):
        (root / sub).mkdir(parents=True)
    (root / "task.toml").write_text(render_task_toml(spec))
    (root / "instruction.md").write_text(spec.instruction + "\n")
    (root / "environment" / "Dockerfile").write_text(render_dockerfile(spec))
    for rel, data in spec.files.items():
        path = root / "environment" / "files" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o644)
    test = root / "tests" / "test.sh"
    test.write_text(render_test_sh(spec))
    solve = root / "solution" / "solve.sh"
    solve.write_text(render_solve_sh(spec))
    for script in (test, solve):
        script.chmod(0o755)
    return root


def write_tasks(specs: Iterable[TaskSpec], out: str | os.PathLike[str]) -> list[Path]:
    """Write every spec under `out`; returns the task folders."""
    Path(out).mkdir(parents=True, exist_ok=True)
    return [write_task(spec, out) for spec in specs]
