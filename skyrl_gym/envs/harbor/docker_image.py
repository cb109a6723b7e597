"""The image a Harbor trial runs in on the docker backend.

`task_image` decides, in this order:

1. `[environment].docker_image` (a prebuilt image, Terminal-Bench 2's norm) when the engine
   has it;
2. else, with `pull=True` (`skyrl harbor run --pull`, `JobConfig.pull`), that image pulled
   from its registry, bounded by `pull_timeout_s` (the task's `build_timeout_sec`), so an
   unreachable registry fails in seconds rather than hanging the trial;
3. else `environment/Dockerfile` built on the local engine, with a note saying why the
   named image was not used. The Dockerfile's `FROM` images must be on the engine; with
   `pull=True` a missing one is pulled first (same bound), else the error names it;
4. else a `TaskEnvironmentError` (an environment-stage error of the trial) naming the image
   and what to do: build or import it on the engine, or `--pull` where a registry is
   reachable.

Nothing is ever pulled without `pull=True`: the default is an offline machine, and a pull
that silently reached a registry would make a run depend on the network.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from skyrl_gym.envs.harbor.dockerfile import (
    _logical_lines,
    inside,
    plan_dockerfile,
    writable_roots,
    write_dirs,
)
from skyrl_gym.envs.harbor.errors import TaskEnvironmentError
from skyrl_gym.envs.harbor.task import HarborTask

__all__ = [
    "DockerLayout",
    "PullError",
    "base_images",
    "docker_layout",
    "ensure_image",
    "missing_image_message",
    "task_image",
]

_DOCKERFILE_MAX_BYTES = 1 << 20
"""A Dockerfile larger than this is not read for its FROM lines (load_task refuses it)."""


_READ_ONLY_TOPS = frozenset({"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"})
"""Top-level directories of the image that stay read-only (its programs and libraries): a
COPY below them stays the image's. Made writable, the verifier's PATH would have to drop
them (agent-writable), and test.sh would lose the image's pytest in /usr/local/bin."""

_HARBOR_TOPS = frozenset({"tmp", "logs", "tests", "solution", "run", "proc", "dev", "sys"})
"""Where the docker sandbox and the runtime mount their own directories."""


@dataclass(frozen=True)
class DockerLayout:
    """Where a docker trial's writable directories go, as a container of the task's
    Dockerfile would have them writable (the bwrap backend's layout)."""

    mount_dir: str
    """Where the workspace is mounted: the working directory, or the top of it that the
    Dockerfile wrote to (`/app` for `WORKDIR /app`, `COPY x /app/`, `WORKDIR /app/sub`)."""
    roots: tuple[str, ...] = ()
    """The other directories the Dockerfile's COPYs and RUNs write to (`/data`,
    `/protected`), each its own writable directory seeded from the image."""
    notes: tuple[str, ...] = ()
    """What stays read-only, one line each."""


def docker_layout(dockerfile: Path | None, workdir: str) -> DockerLayout:
    """The layout of a trial whose working directory is `workdir` (see `DockerLayout`);
    without a Dockerfile (a prebuilt `docker_image`) the workspace is the working directory."""
    if dockerfile is None:
        return DockerLayout(workdir)
    plan = plan_dockerfile(dockerfile, workdir)
    roots, _ = writable_roots(write_dirs(plan, workdir))
    mount_dir = next((r for r in roots if inside(workdir, r)), workdir)
    if PurePosixPath(mount_dir).parts[1:2] and PurePosixPath(mount_dir).parts[1] in (
        _READ_ONLY_TOPS | _HARBOR_TOPS
    ):
        mount_dir = workdir
    others: list[str] = []
    notes: list[str] = []
    for root in roots:
        if inside(root, mount_dir) or inside(mount_dir, root):
            continue
        top = PurePosixPath(root).parts[1]
        if top in _HARBOR_TOPS:
            continue  # the sandbox's own (a fresh /tmp per phase)
        if top in _READ_ONLY_TOPS:
            notes.append(
                f"Dockerfile writes to {root}: below the image's read-only /{top}; the agent "
                "cannot write there (the image's files are there)"
            )
            continue
        others.append(root)
    return DockerLayout(mount_dir, tuple(others), tuple(notes))


class PullError(RuntimeError):
    """A pull did not give the image (unreachable registry, unknown image, past its bound)."""


def missing_image_message(image: str, *, pull: bool, why: str = "") -> str:
    """The one-line error for an image that is not on the engine."""
    if pull:
        return (
            f"docker image {image!r} is not on the engine and the pull failed ({why}); build "
            f"or import it there (docker build -t {image} / docker load / docker import), or "
            "check that its registry is reachable from the engine"
        )
    return (
        f"docker image {image!r} is not on the engine; build or import it there (docker build "
        f"-t {image} / docker load / docker import), or pass --pull (JobConfig.pull) where a "
        "registry is reachable"
    )


def _has(client: Any, image: str) -> bool:
    import docker.errors

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return False
    return True


