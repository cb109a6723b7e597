"""What of a task's Dockerfile can be applied without building an image (bwrap backend).

The bwrap backend runs tasks on the host's root filesystem (or a configured one), so a
Dockerfile is read, not built: `WORKDIR` and `ENV` are applied, `COPY`/`ADD` of build-context
files into the working directory are applied, `RUN` steps are run in the sandbox before the
agent starts unless they need a package registry or the network, and everything else is
reported as not applied, with the reason.
"""

from __future__ import annotations

import enum
import os
import re
import shlex
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

DOCKERFILE_MAX_BYTES = 1 << 20
"""The largest Dockerfile read (as `task.TEXT_FILE_MAX_BYTES`)."""

# Commands that install packages or fetch things: a RUN using them needs a registry.
_NETWORK_WORDS = re.compile(
    r"(^|[\s;&|(`])(apt-get|apt|apk|yum|dnf|zypper|pip|pip3|pipx|uv|uvx|conda|mamba|npm|npx|"
    r"yarn|pnpm|curl|wget|cargo|gem|go get|go install|git clone|git fetch|git pull|"
    r"add-apt-repository)(\s|$)"
)


class StepKind(enum.Enum):
    """What a setup step does."""

    COPY = "copy"
    """Copy build-context files into the workspace."""
    RUN = "run"
    """Run a shell command in the sandbox before the agent starts."""


@dataclass(frozen=True)
class SetupStep:
    """One applicable Dockerfile instruction, in order."""

    kind: StepKind
    """COPY or RUN."""
    line: int
    """Line number in the Dockerfile."""
    command: str = ""
    """The shell command (RUN)."""
    sources: tuple[str, ...] = ()
    """Build-context paths (COPY), relative to environment/."""
    dest: str = ""
    """Absolute destination inside the sandbox (COPY)."""
    workdir: str = "/app"
    """WORKDIR in effect for this step."""


@dataclass(frozen=True)
class DockerfilePlan:
    """What the bwrap backend applies from a Dockerfile, and what it cannot."""

    base_image: str | None
    """The (last) FROM image; never pulled by the bwrap backend."""
    workdir: str | None
    """The last WORKDIR (None: not set)."""
    workdirs: tuple[str, ...] = ()
    """Every WORKDIR, in order (a container has all of them; the last is the cwd)."""
    env: tuple[tuple[str, str], ...] = ()
    """ENV variables, in order."""
    steps: tuple[SetupStep, ...] = ()
    """COPY and RUN steps to apply, in order."""
    not_applied: tuple[str, ...] = ()
    """One line per instruction that could not be applied, saying why."""


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, instruction text) with continuations joined and comments dropped."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf.append(stripped[:-1])
            continue
        buf.append(stripped)
        out.append((start, " ".join(p.strip() for p in buf if p.strip())))
        buf = []
    if buf:
        out.append((start, " ".join(buf)))
    return out


