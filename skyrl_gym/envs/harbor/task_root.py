"""A task's built root: its Dockerfile's COPY and RUN steps run once, at build time, cached.

On the bwrap backend as root, a trial runs on a copy-on-write root (`sandboxes.cow_root`): the
base (the host's minimal system, or an image root given with `--rootfs`), the task's built
layer over it, and the trial's own upper layer on top (discarded with the trial). The built
layer is what a container build adds:

- **Where.** A build sandbox of the task: the same copy-on-write root with an empty upper
  layer of its own, commands as uid 0 of a user namespace that maps only uid 0 to root
  (`BwrapSandbox.build_as_root`, a few capabilities, the seccomp filter), the task's network
  setting, its memory, pids and CPU caps, and a disk cap (the layer is built on a sized tmpfs,
  then copied into the cache).
- **What.** Every COPY (from the build context, bound read-only) and every RUN, in order, with
  the Dockerfile's ENV (over `BUILD_ENV_DEFAULTS`: pip installs as in a `python:3.x` image)
  and each step's WORKDIR. A RUN that calls apt or dpkg on a base without
  a dpkg database (the host's minimal system) is not run; a RUN that fails (offline, say) is
  not fatal: both become notes naming the step and its output, and the build goes on, as the
  trial does.
- **Who owns it.** The system's directories stay root's (so the sandbox user cannot change
  the interpreters and tools the verifier uses); the workspace and the other directories the
  Dockerfile writes outside them (`/data`, `/build`, `/opt/tool`) are handed to the sandbox
  user, as the old layout had them writable.
- **Cached** in `root_cache.RootCache` (`$SKYRL_CACHE/harbor-roots`), keyed on the Dockerfile,
  its context, the base root and the network setting; locked so concurrent trials build once;
  each trial holds its layer while it runs. The notes of the build are cached with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import stat
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from skyrl_gym.envs.harbor.dockerfile import (
    NEVER_MOUNTED,
    DockerfilePlan,
    SetupStep,
    StepKind,
    inside,
    match_sources,
    writable_roots,
    write_dirs,
)
from skyrl_gym.envs.harbor.root_cache import CacheOutcome, RootCache, build_key
from skyrl_sdk.sandboxes import SandboxSpec, Workspace, chown_tree, cow_root
from skyrl_sdk.sandboxes.bwrap import _ETC_FILES, _ETC_NETWORK_FILES
from skyrl_sdk.sandboxes.spec import VERIFIER_HOST_UID

SANDBOX_UID = 65534
CONTEXT_INSIDE = "/run/skyrl-build-context"
"""Where the build context is bound (read-only) in the build sandbox."""
NOTES_FILE = "build-notes.json"
"""The build's notes, in the cached layer."""
WRITABLE_FILE = "writable.json"
"""The directories handed to the sandbox user, in the cached layer."""
BUILD_DISK_BYTES = 4 << 30
"""The most a build may write (its staging tmpfs; `$SKYRL_HARBOR_BUILD_MAX_BYTES`)."""
BUILD_DISK_ENV = "SKYRL_HARBOR_BUILD_MAX_BYTES"
BUILD_ENV_DEFAULTS: tuple[tuple[str, str], ...] = (("PIP_BREAK_SYSTEM_PACKAGES", "1"),)
"""Set in every RUN step unless the Dockerfile's ENV sets them. A `python:3.x` image's pip has
no EXTERNALLY-MANAGED marker, so a plain `RUN pip install x` works there; a Debian host's pip
has one (PEP 668) and refuses. What a build's pip installs lands in the task's own layer, never
on the host, so the marker protects nothing here."""
LAYER_FORMAT = "5"
"""Part of every key: bumped when what a build makes changes, so no older layer is reused."""


def build_disk_bytes() -> int:
    """The build's disk cap: `$SKYRL_HARBOR_BUILD_MAX_BYTES`, else `BUILD_DISK_BYTES`."""
    raw = os.environ.get(BUILD_DISK_ENV, "").strip()
    try:
        return int(raw) if raw else BUILD_DISK_BYTES
    except ValueError:
        raise ValueError(f"${BUILD_DISK_ENV} must be a number of bytes, got {raw!r}") from None


_APT = re.compile(r"(^|[\s;&|(`])(apt-get|apt|dpkg|add-apt-repository|apt-key)(\s|$)")