def _pull(client: Any, image: str, timeout_s: float) -> None:
    """Pull `image`, giving up after `timeout_s` (raises `PullError` saying why)."""
    import json

    import docker.auth
    import docker.errors
    import docker.utils
    import requests

    repo, tag = docker.utils.parse_repository_tag(image)
    registry, _ = docker.auth.resolve_repository_name(repo)
    api = client.api
    headers = {}
    if header := docker.auth.get_config_header(api, registry):  # `docker login` credentials
        headers["X-Registry-Auth"] = header
    deadline = time.monotonic() + timeout_s
    try:
        # The SDK's own `pull` waits with no socket timeout (the engine answers a pull from a
        # registry that accepts and never replies only after minutes): this request has one,
        # so no read waits past the bound, and the events are checked against it.
        response = api._post(
            api._url("/images/create"),
            params={"fromImage": repo, "tag": tag or "latest"},
            headers=headers,
            stream=True,
            timeout=max(1.0, timeout_s),
        )
        api._raise_for_status(response)
        for line in response.iter_lines():
            if time.monotonic() > deadline:
                response.close()
                raise PullError(f"still pulling after {timeout_s:g}s")
            if not line:
                continue
            event = json.loads(line)
            if "error" in event:
                raise PullError(str(event["error"])[:300])
    except docker.errors.APIError as e:
        raise PullError(str(e.explanation or e)[:300]) from None
    except requests.exceptions.RequestException as e:
        what = "no answer" if isinstance(e, requests.exceptions.Timeout) else type(e).__name__
        raise PullError(f"{what} within {timeout_s:g}s") from None
    except ValueError as e:  # not the engine's JSON
        raise PullError(f"unreadable pull progress: {e}") from None
    if not _has(client, image):
        raise PullError("the engine reported no image after the pull")


def ensure_image(client: Any, image: str, *, pull: bool, timeout_s: float) -> str | None:
    """Make sure `image` is on the engine. Returns None when it is (pulled if need be), else
    why not: one line naming the image (see `missing_image_message`)."""
    if _has(client, image):
        return None
    if not pull:
        return missing_image_message(image, pull=False)
    try:
        _pull(client, image, timeout_s)
    except PullError as e:
        return missing_image_message(image, pull=True, why=str(e))
    return None


def base_images(dockerfile: Path) -> list[str]:
    """The images a Dockerfile's FROM lines name (not `scratch`, not an earlier stage's name;
    `${ARG}` from the ARGs before the first FROM)."""
    with dockerfile.open("rb") as f:
        text = f.read(_DOCKERFILE_MAX_BYTES).decode("utf-8", errors="replace")
    args: dict[str, str] = {}
    stages: set[str] = set()
    found: list[str] = []
    for _, instruction in _logical_lines(text):
        keyword, _, rest = instruction.partition(" ")
        keyword = keyword.upper()
        if keyword == "ARG" and not found:
            name, _, default = rest.strip().partition("=")
            args[name.strip()] = default.strip().strip('"')
        elif keyword == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            if not words:
                continue
            ref = re.sub(
                r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)",
                lambda m: args.get(m.group(1) or m.group(2), ""),
                words[0],
            )
            if len(words) >= 3 and words[1].upper() == "AS":
                stages.add(words[2].lower())
            if ref.lower() != "scratch" and ref.lower() not in stages and ref not in found:
                found.append(ref)
    return found


def _context_tag(task: HarborTask, base_ids: list[str]) -> str:
    """The tag of the image built from the task's environment/: a digest of its files and of
    the FROM images' ids (a base image imported or pulled anew builds anew)."""
    digest = hashlib.sha256()
    for image_id in base_ids:
        digest.update(f"\0from:{image_id}".encode())
    for p in sorted(task.environment_dir.rglob("*")):
        if p.is_file():
            digest.update(str(p.relative_to(task.environment_dir)).encode())
            with p.open("rb") as f:  # in chunks: a sparse file may be huge
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
    return f"skyrl-harbor/{task.name.lower()}:{digest.hexdigest()[:12]}"


def task_image(
    client: Any,
    task: HarborTask,
    *,
    pull: bool,
    notes: list[str],
    network: bool = False,
    memory_bytes: int | None = None,
) -> str:
    """The image the trial of `task` runs in (see the module docstring); appends to `notes`
    what it did instead of the task's `docker_image`. Raises `TaskEnvironmentError`.

    A Dockerfile's RUN steps build with the trial's `network` (no network: the engine's
    `none`, as the bwrap backend's build sandbox has the task's network) and under its
    `memory_bytes` cap (swap included): a task folder's build cannot take the host's memory.
    """
    import docker.errors

    settings, dockerfile = task.environment, task.dockerfile
    bound = settings.build_timeout_s
    if settings.docker_image:
        problem = ensure_image(client, settings.docker_image, pull=pull, timeout_s=bound)
        if problem is None:
            return settings.docker_image
        if dockerfile is None:
            raise TaskEnvironmentError(problem)
        how = "the pull failed" if pull else "not pulled without --pull"
        notes.append(
            f"docker_image {settings.docker_image}: not on the engine ({how}); building "
            "environment/Dockerfile instead"
        )
    if dockerfile is None:
        raise TaskEnvironmentError(
            "the docker backend needs environment/Dockerfile or [environment].docker_image"
        )
    base_ids = []
    for base in base_images(dockerfile):
        problem = ensure_image(client, base, pull=pull, timeout_s=bound)
        if problem is not None:
            raise TaskEnvironmentError(f"environment/Dockerfile: FROM {base}: {problem}")
        base_ids.append(client.images.get(base).id)
    tag = _context_tag(task, base_ids)
    if _has(client, tag):
        return tag
    try:
        limits = {"memory": memory_bytes, "memswap": memory_bytes} if memory_bytes else None
        client.images.build(
            path=str(task.environment_dir),
            tag=tag,
            rm=True,
            forcerm=True,
            pull=False,
            network_mode=None if network else "none",
            container_limits=limits,
        )
    except docker.errors.BuildError as e:
        log = "".join(str(c.get("stream") or c.get("error") or "") for c in e.build_log)
        why = ""
        if memory_bytes and "non-zero code: 137" in e.msg:
            why = f" (137: killed, as by the build's memory cap of {memory_bytes >> 20} MiB)"
        raise TaskEnvironmentError(
            f"docker build of environment/ failed: {e.msg}{why}\n{log[-1500:]}"
        ) from None
    except docker.errors.APIError as e:
        raise TaskEnvironmentError(f"docker build of environment/ failed: {e}") from None
    return tag
