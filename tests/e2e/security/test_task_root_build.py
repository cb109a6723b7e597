"""A task's Dockerfile is untrusted: its build (uid 0 of the build sandbox, issue 25) cannot
reach the host through the built root.

- RUN steps that write the system's directories (`/usr/bin`, `/etc`) write the build's own
  upper layer: the host's files are untouched.
- A RUN that turns a directory the build hands to the agent into a link to a host path
  (`/opt -> /host/dir`, then `WORKDIR /opt/tool`) gets nothing created or chowned there: the
  host side never follows the build's links.
- A set-uid program a RUN makes is stored without its set-uid bit (the cached layer lies on
  the host's disk), and the cache is root's alone (0700).
"""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path

import pytest

from skyrl_gym.envs.harbor.root_cache import RootCache
from skyrl_sdk.benchmarks.harbor.job import JobConfig, run_job
from skyrl_sdk.sandboxes import cow_root
from tests.skyrl_gym.envs.harbor.conftest import arun, make_task, needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(cow_root.supported() is not None, reason="no copy-on-write roots here"),
]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RootCache:
    monkeypatch.setenv("SKYRL_CACHE", str(tmp_path / "cache"))
    return RootCache.default()


def _run(tasks: Path, out: Path) -> dict:
    arun(run_job(JobConfig(tasks, out, agent="oracle", concurrency=1)), 300)
    (trial,) = json.loads((out / "job.json").read_text())["trials"]
    return json.loads((out / trial["trial_name"] / "result.json").read_text())


def test_build_writes_to_system_dirs_stay_in_the_layer(tmp_path: Path, cache: RootCache) -> None:
    name = f"skyrl-build-probe-{uuid.uuid4().hex[:8]}"
    make_task(
        tmp_path / "tasks",
        "writes-system",
        dockerfile=(
            f"FROM debian:bookworm-slim\nRUN echo built > /usr/bin/{name} && "
            f"echo built > /etc/{name} && echo built > /usr/lib/{name}\nWORKDIR /app\n"
        ),
        test_sh=(
            f'[ "$(cat /usr/bin/{name})" = built ] && [ "$(cat /etc/{name})" = built ] && '
            "echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt"
        ),
    )
    result = _run(tmp_path / "tasks", tmp_path / "out")
    assert result["rewards"] == {"reward": 1.0}, json.dumps(result)  # the sandbox saw them
    for host in (f"/usr/bin/{name}", f"/etc/{name}", f"/usr/lib/{name}"):
        assert not os.path.lexists(host), host  # the host did not


def test_a_link_made_by_the_build_is_not_followed_on_the_host(
    tmp_path: Path, cache: RootCache
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    victim.chmod(0o755)
    make_task(
        tmp_path / "tasks",
        "link-out",
        dockerfile=(
            f"FROM debian:bookworm-slim\nRUN rm -rf /opt && ln -s {victim} /opt\n"
            "WORKDIR /opt/tool\nRUN true\n"
        ),
        test_sh="echo 0 > /logs/verifier/reward.txt",
        solve_sh="true",
    )
    result = _run(tmp_path / "tasks", tmp_path / "out")
    assert list(victim.iterdir()) == [], list(victim.iterdir())
    assert victim.stat().st_uid == os.geteuid()
    notes = result["environment_notes"]
    assert any("/opt/tool" in n and "not handed to the agent" in n for n in notes), notes


def test_setuid_programs_lose_the_bit_and_the_cache_is_private(
    tmp_path: Path, cache: RootCache
) -> None:
    make_task(
        tmp_path / "tasks",
        "setuid",
        dockerfile=(
            "FROM debian:bookworm-slim\nRUN cp /bin/sh /usr/local/bin/rootsh && "
            "chmod 6755 /usr/local/bin/rootsh\nWORKDIR /app\n"
        ),
        test_sh=(
            "[ -x /usr/local/bin/rootsh ] && [ ! -u /usr/local/bin/rootsh ] && echo 1 > "
            "/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt"
        ),
    )
    result = _run(tmp_path / "tasks", tmp_path / "out")
    assert result["rewards"] == {"reward": 1.0}, json.dumps(result)
    (key, _, _), *_ = cache.entries()
    program = cache.directory / key / "sys" / "usr" / "local" / "bin" / "rootsh"
    mode = program.lstat().st_mode
    assert not mode & (stat.S_ISUID | stat.S_ISGID), oct(mode)
    assert stat.S_IMODE(cache.directory.stat().st_mode) == 0o700


def test_a_networked_build_cannot_reach_the_host_or_its_kernel_settings(
    tmp_path: Path, cache: RootCache, host_listener: int
) -> None:
    """The build sandbox is uid 0 of a user namespace that maps the host's root, with the
    task's network: its RUN steps still cannot reach a service on the host's loopback (the
    same firewall as the agent's sandbox) nor write the host kernel's settings (/proc/sys is
    read-only, as is /proc/sysrq-trigger), and what they could try lands in the notes, not on
    the host."""
    probe = (
        "import socket, sys\n"
        "for host in ('127.0.0.1', '::1'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {host_listener}), 2).close()\n"
        "        print('REACHED', host); sys.exit(0)\n"
        "    except OSError as e:\n"
        "        print(host, 'unreachable', e)\n"
        "sys.exit(1)\n"
    )
    make_task(
        tmp_path / "tasks",
        "build-escape",
        toml=(
            'schema_version = "1.4"\n[agent]\ntimeout_sec = 60.0\n[verifier]\n'
            'timeout_sec = 30.0\n[environment]\nnetwork_mode = "public"\n'
        ),
        dockerfile=(
            "FROM debian:bookworm-slim\nCOPY probe.py /probe.py\nRUN python3 /probe.py\n"
            # Harmless if it got through (the value it writes is the one there), so a failing
            # defence is caught without changing the host.
            "RUN cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern\n"
            "RUN if [ -w /proc/sysrq-trigger ]; then echo SYSRQ-WRITABLE; exit 1; fi\n"
            "RUN head -c 16 /proc/kcore | wc -c\nWORKDIR /app\n"
        ),
        files={"environment/probe.py": probe},
        test_sh="echo 0 > /logs/verifier/reward.txt",
        solve_sh="true",
    )
    before = Path("/proc/sys/kernel/core_pattern").read_text()
    result = _run(tmp_path / "tasks", tmp_path / "out")
    notes = "\n".join(result["environment_notes"])
    assert "REACHED" not in notes, notes
    assert "RUN python3 /probe.py: failed at build" in notes, notes
    assert "core_pattern > /proc/sys/kernel/core_pattern: failed at build" in notes, notes
    assert "SYSRQ-WRITABLE" not in notes, notes
    assert Path("/proc/sys/kernel/core_pattern").read_text() == before
