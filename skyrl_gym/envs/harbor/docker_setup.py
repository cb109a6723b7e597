"""The docker backend's agent phase environment: the task's image on the engine (pulled only
with `pull`, else built), an image over it with the Harbor paths linked into /tmp, the
writable directories of the Dockerfile's layout seeded from the image, and the agent's
container opened; at the end of the agent phase its logs are copied out."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from skyrl_gym.envs.harbor.errors import BuildTimeoutError, TaskEnvironmentError, building
from skyrl_gym.envs.harbor.trial_paths import AGENT_LOGS, ARTIFACTS, SOLUTION, fresh_dir
from skyrl_sdk.sandboxes import DEFAULT_DISK_BYTES, Sandbox

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.runtime import HarborRuntime


async def start_docker(rt: HarborRuntime, with_solution: bool) -> Sandbox:
    """docker: the task's image, its writable directories seeded, the agent's container
    opened; `with_solution`: /solution uploaded (the oracle)."""
    from skyrl_sdk.sandboxes.docker_backend import docker_client

    client = await asyncio.to_thread(docker_client)
    build_s = rt.task.environment.build_timeout_s
    # With --pull a pull (bounded by build_timeout_sec itself) may come before the build.
    bound = 2 * build_s if rt.pull else build_s
    # The build stage's time, apart from the container's start; its failure is the build's.
    with building(rt):
        try:
            base = await asyncio.wait_for(asyncio.to_thread(engine_image, rt, client), bound)
        except TimeoutError:
            what = "docker pull and build" if rt.pull else "docker build"
            raise BuildTimeoutError(f"{what} ran past build_timeout_sec={build_s:g}") from None
    try:
        config = client.images.get(base).attrs.get("Config") or {}
        image_workdir = config.get("WorkingDir") or ""
        if not rt.task.environment.workdir and image_workdir not in ("", "/"):
            rt.workdir = image_workdir
        for item in config.get("Env") or []:
            key, _, value = item.partition("=")
            rt._env[key] = value
        rt._env.update(rt.task.environment.env)
        plan_docker_roots(rt)
        rt._image = await asyncio.to_thread(link_image, client, base)
        await asyncio.to_thread(seed_workspace, rt, client, rt._image)
    finally:
        client.close()
    sandbox = await rt._open({}, rt._env)
    try:
        await rt._detect_shell(sandbox)
        if with_solution and rt.task.solution_dir is not None:
            await sandbox.upload(rt.task.solution_dir, rt._real(SOLUTION))
            rt.solution_uploaded = True
    except BaseException:
        await sandbox.close()
        raise
    return sandbox


def engine_image(rt: HarborRuntime, client: Any) -> str:
    """The task's image on the engine: `docker_image`, pulled only with `pull`, else the
    Dockerfile built (see `docker_image.task_image`)."""
    from skyrl_gym.envs.harbor.docker_image import task_image

    spec = rt._spec({})  # the build's RUN steps get the trial's network and memory cap
    return task_image(
        client,
        rt.task,
        pull=rt.pull,
        notes=rt.notes,
        network=spec.network,
        memory_bytes=spec.memory_bytes,
    )


def link_image(client: Any, base: str) -> str:
    """An image on top of `base` whose /logs, /tests, /solution point into the writable /tmp
    (the docker sandbox's root filesystem is read-only)."""
    import docker.errors

    image_id = client.images.get(base).id
    tag = f"skyrl-harbor-links:{image_id.split(':')[-1][:16]}"
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dockerfile = f"FROM {image_id}\nCOPY links/ /\n".encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
        for name in ("logs", "tests", "solution"):
            link = tarfile.TarInfo(f"links/{name}")
            link.type, link.linkname = tarfile.SYMTYPE, f"/tmp/harbor/{name}"
            tar.addfile(link)
    buf.seek(0)
    try:
        client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, pull=False)
    except (docker.errors.BuildError, docker.errors.APIError) as e:
        raise TaskEnvironmentError(f"cannot add the Harbor paths to the image: {e}") from None
    return tag


