"""Issue 25, difference 2: a task's Dockerfile is built, once, into a cached root.

On the bwrap backend as root, every COPY and RUN of the Dockerfile runs at build time in a build
sandbox (uid 0 of its own user namespace) on a copy-on-write root, and the layer it makes is
cached under `$SKYRL_CACHE/harbor-roots`. The tasks here do what Terminal-Bench 2 Dockerfiles do:
`pip install` a package (from a wheel in the build context: offline), COPY a tool into
`/usr/local/bin` and a config into `/etc`, RUN `mkdir /opt/tool`, and an `apt-get` step, which
the host's minimal system (no dpkg database) turns into a note.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from skyrl_gym.envs.harbor.root_cache import CacheOutcome, RootCache
from skyrl_gym.envs.harbor.runtime import HarborRuntime
from skyrl_gym.envs.harbor.task import load_task
from skyrl_sdk.benchmarks.harbor.job import JobConfig, run_job
from skyrl_sdk.sandboxes import cow_root
from tests.skyrl_gym.envs.harbor.conftest import arun, make_task, needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(cow_root.supported() is not None, reason="no copy-on-write roots here"),
    pytest.mark.skipif(
        subprocess.run(
            ["/usr/bin/python3", "-m", "pip", "--version"], capture_output=True
        ).returncode,
        reason="the host's /usr/bin/python3 has no pip",
    ),
]

PKG = "skyrl_fixture_pkg"


def _wheel() -> bytes:
    """A pure-Python wheel of `PKG` 1.0, built in memory."""
    files = {
        f"{PKG}/__init__.py": b"ANSWER = 42\n",
        f"{PKG}-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: skyrl-fixture-pkg\nVersion: 1.0\n",
        f"{PKG}-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{PKG}-1.0.dist-info/RECORD,,")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{PKG}-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return buf.getvalue()


DOCKERFILE = f"""\
FROM python:3.11-slim
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
RUN apt-get update && apt-get install -y --no-install-recommends jq
COPY wheels/ /tmp/wheels/
RUN pip install --no-index --find-links /tmp/wheels {PKG}
COPY tool.sh /usr/local/bin/answer-tool
COPY app.conf /etc/myapp/app.conf
RUN mkdir -p /opt/tool && echo v1 > /opt/tool/version
WORKDIR /app
COPY question.txt /app/
"""

TEST_SH = f"""\
ok=1
[ "$(python3 -c 'import {PKG}; print({PKG}.ANSWER)')" = 42 ] || ok=0
[ "$(answer-tool)" = 42 ] || ok=0
[ "$(cat /etc/myapp/app.conf)" = "mode=strict" ] || ok=0
[ "$(cat /opt/tool/version)" = v1 ] || ok=0
[ "$(cat /app/answer.txt 2>/dev/null)" = "$(answer-tool)" ] || ok=0
echo $ok > /logs/verifier/reward.txt
"""


def _task(
    root: Path, name: str = "built-root", solve: str = "answer-tool > /app/answer.txt"
) -> Path:
    task = make_task(
        root,
        name,
        dockerfile=DOCKERFILE,
        test_sh=TEST_SH,
        solve_sh=solve,
        files={
            "environment/tool.sh": "#!/bin/sh\necho 42\n",
            "environment/app.conf": "mode=strict\n",
            "environment/question.txt": "What does answer-tool print?\n",
        },
    )
    (task / "environment" / "tool.sh").chmod(0o755)
    (task / "environment" / "wheels").mkdir()
    (task / "environment" / "wheels" / f"{PKG}-1.0-py3-none-any.whl").write_bytes(_wheel())
    return task


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RootCache:
    monkeypatch.setenv("SKYRL_CACHE", str(tmp_path / "cache"))
    return RootCache.default()


def _results(out: Path) -> dict[str, dict]:
    job = json.loads((out / "job.json").read_text())
    return {
        t["task"]: json.loads((out / t["trial_name"] / "result.json").read_text())
        for t in job["trials"]
    }


def test_the_dockerfile_is_built_and_the_oracle_scores_one(
    tmp_path: Path, cache: RootCache
) -> None:
    tasks = tmp_path / "tasks"
    _task(tasks)
    for agent, want in (("oracle", 1.0), ("nop", 0.0)):
        out = tmp_path / agent
        arun(run_job(JobConfig(tasks, out, agent=agent, concurrency=1)), 300)
        result = _results(out)["built-root"]
        assert (result["rewards"], result["error"]) == ({"reward": want}, None), json.dumps(result)
        notes = result["environment_notes"]
        assert any("apt-get" in n and "no dpkg database" in n for n in notes), notes
        assert not any("not applied" in n or "failed at build" in n for n in notes), notes
    assert len(cache.entries()) == 1  # the nop run reused the oracle run's build


def test_a_second_trial_reuses_the_built_root(tmp_path: Path, cache: RootCache) -> None:
    task = load_task(_task(tmp_path / "tasks"))

    async def one() -> tuple[CacheOutcome, str]:
        runtime = HarborRuntime(task)
        try:
            sandbox = await runtime.start()
            ran = await sandbox.exec("answer-tool; touch /usr/local/bin/x 2>&1; echo $?")
            assert runtime.built_root is not None
            return runtime.built_root.outcome, ran.output
        finally:
            await runtime.close()

    first, output = arun(one(), 300)
    second, _ = arun(one(), 120)
    assert (first, second) == (CacheOutcome.BUILT, CacheOutcome.HIT)
    lines = output.split()
    assert lines[0] == "42" and lines[-1] != "0", output  # the system's files stay root's


def test_concurrent_trials_build_once(tmp_path: Path, cache: RootCache) -> None:
    tasks = tmp_path / "tasks"
    for i in range(3):
        _task(tasks, f"copy-{i}")  # same Dockerfile and context: one key
    out = tmp_path / "out"
    arun(run_job(JobConfig(tasks, out, agent="oracle", concurrency=3)), 300)
    results = _results(out)
    assert {name: r["rewards"] for name, r in results.items()} == {
        f"copy-{i}": {"reward": 1.0} for i in range(3)
    }, json.dumps(results)
    assert len(cache.entries()) == 1


def test_a_failed_run_step_is_a_note_and_the_trial_runs_on(
    tmp_path: Path, cache: RootCache
) -> None:
    tasks = tmp_path / "tasks"
    make_task(
        tasks,
        "offline-install",
        dockerfile="FROM python:3.11-slim\nWORKDIR /app\nRUN pip install --no-index nosuchpkg\n",
    )
    out = tmp_path / "out"
    arun(run_job(JobConfig(tasks, out, agent="oracle", concurrency=1)), 300)
    result = _results(out)["offline-install"]
    assert result["rewards"] == {"reward": 1.0}, json.dumps(result)
    notes = [n for n in result["environment_notes"] if "failed at build" in n]
    assert notes and "Dockerfile:3 RUN pip install --no-index nosuchpkg" in notes[0], result


def test_prune_removes_unheld_layers(tmp_path: Path, cache: RootCache) -> None:
    task = load_task(_task(tmp_path / "tasks"))

    async def held() -> list[str]:
        runtime = HarborRuntime(task)
        try:
            await runtime.start()
            return cache.prune()  # the running trial holds its layer
        finally:
            await runtime.close()

    assert arun(held(), 300) == []
    assert len(cache.entries()) == 1
    assert len(cache.prune()) == 1 and cache.entries() == []


def test_binds_mode_is_still_available(tmp_path: Path, cache: RootCache, monkeypatch) -> None:
    monkeypatch.setenv("SKYRL_HARBOR_ROOT", "binds")
    task = load_task(make_task(tmp_path / "tasks", "plain"))

    async def run() -> bool:
        runtime = HarborRuntime(task)
        try:
            await runtime.start()
            return runtime.cow is None
        finally:
            await runtime.close()

    assert arun(run(), 60)
    assert not os.path.exists(cache.directory) or cache.entries() == []


def _busybox_root(root: Path) -> Path:
    """An image root: static busybox, one link per applet, /etc/passwd, the usual top dirs."""
    busybox = shutil.which("busybox")
    if (
        busybox is None
        or "static" not in subprocess.run(["file", busybox], capture_output=True, text=True).stdout
    ):
        pytest.skip("needs a static busybox")
    for d in ("bin", "etc", "proc", "dev", "sys", "run", "root", "usr/bin", "var"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").mkdir(mode=0o1777)
    (root / "tmp").chmod(0o1777)
    shutil.copy(busybox, root / "bin" / "busybox")
    names = subprocess.run([busybox, "--list"], capture_output=True, text=True).stdout.split()
    for name in names:
        if name != "busybox":
            (root / "bin" / name).symlink_to("busybox")
    (root / "etc" / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"
    )
    return root


def test_an_image_root_is_one_copy_on_write_root(tmp_path: Path, cache: RootCache) -> None:
    """`--rootfs`: the image's whole root is the lowest layer of one overlay, so a RUN may
    write anywhere the image has (here /var/lib/tool), COPY lands in /srv, and rename from
    /tmp into the workspace works; the image's directory is untouched."""
    rootfs = _busybox_root(tmp_path / "image")
    before = sorted(str(p.relative_to(rootfs)) for p in rootfs.rglob("*"))
    tasks = tmp_path / "tasks"
    make_task(
        tasks,
        "image-root",
        shebang="#!/bin/sh",
        dockerfile=(
            "FROM busybox\nRUN mkdir -p /var/lib/tool && echo v2 > /var/lib/tool/version\n"
            "COPY data.txt /srv/data.txt\nWORKDIR /app\n"
        ),
        files={"environment/data.txt": "payload\n"},
        solve_sh="echo done > /tmp/out && mv /tmp/out /app/out",
        test_sh=(
            '[ "$(cat /var/lib/tool/version)" = v2 ] && [ "$(cat /srv/data.txt)" = payload ] && '
            '[ "$(cat /app/out)" = done ] && echo 1 > /logs/verifier/reward.txt || '
            "echo 0 > /logs/verifier/reward.txt"
        ),
    )
    out = tmp_path / "out"
    arun(run_job(JobConfig(tasks, out, agent="oracle", concurrency=1, rootfs=str(rootfs))), 300)
    result = _results(out)["image-root"]
    assert (result["rewards"], result["error"]) == ({"reward": 1.0}, None), json.dumps(result)
    assert sorted(str(p.relative_to(rootfs)) for p in rootfs.rglob("*")) == before