IMAGE_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The PATH a base image gives (`ENV PATH=/root/.cargo/bin:$PATH` extends it, not nothing)."""


def _expand(value: str, env: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return env.get(name, IMAGE_DEFAULT_PATH if name == "PATH" else "")

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", sub, value)


def _env_pairs(args: str) -> list[tuple[str, str]]:
    words = shlex.split(args)
    if words and "=" not in words[0]:  # legacy `ENV KEY value with spaces`
        return [(words[0], args.split(None, 1)[1].strip() if len(words) > 1 else "")]
    return [tuple(w.split("=", 1)) for w in words if "=" in w]  # type: ignore[misc]


def _json_or_words(args: str) -> list[str]:
    if args.startswith("["):
        import json

        try:
            value = json.loads(args)
            if isinstance(value, list):
                return [str(v) for v in value]
        except ValueError:
            pass
    return shlex.split(args)


def needs_network(command: str) -> bool:
    """True when a RUN command installs packages or downloads (it needs a registry)."""
    return bool(_NETWORK_WORDS.search(command))


def _copy_step(
    here: str, rest: str, line: int, current: str, scope: dict[str, str]
) -> SetupStep | str:
    """A COPY/ADD instruction's step, or the note saying why it is not applied. `scope`: the
    ARG and ENV values its destination may name; `current`: the WORKDIR it runs in."""
    words = [w for w in _json_or_words(rest) if not w.startswith("--")]
    flags = [w for w in shlex.split(rest) if w.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        return f"{here} {rest}: copies from another build stage or image"
    if len(words) < 2:
        return f"{here} {rest}: needs a source and a destination"
    *sources, dest = words
    if any(re.match(r"^[a-z]+://", s) for s in sources):
        return f"{here} {rest}: downloads a URL (needs the network)"
    dest = _expand(dest, scope)
    absolute = dest if dest.startswith("/") else str(PurePosixPath(current) / dest)
    if absolute.endswith("/") or dest.endswith("/") or len(sources) > 1:
        absolute = absolute.rstrip("/") + "/"
    return SetupStep(StepKind.COPY, line, sources=tuple(sources), dest=absolute, workdir=current)


def _run_step(here: str, rest: str, line: int, current: str, *, run_all: bool) -> SetupStep | str:
    """A RUN instruction's step, or the note saying why it is not run (`run_all`: a build
    sandbox runs those that need the network too)."""
    command = rest
    if command.startswith("["):
        command = shlex.join(_json_or_words(command))
    if command.startswith("--"):
        return f"{here} {rest}: RUN flags (--mount, --network) are not supported"
    if needs_network(command) and not run_all:
        return (
            f"{here} {command}: needs a package registry or the network; not run "
            "(the sandbox's root filesystem must already provide what it installs)"
        )
    return SetupStep(StepKind.RUN, line, command=command, workdir=current)


def plan_dockerfile(
    path: Path, default_workdir: str = "/app", *, run_all: bool = False
) -> DockerfilePlan:
    """Read a Dockerfile and decide what the bwrap backend can apply.

    Raises `ValueError` for a Dockerfile larger than `DOCKERFILE_MAX_BYTES` (it is never read
    whole: `load_task` refuses such a task first)."""
    with path.open("rb") as f:
        data = f.read(DOCKERFILE_MAX_BYTES + 1)
    if len(data) > DOCKERFILE_MAX_BYTES:
        raise ValueError(f"{path} is larger than {DOCKERFILE_MAX_BYTES} bytes")
    text = data.decode("utf-8", errors="replace")
    base: str | None = None
    workdir: str | None = None
    workdirs: list[str] = []
    env: dict[str, str] = {}
    args: dict[str, str] = {}
    steps: list[SetupStep] = []
    skipped: list[str] = []
    for line, instruction in _logical_lines(text):
        keyword, _, rest = instruction.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        here = f"Dockerfile:{line} {keyword}"
        current = workdir or default_workdir
        if keyword == "FROM":
            base = rest.split()[0] if rest else None
            if " AS " in rest.upper() and base is not None:
                base = rest.split()[0]
            skipped.append(
                f"{here} {base}: base image not used (no image is built; commands run on the "
                "sandbox's root filesystem)"
            )
        elif keyword == "ARG":
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip().strip('"')
        elif keyword == "WORKDIR":
            target = _expand(rest.strip('"'), {**args, **env})
            workdir = str(PurePosixPath(current) / target) if not target.startswith("/") else target
            workdir = os.path.normpath(workdir)
            workdirs.append(workdir)
        elif keyword == "ENV":
            for key, value in _env_pairs(rest):
                env[key] = _expand(value, {**args, **env})
        elif keyword in ("COPY", "ADD", "RUN"):
            made = (
                _run_step(here, rest, line, current, run_all=run_all)
                if keyword == "RUN"
                else _copy_step(here, rest, line, current, {**args, **env})
            )
            if isinstance(made, str):
                skipped.append(made)
            else:
                steps.append(made)
        elif keyword in ("CMD", "ENTRYPOINT", "EXPOSE", "LABEL", "MAINTAINER", "STOPSIGNAL"):
            continue  # no effect on a task's commands
        else:  # USER, SHELL, VOLUME, HEALTHCHECK, ONBUILD, heredocs, ...
            skipped.append(f"{here} {rest}: not supported by the bwrap backend")
    return DockerfilePlan(
        base_image=base,
        workdir=workdir,
        workdirs=tuple(workdirs),
        env=tuple(env.items()),
        steps=tuple(steps),
        not_applied=tuple(skipped),
    )


NEVER_MOUNTED = frozenset(
    {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev", "sys", "tmp"}
    | {"run"}
)
"""Top-level directories no writable directory is mounted over (the system's programs and
libraries, the sandbox's own /proc, /dev, /tmp, /run); one below them may be."""

SYSTEM_TOPS = NEVER_MOUNTED | {"var", "boot", "root", "home", "mnt", "media", "srv", "opt"}
"""Top-level directories of a system root: a writable directory below one of them is mounted
at its own path (the directory above stays the system's), never over the whole top."""


def writable_roots(
    paths: Sequence[str], existing_tops: Collection[str] = ()
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(roots, refused): the directories to mount writable so that a container's layout of
    `paths` (its WORKDIRs and the directories its COPYs and RUNs write to) exists, and the
    paths that cannot have one (a system directory itself, e.g. `/etc` for a COPY to
    `/etc/x.conf`). A root is each path's top-level directory (`/app` for `/app/sub`, so files
    copied to /app survive a nested WORKDIR), or, below a system directory or one the root
    filesystem already has (`existing_tops`), the path itself. Nested ones are merged into the
    outermost; both sorted."""
    roots: set[str] = set()
    refused: set[str] = set()
    for path in paths:
        norm = os.path.normpath(path)
        parts = PurePosixPath(norm).parts[1:]
        if not parts or (len(parts) == 1 and parts[0] in NEVER_MOUNTED):
            refused.add(norm)
            continue
        if parts[0] in ("proc", "dev", "sys"):
            refused.add(norm)
            continue
        top = parts[0]
        roots.add(norm if top in SYSTEM_TOPS or top in existing_tops else f"/{top}")
    kept: list[str] = []
    for root in sorted(roots, key=lambda r: (len(PurePosixPath(r).parts), r)):
        if not any(inside(root, k) for k in kept):
            kept.append(root)
    covered = {r for r in refused if any(inside(r, k) for k in kept)}
    return tuple(sorted(kept)), tuple(sorted(refused - covered))


def write_dirs(plan: DockerfilePlan, workdir: str) -> list[str]:
    """The directories a plan's steps write to (and its WORKDIRs): where a container has them."""
    out = [workdir, *plan.workdirs]
    for step in plan.steps:
        if step.kind is StepKind.COPY:
            dest = step.dest
            out.append(dest.rstrip("/") if dest.endswith("/") else str(PurePosixPath(dest).parent))
        else:
            out.append(step.workdir)
    return out


def inside(path: str, root: str) -> bool:
    """True when absolute posix `path` is `root` or below it."""
    p, r = PurePosixPath(path), PurePosixPath(root)
    return p == r or r in p.parents


def match_sources(context: Path, sources: Sequence[str]) -> tuple[list[Path], str | None]:
    """(the build-context paths a COPY's sources name, None), or ([], the problem) when one
    matches nothing. Globs expand as Docker expands them; nothing outside the context counts."""
    root = context.resolve()
    matched: list[Path] = []
    for source in sources:
        found = (
            sorted(context.glob(source)) if any(c in source for c in "*?[") else [context / source]
        )
        found = [p for p in found if p.exists() and p.resolve().is_relative_to(root)]
        if not found:
            return [], f"source {source!r} not found in environment/"
        matched += found
    return matched, None