def plan_docker_roots(rt: HarborRuntime) -> None:
    """Docker: the writable directories a container of the Dockerfile has, as bwrap lays
    them out: the workspace at the top of the working directory (`mount_dir`) and one
    directory in the trial's workspace (under its disk cap) for each other place its
    COPYs and RUNs write (`roots`), each seeded from the image."""
    from skyrl_gym.envs.harbor.docker_image import docker_layout

    try:
        layout = docker_layout(rt.task.dockerfile, rt.workdir)
    except (OSError, ValueError) as e:
        raise TaskEnvironmentError(f"cannot read environment/Dockerfile: {e}") from None
    rt.notes.extend(layout.notes)
    rt.mount_dir = layout.mount_dir
    for root in layout.roots:
        host = rt._work / "roots" / root.strip("/").replace("/", "__")
        host.parent.mkdir(exist_ok=True)
        host.parent.chmod(0o755)
        rt.roots[root] = fresh_dir(host)


def seed_workspace(rt: HarborRuntime, client: Any, image: str) -> None:
    """Copy the image's `mount_dir` and `roots` into the host directories that will be
    mounted over them, so the task's files are there (under one cap: the workspace's)."""
    budget = [rt.disk_bytes or DEFAULT_DISK_BYTES]
    container = client.containers.create(image, command=["true"])
    try:
        for inside_path, host in ((rt.mount_dir, rt.app_dir), *rt.roots.items()):
            seed_dir(rt, container, inside_path, host, budget)
    finally:
        container.remove(force=True)
    if rt.mount_dir != rt.workdir:  # the working directory exists below the mount
        below = rt.app_dir / PurePosixPath(rt.workdir).relative_to(rt.mount_dir)
        below.mkdir(parents=True, exist_ok=True)


def seed_dir(
    rt: HarborRuntime, container: Any, inside_path: str, host: Path, budget: list[int]
) -> None:
    """Copy the image's `inside_path` into `host` (nothing when the image lacks it),
    charging `budget[0]` bytes."""
    import docker.errors

    staging = rt._work / "seed"
    # Spooled into the workspace itself (never held in memory): it counts against the
    # workspace's cap, and an archive larger than the cap is refused.
    with tempfile.TemporaryFile(dir=rt._work) as spool:
        try:
            stream, _ = container.get_archive(inside_path)
            for chunk in stream:
                budget[0] -= len(chunk)
                if budget[0] < 0:
                    raise TaskEnvironmentError(
                        f"the image's {inside_path} is larger than the workspace's cap "
                        f"({rt.disk_bytes or DEFAULT_DISK_BYTES} bytes)"
                    )
                spool.write(chunk)
        except docker.errors.NotFound:
            return
        except OSError as e:
            raise TaskEnvironmentError(
                f"cannot copy the image's {inside_path}: {e.strerror}"
            ) from None
        spool.seek(0)
        with tarfile.open(fileobj=spool) as tar:
            tar.extractall(staging, filter="data")
    root = staging / PurePosixPath(inside_path).name
    if root.is_dir() and not root.is_symlink():
        for entry in root.iterdir():  # the same filesystem: moved, not copied again
            os.rename(entry, host / entry.name)
    shutil.rmtree(staging, ignore_errors=True)


async def copy_out_logs(rt: HarborRuntime, sandbox: Sandbox) -> None:
    """At the end of the agent phase: the container's /logs/agent and /logs/artifacts
    downloaded into the trial's host directories (a failure is a note, not an error)."""
    for inside_path, host_dir in (
        (AGENT_LOGS, rt.agent_logs_dir),
        (ARTIFACTS, rt.artifacts_dir),
    ):
        try:
            await sandbox.download(rt._real(inside_path), host_dir.parent)
        except Exception as e:  # the trial goes on; the note says what is missing
            rt.notes.append(
                f"could not copy {inside_path} out of the container: "
                f"{type(e).__name__}: {str(e)[:300]}"
            )