@dataclass(frozen=True)
class BuiltRoot:
    """A task's built layer, held for one trial."""

    key: str
    """Its cache key."""
    layer: Path
    """The layer's directory in the cache (`root/`, `sys/<name>/`)."""
    outcome: CacheOutcome
    """Built now or reused."""
    notes: tuple[str, ...]
    """What the build could not apply (cached with the layer)."""
    writable: tuple[str, ...]
    """The inside directories the sandbox user owns (the workspace's top first)."""
    build_s: float
    """Seconds spent getting it (building, or finding it)."""


def base_for(rootfs: str | None) -> cow_root.HostBase | None:
    """The host base (None with an image root)."""
    if rootfs is not None:
        return None
    return cow_root.host_base(RootCache.default().directory, _ETC_FILES + _ETC_NETWORK_FILES)


def _has_dpkg(rootfs: str | None) -> bool:
    return rootfs is not None and os.path.isfile(os.path.join(rootfs, "var/lib/dpkg/status"))


def _copy_command(context: Path, step: SetupStep) -> tuple[str | None, str | None]:
    """(shell command, problem) for one COPY, run inside the build sandbox as Docker does it:
    a directory's contents into the destination, files into a destination directory (a
    trailing `/` or several sources) or as the destination file. Owned by root."""
    matched, problem = match_sources(context, step.sources)
    if problem:
        return None, problem
    root = context.resolve()
    dest = os.path.normpath(step.dest.rstrip("/") or "/")
    as_dir = step.dest.endswith("/") or len(matched) > 1
    cp = "cp -R"  # POSIX (busybox too); owned by root as Docker's COPY makes it, links kept
    q = shlex.quote
    parts = []
    for src in matched:
        inside_src = f"{CONTEXT_INSIDE}/{src.resolve().relative_to(root)}"
        if src.is_dir():
            parts.append(f"mkdir -p {q(dest)} && {cp} {q(inside_src)}/. {q(dest)}/")
        elif as_dir:
            parts.append(f"mkdir -p {q(dest)} && {cp} {q(inside_src)} {q(dest)}/")
        else:
            parent = str(PurePosixPath(dest).parent)
            parts.append(
                f"if [ -d {q(dest)} ]; then {cp} {q(inside_src)} {q(dest)}/; "
                f"else mkdir -p {q(parent)} && {cp} {q(inside_src)} {q(dest)}; fi"
            )
    return " && ".join(parts), None


def writable_dirs(plan: DockerfilePlan, workdir: str, mount_dir: str) -> tuple[str, ...]:
    """The workspace's top and the other directories the Dockerfile writes outside the
    system's own (`/data`, `/build`, `/opt/tool`): handed to the sandbox user."""
    roots, _ = writable_roots(write_dirs(plan, workdir))
    out = [mount_dir]
    for root in roots:
        top = PurePosixPath(root).parts[1:2]
        if not top or top[0] in NEVER_MOUNTED or inside(root, mount_dir) or inside(mount_dir, root):
            continue
        out.append(root)
    return tuple(out)


async def _run_steps(
    sandbox: Any,
    plan: DockerfilePlan,
    context: Path,
    rootfs: str | None,
    deadline: float,
    notes: list[str],
) -> None:
    """Run the plan's COPY and RUN steps in order in the build sandbox; what could not be
    applied becomes a note. Raises `TimeoutError` past the deadline."""
    env = {**dict(BUILD_ENV_DEFAULTS), **dict(plan.env)}  # the Dockerfile's ENV wins
    for step in plan.steps:
        where = f"Dockerfile:{step.line} {step.kind.value.upper()}"
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(where)
        if step.kind is StepKind.COPY:
            command, problem = _copy_command(context, step)
            if problem or command is None:
                notes.append(f"{where}: {problem}")
                continue
        else:
            command = step.command
            if _APT.search(command) and not _has_dpkg(rootfs):
                notes.append(
                    f"{where} {command}: not run: the root has no dpkg database (the "
                    "host's minimal system); give a Debian root with --rootfs"
                )
                continue
        await sandbox.exec(["mkdir", "-p", step.workdir], timeout=30)
        ran = await sandbox.exec(
            ["/bin/sh", "-c", command], timeout=left, cwd=step.workdir, env=env
        )
        if ran.timed_out:
            raise TimeoutError(f"{where} {command!r}")
        if not ran.ok:
            text = f"{where} {command}" if step.kind is StepKind.RUN else where
            notes.append(
                f"{text}: failed at build (exit {ran.exit_code}): {ran.output.strip()[-300:]}"
            )


