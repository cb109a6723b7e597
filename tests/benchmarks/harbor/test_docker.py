"""The docker backend: the task's `docker_image` or its Dockerfile built on a local engine
(pulled only with `--pull`), and real-format tasks scoring as on bwrap.

The base images the real-format fixtures name (`python:3.12-slim`, `debian:bookworm-slim`)
are a local stand-in built from a slice of the host (`docker_images.import_host_slice`),
imported once per engine. Every test here shares the engine (`xdist_group("docker")`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyrl_sdk.benchmarks.harbor.job import JobConfig, TrialError, run_job
from tests.benchmarks.harbor.docker_images import import_host_slice
from tests.conftest import _BWRAP_PROBLEM as BWRAP_PROBLEM
from tests.skyrl_gym.envs.harbor.conftest import arun, make_task

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("docker")]


def test_docker_builds_the_dockerfile_and_grades(tmp_path, docker_engine):
    tasks = tmp_path / "tasks"
    make_task(
        tasks,
        "greet",
        shebang="#!/bin/sh",
        instruction="Append 'world' to /srv/app/greeting.txt.",
        dockerfile=(
            f"FROM {docker_engine}\nWORKDIR /srv/app\nCOPY greeting.txt .\n"
            "ENV TARGET=world\nRUN echo built > /srv/app/built.txt\n"
        ),
        files={"environment/greeting.txt": "hello\n"},
        test_sh=(
            'if [ "$(cat /srv/app/greeting.txt)" = "hello\n$TARGET" ] || '
            '[ "$(tr "\\n" " " < /srv/app/greeting.txt)" = "hello $TARGET " ] && '
            '[ -f /srv/app/built.txt ] && [ "$PWD" = /srv/app ]; then r=1; else r=0; fi; '
            'echo "{\\"reward\\": $r, \\"built\\": 1}" > /logs/verifier/reward.json'
        ),
        solve_sh='echo "$TARGET" >> greeting.txt; echo 1 > /logs/verifier/reward.txt',
    )
    make_task(
        tasks,
        "no-image",
        toml='schema_version = "1.4"\n[environment]\ndocker_image = "nowhere/none:1"\n',
        dockerfile=None,
    )
    for agent, want in (("oracle", 1.0), ("nop", 0.0)):
        out = tmp_path / agent
        arun(run_job(JobConfig(tasks, out, agent=agent, backend="docker", concurrency=2)), 240)
        trials = {t["task"]: t for t in json.loads((out / "job.json").read_text())["trials"]}
        assert trials["greet"]["rewards"] == {"reward": want, "built": 1.0}, trials["greet"]
        assert trials["greet"]["error"] is None
        assert trials["no-image"]["error"] == TrialError.ENVIRONMENT.value
        result = json.loads((out / trials["no-image"]["trial_name"] / "result.json").read_text())
        assert "nowhere/none:1" in result["error_message"], result["error_message"]
        assert "--pull" in result["error_message"], result["error_message"]
        if agent == "oracle":
            trial_dir = out / trials["greet"]["trial_name"]
            log = trial_dir / "agent" / "oracle.txt"
            assert log.is_file(), (trials["greet"], (trial_dir / "result.json").read_text()[-2000:])


def test_docker_grading_removes_stale_rewards_and_voids_disagreeing_files(tmp_path, docker_engine):
    """The docker backend applies the reward-file rules it can (issue 23, item 2): no reward
    file is in /logs/verifier when test.sh starts (neither the agent's nor one baked into the
    image: the container's /tmp is its own, and the runtime removes them too), and a
    reward.json that disagrees with test.sh's reward.txt is void. It has one uid for test.sh
    and the programs it runs, so the owner rule cannot apply: every trial says `single_uid`."""
    tasks = tmp_path / "tasks"
    image = f"FROM {docker_engine}\nWORKDIR /srv/app\n"
    stale = (
        "RUN mkdir -p /tmp/harbor/logs/verifier && "
        "echo 1 > /tmp/harbor/logs/verifier/reward.txt && "
        "echo '{\"reward\": 1}' > /tmp/harbor/logs/verifier/reward.json\n"
    )
    make_task(
        tasks,
        "stale",
        shebang="#!/bin/sh",
        dockerfile=image + stale,
        solve_sh="echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 1}' > /logs/verifier/reward.json",
        test_sh="ls /logs/verifier",
    )
    make_task(
        tasks,
        "forged-json",
        shebang="#!/bin/sh",
        dockerfile=image,
        solve_sh=(
            "printf '%s\\n' 'echo {\\\"reward\\\": 1.0} > /logs/verifier/reward.json' > tool.sh"
        ),
        test_sh="sh /srv/app/tool.sh\necho 0 > /logs/verifier/reward.txt",
    )
    out = tmp_path / "out"
    arun(run_job(JobConfig(tasks, out, agent="oracle", backend="docker", concurrency=2)), 240)
    results = {}
    for trial in json.loads((out / "job.json").read_text())["trials"]:
        results[trial["task"]] = json.loads((out / trial["trial_name"] / "result.json").read_text())
    assert results["stale"]["error"] == TrialError.REWARD_FILE_NOT_FOUND.value, results["stale"][
        "error_message"
    ]
    forged = results["forged-json"]
    assert forged["error"] == TrialError.REWARD_FILES_DISAGREE.value, forged
    for result in results.values():
        assert result["verifier_isolation"] == "single_uid", result
        assert any(note.startswith("single_uid: ") for note in result["environment_notes"])


# ---- docker_image: used, pulled only with --pull, a clear error naming it ----------------------

REPO = Path(__file__).parents[3]
FIXTURES = Path(__file__).parents[2] / "skyrl_gym" / "envs" / "harbor" / "real_format"


def _harbor_run(tasks: Path, out: Path, *args: str) -> tuple[dict, dict[str, dict]]:
    """`skyrl harbor run -b docker ARGS -p TASKS -o OUT`: (job.json, task -> result.json)."""
    cli = [sys.executable, "-m", "skyrl_gym", "harbor", "run", "-b", "docker", *args]
    done = subprocess.run(
        [*cli, "-n", "2", "-p", str(tasks), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert (out / "job.json").is_file(), done.stdout + done.stderr
    job = json.loads((out / "job.json").read_text())
    results = {
        t["task"]: json.loads((out / t["trial_name"] / "result.json").read_text())
        for t in job["trials"]
    }
    return job, results


def _import_stand_ins() -> None:
    """FROM python:3.12-slim / debian:bookworm-slim build on the local engine (a host slice)."""
    import docker

    with contextlib.closing(docker.from_env()) as client:
        import_host_slice(client)


@contextlib.contextmanager
def _silent_registry() -> Iterator[str]:
    """A registry address on the host's loopback that accepts connections and never answers
    (the engine treats 127.0.0.1 registries as plain HTTP ones): `host:port`."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


def test_docker_image_missing_pull_and_build(tmp_path, docker_engine):
    """`[environment].docker_image`: used when the engine has it; without `--pull`, a missing
    one is an environment-stage error naming it and saying what to do (or, beside a
    Dockerfile, the Dockerfile is built with a note); with `--pull`, a registry that is
    unreachable, or that never answers, fails within the task's build_timeout_sec with the
    image named; a Dockerfile whose FROM image is absent names that image; a RUN step past
    the task's memory_mb is killed (the build has the trial's cap)."""
    _import_stand_ins()
    tasks = tmp_path / "tasks"
    image_only = (
        'schema_version = "1.4"\n[environment]\nbuild_timeout_sec = 3\ndocker_image = "{}"\n'
    )
    make_task(
        tasks,
        "local-image",
        toml=image_only.format(docker_engine),
        dockerfile=None,
        shebang="#!/bin/sh",
    )
    make_task(
        tasks,
        "unknown-registry",
        toml=image_only.format("registry.example.invalid/tb2/absent:1"),
        dockerfile=None,
    )
    make_task(
        tasks,
        "absent-base",
        toml='schema_version = "1.4"\n[environment]\nbuild_timeout_sec = 3\n',
        dockerfile="FROM skyrl-absent/base:1\nWORKDIR /app\n",
        solve_sh="true",
    )
    shutil.copytree(FIXTURES / "prebuilt-image", tasks / "prebuilt-image")
    # The build's RUN steps have the trial's memory cap (the host's memory is not theirs).
    make_task(
        tasks,
        "build-memory",
        toml='schema_version = "1.4"\n[environment]\nmemory_mb = 64\n',
        dockerfile='FROM python:3.12-slim\nWORKDIR /app\nRUN python3 -c "b = bytearray(400 << 20)"\n',
    )
    with _silent_registry() as registry:
        make_task(
            tasks,
            "silent-registry",
            toml=image_only.format(f"{registry}/tb2/stuck:1"),
            dockerfile=None,
        )
        _, offline = _harbor_run(tasks, tmp_path / "offline", "-a", "oracle")
        started = time.monotonic()
        _, pulled = _harbor_run(tasks, tmp_path / "pulled", "-a", "oracle", "--pull")
        pull_run_s = time.monotonic() - started

    for results in (offline, pulled):
        local = results["local-image"]
        assert local["rewards"] == {"reward": 1.0} and local["error"] is None, local
        built = results["prebuilt-image"]
        assert built["rewards"] == {"reward": 1.0}, built
        image = "registry.example.invalid/tb2/prebuilt-image:20250101"
        note = next(n for n in built["environment_notes"] if n.startswith(f"docker_image {image}"))
        assert "building environment/Dockerfile instead" in note, note
        base = results["absent-base"]
        assert base["error"] == TrialError.ENVIRONMENT.value, base
        assert "FROM skyrl-absent/base:1" in base["error_message"], base["error_message"]
        memory = results["build-memory"]
        assert memory["error"] == TrialError.ENVIRONMENT.value, memory
        assert "build's memory cap of 64 MiB" in memory["error_message"], memory["error_message"]
        for name in ("unknown-registry", "silent-registry", "absent-base", "build-memory"):
            result = results[name]
            assert result["error"] == TrialError.ENVIRONMENT.value, result
            # The image could not be had or built: the build stage's failure, not start's.
            assert result["stages"]["build"]["status"] == "failed", result["stages"]
            assert result["stages"]["start"]["status"] == "skipped", result["stages"]
            assert result["stages"]["agent"]["status"] == "skipped", result["stages"]
    for name in ("unknown-registry", "silent-registry"):
        message = offline[name]["error_message"]
        assert "is not on the engine" in message and "--pull" in message, message
        assert "docker build -t" in message, message
    assert "registry.example.invalid/tb2/absent:1" in pulled["unknown-registry"]["error_message"]
    assert "the pull failed" in pulled["unknown-registry"]["error_message"]
    silent = pulled["silent-registry"]
    assert f"{registry}/tb2/stuck:1" in silent["error_message"], silent["error_message"]
    assert "the pull failed (no answer within 3s)" in silent["error_message"], silent
    # Bounded by build_timeout_sec=3, not by the engine's own minutes-long timeouts.
    assert silent["stages"]["build"]["duration_s"] < 10, silent["stages"]
    assert pull_run_s < 60, pull_run_s
    assert "the pull failed" in next(
        n for n in pulled["prebuilt-image"]["environment_notes"] if n.startswith("docker_image")
    )


# ---- the real-format fixtures: the same results as bwrap ----------------------------------------

SHADOW_TASK = "path-shadow"
"""A hostile oracle: /build (a COPY target, so writable as in a container) is first on the
task's PATH, and it plants a python3 there that writes reward 1."""
LAYOUT_TASK = "layout-writes"
"""Generated in `parity_runs`: writes above a nested WORKDIR and into a COPY target."""
PARITY_TASKS = (
    LAYOUT_TASK,
    "nested-workdir",
    "copy-outside",
    "core-limit",
    "ptrace-traceme",
    "prebuilt-image",
    "tmux-session",
    "verifier-missing-command",
)
KNOWN_DIFFERENCES = {
    "rename-tmp": "docker: /tmp (a tmpfs) and the working directory (a bind mount) are two "
    "mounts, so rename('/tmp/x', '/app/x') is EXDEV; bwrap's copy-on-write root is one",
    "sibling-imports": "docker grades with one uid, so the task's program keeps the verifier's "
    "PYTHONSAFEPATH and cannot import its sibling module; bwrap's two-uid grading drops it",
}


@pytest.fixture(scope="module")
def parity_runs(tmp_path_factory, docker_engine) -> dict[str, dict[str, dict[str, dict]]]:
    """The fixtures run with oracle and nop on docker (and on bwrap where it runs):
    backend -> agent -> task -> result.json."""
    _import_stand_ins()
    root = tmp_path_factory.mktemp("parity")
    tasks = root / "tasks"
    for name in (*PARITY_TASKS, *KNOWN_DIFFERENCES, SHADOW_TASK):
        if name != LAYOUT_TASK:
            shutil.copytree(FIXTURES / name, tasks / name)
    # A container lets the task write where its Dockerfile wrote: above a nested WORKDIR, and
    # in a COPY target outside it; and the verifier sees it (one trial layout on both).
    make_task(
        tasks,
        LAYOUT_TASK,
        dockerfile=(
            "FROM python:3.12-slim\nWORKDIR /app\nCOPY seed.txt /app/\n"
            "COPY seed.txt /data/in/\nWORKDIR /app/sub\n"
        ),
        files={"environment/seed.txt": "seed\n"},
        solve_sh=(
            'set -e\n[ "$(pwd)" = /app/sub ]\ncat /app/seed.txt > /app/top.txt\n'
            "echo more >> /data/in/seed.txt\necho new > /data/new.txt\n"
        ),
        test_sh=(
            'if [ "$(cat /app/top.txt)" = seed ] && [ "$(cat /data/new.txt)" = new ] && '
            '[ "$(tail -n1 /data/in/seed.txt)" = more ]; then r=1; else r=0; fi\n'
            "echo $r > /logs/verifier/reward.txt"
        ),
    )
    runs: dict[str, dict[str, dict[str, dict]]] = {"docker": {}, "bwrap": {}}
    for agent in ("oracle", "nop"):
        runs["docker"][agent] = _harbor_run(tasks, root / f"docker-{agent}", "-a", agent)[1]
        if BWRAP_PROBLEM is None:
            cli = [sys.executable, "-m", "skyrl_gym", "harbor", "run", "-b", "bwrap", "-a", agent]
            out = root / f"bwrap-{agent}"
            subprocess.run(
                [*cli, "-p", str(tasks), "-o", str(out)], capture_output=True, timeout=600, cwd=REPO
            )
            job = json.loads((out / "job.json").read_text())
            runs["bwrap"][agent] = {
                t["task"]: json.loads((out / t["trial_name"] / "result.json").read_text())
                for t in job["trials"]
            }
    return runs


def _outcome(result: dict) -> tuple:
    stages = {name: stage["status"] for name, stage in result["stages"].items()}
    return result["rewards"], result["error"], result["agent_error"], stages


def test_real_format_tasks_score_as_on_bwrap(parity_runs):
    """Oracle 1 and nop 0 (verifier-missing-command: verifier_command_not_found) on docker,
    with the same stages and the same result.json fields as the bwrap backend gives."""
    docker_runs = parity_runs["docker"]
    for task in PARITY_TASKS:
        oracle, nop = docker_runs["oracle"][task], docker_runs["nop"][task]
        if task == "verifier-missing-command":
            for result in (oracle, nop):
                assert result["error"] == TrialError.VERIFIER_COMMAND_NOT_FOUND.value, result
                assert result["stages"]["verifier"]["status"] == "failed", result["stages"]
        else:
            assert oracle["rewards"] == {"reward": 1.0}, json.dumps(oracle, indent=1)
            assert oracle["error"] is None and oracle["agent_error"] is None, oracle
            assert nop["rewards"] == {"reward": 0.0}, json.dumps(nop, indent=1)
        assert oracle["stages"]["agent"]["status"] == "ok", oracle["stages"]
        assert oracle["backend"] == "docker"
    # /build is writable on docker too now, so the verifier's PATH must drop it, as on bwrap.
    shadow = docker_runs["oracle"][SHADOW_TASK]
    assert shadow["agent_error"] is None, shadow  # the planting worked...
    assert shadow["rewards"] == {"reward": 0.0}, json.dumps(shadow, indent=1)  # ...and failed
    bwrap = parity_runs["bwrap"]
    for agent, results in bwrap.items():
        for task in (*PARITY_TASKS, SHADOW_TASK):
            mine, theirs = docker_runs[agent][task], results[task]
            assert _outcome(mine) == _outcome(theirs), (task, agent, mine, theirs)
            assert set(mine) == set(theirs), set(mine) ^ set(theirs)


@pytest.mark.parametrize(
    "task",
    [
        pytest.param(task, marks=pytest.mark.xfail(strict=True, reason=reason))
        for task, reason in sorted(KNOWN_DIFFERENCES.items())
    ],
)
def test_known_docker_differences(parity_runs, task):
    """What still differs from bwrap on docker (docs/harbor.md says so): the oracle fails."""
    result = parity_runs["docker"]["oracle"][task]
    assert result["rewards"] == {"reward": 1.0}, json.dumps(result, indent=1)