def _hand_over(upper: Path, writable: Sequence[str], notes: list[str]) -> list[str]:
    """Give the sandbox user the directories it owns in a container (those of `writable`
    whose path has no link the build made: a RUN that made /opt a link to a host path must not
    get that host path created or handed over), clear set-id bits; the directories kept."""
    root_layer = upper / cow_root.ROOT_LAYER
    kept = []
    for path in writable:
        if not cow_root.no_links_below(root_layer, path):
            notes.append(f"{path}: a link or file made by the build; not handed to the agent")
            continue
        host = root_layer / path.lstrip("/")
        host.mkdir(parents=True, exist_ok=True)
        chown_tree(host, SANDBOX_UID)
        kept.append(path)
    _strip_setid(upper)
    return kept


async def _build(
    staging: Path,
    *,
    plan: DockerfilePlan,
    context: Path,
    writable: Sequence[str],
    rootfs: str | None,
    spec_for: Callable[[str, int], SandboxSpec],
    open_sandbox: Callable[[SandboxSpec, cow_root.CowRoot, Mapping[str, Path]], object],
    deadline: float,
) -> None:
    """Build the task's layer into `staging` (see the module docstring)."""
    notes: list[str] = []
    disk = build_disk_bytes()
    with Workspace.create("skyrl-harbor-build-", disk_bytes=disk) as scratch:
        upper = scratch.path / "layer"
        cow = cow_root.layout(
            upper=upper,
            work=scratch.path / "work",
            mountpoint=scratch.path / "merged",
            layer=None,
            host=base_for(rootfs),
            rootfs=rootfs,
        )
        # Before the steps: a RUN of a `FROM python:*` Dockerfile calls `python` too.
        notes += _python_image_commands(cow, plan.base_image, rootfs)
        first = next((s.workdir for s in plan.steps), writable[0])
        spec = spec_for(first, disk)
        sandbox = await open_sandbox(spec, cow, {CONTEXT_INSIDE: context.resolve()})  # type: ignore[misc]
        try:
            await _run_steps(sandbox, plan, context, rootfs, deadline, notes)
        finally:
            await sandbox.close()  # type: ignore[attr-defined]
        for path in _give_verifier(cow):
            notes.append(f"{path}: a link made by the build; not handed to the verifier")
        writable = _hand_over(upper, writable, notes)
        # Off the capped tmpfs into the cache; -a keeps overlayfs's whiteouts and opaque marks.
        done = subprocess.run(
            ["cp", "-a", f"{upper}/.", str(staging)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise OSError(f"cannot store the built root: {done.stderr.strip()[-300:]}")
    (staging / NOTES_FILE).write_text(json.dumps(notes))
    staging.chmod(0o700)  # the layer is root's alone on the host
    (staging / WRITABLE_FILE).write_text(json.dumps(list(writable)))


_PYTHON_IMAGE = re.compile(r"^(docker\.io/)?(library/)?python:")


def _python_image_commands(
    cow: cow_root.CowRoot, base_image: str | None, rootfs: str | None
) -> list[str]:
    """On the host's minimal system, a `FROM python:*` task gets the commands that image has
    beside `python3` (`python`, `pip`) as links to the root's own, where the root has neither
    (Debian's python3 has no `python`); returns the note saying so. Terminal-Bench 2's test.sh
    files often run `python -m pytest`."""
    if rootfs is not None or base_image is None or not _PYTHON_IMAGE.match(base_image):
        return []
    usr_bin, local_bin = cow.lists("/usr/bin"), cow.lists("/usr/local/bin")
    wanted = [
        (name, f"/usr/bin/{target}")
        for name, target in (("python", "python3"), ("pip", "pip3"))
        if name not in usr_bin and name not in local_bin and target in usr_bin
    ]
    host = cow.copy_up_dir("/usr/local/bin") if wanted else None
    if host is None:
        return []
    for name, target in wanted:
        os.symlink(target, host / name)  # a link inside the root, never followed on the host
    made = ", ".join(f"{name} -> {target}" for name, target in wanted)
    return [
        f"Dockerfile FROM {base_image}: the image's commands given as the root's own "
        f"(/usr/local/bin/{made}; the host's python3, not the image's version)"
    ]


def verifier_install_dirs(cow: cow_root.CowRoot) -> list[str]:
    """Where a root's pip installs as root, where the root has them: `/usr/local/bin`, and for
    each `python3.X` of the root `/usr/local/lib/python3.X/site-packages` (python.org builds,
    a `python:3.x` image) and `.../dist-packages` (Debian's pip)."""
    versions = {
        name
        for lib in ("/usr/lib", "/usr/local/lib")
        for name in cow.lists(lib)
        if re.fullmatch(r"python3\.\d+", name)
    }
    out = ["/usr/local/bin"] if "bin" in cow.lists("/usr/local") else []
    for version in sorted(versions):
        have = cow.lists(f"/usr/local/lib/{version}")
        out += [
            f"/usr/local/lib/{version}/{d}" for d in ("site-packages", "dist-packages") if d in have
        ]
    return out


def _give_verifier(cow: cow_root.CowRoot) -> list[str]:
    """Hand the root's pip install directories (`verifier_install_dirs`) to the verifier's host
    uid in the built layer; return those refused (a link on the way, never followed).

    In a container test.sh runs as root and often pip-installs its tools into the system
    (Terminal-Bench 2: `pip install pytest ... --break-system-packages`). Here the verifier's
    uid 0 is `VERIFIER_HOST_UID`, not the host's root, so the system's directories would refuse
    it. Owned by that uid, they take its installs, which land in the trial's own upper layer
    (discarded with it). The agent, another uid, still cannot write there, so what test.sh
    imports and runs from them is not the agent's; what is already in them stays root's."""
    refused = []
    for path in verifier_install_dirs(cow):
        host = cow.copy_up_dir(path)
        if host is None:
            refused.append(path)
            continue
        os.chown(host, VERIFIER_HOST_UID, -1, follow_symlinks=False)
    return refused


def _strip_setid(tree: Path) -> None:
    """Clear set-uid and set-gid bits in a built layer: no program a build made can raise
    privileges on the host (a cached layer lies on the host's disk), and inside a sandbox they
    would not anyway (no-new-privs; root is not mapped)."""
    for base, dirs, files in os.walk(tree):
        for name in dirs + files:
            path = os.path.join(base, name)
            info = os.lstat(path)
            if not stat.S_ISLNK(info.st_mode) and info.st_mode & (stat.S_ISUID | stat.S_ISGID):
                os.chmod(path, stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))


def build_task_root(
    *,
    dockerfile: Path | None,
    context: Path,
    plan: DockerfilePlan,
    workdir: str,
    mount_dir: str,
    rootfs: str | None,
    network: bool,
    spec_for: Callable[[str, int], SandboxSpec],
    open_sandbox: Callable[[SandboxSpec, cow_root.CowRoot, Mapping[str, Path]], object],
    build_timeout_s: float,
    cache: RootCache | None = None,
) -> tuple[BuiltRoot, RootCache]:
    """Get (build once, or reuse) the task's layer; blocking (call it in a thread). The caller
    then holds it (`RootCache.hold`) for the trial. Raises `TimeoutError` past the build
    timeout and `OSError` when the layer cannot be stored."""
    cache = cache or RootCache.default()
    started = time.monotonic()
    writable = writable_dirs(plan, workdir, mount_dir)
    # The Dockerfile, its context and the base root (`build_key`), the network the RUN steps
    # had, and the directories handed to the sandbox user.
    base = build_key(dockerfile, context, rootfs) if dockerfile is not None else "none"
    stable = _stable((LAYER_FORMAT, str(VERIFIER_HOST_UID), *writable))
    key = f"{base[:24]}-{'net' if network else 'offline'}-{stable}"

    def build(staging: Path) -> None:
        asyncio.run(
            _build(
                staging,
                plan=plan,
                context=context,
                writable=writable,
                rootfs=rootfs,
                spec_for=spec_for,
                open_sandbox=open_sandbox,
                deadline=started + build_timeout_s,
            )
        )

    got = cache.get(key, build)
    notes = tuple(json.loads((got.path / NOTES_FILE).read_text()))
    kept = tuple(json.loads((got.path / WRITABLE_FILE).read_text()))
    return BuiltRoot(key, got.path, got.outcome, notes, kept, time.monotonic() - started), cache


def _stable(values: Sequence[str]) -> str:
    import hashlib

    return hashlib.sha256("\0".join(values).encode()).hexdigest()[:8]
