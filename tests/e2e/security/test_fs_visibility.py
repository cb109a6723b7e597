"""Vector 2 of issue 14: hidden grading data and host files are readable from a sandbox.

Before the security work a bwrap sandbox bound every top-level entry of the host root
read-only, so code inside read the project's checkout (hidden tests, the python env's answers,
gold patches), its virtualenv, /var, /opt and the caller's working directory. Now a default
sandbox sees only a minimal system (/usr, /bin, /lib*, /sbin, a few /etc files), fresh /tmp,
/run, /proc, /dev, its workspace and what the caller binds by name.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_sdk.sandboxes import SandboxError, SandboxSpec, create_sandbox
from tests.conftest import arun, needs_bwrap

pytestmark = needs_bwrap

CHECKOUT = Path(__file__).resolve().parents[3]
TASKS = CHECKOUT / "skyrl_gym" / "envs" / "python" / "tasks.jsonl"

# Prints, for each path given, whether it can be seen from inside ("VISIBLE <path>") or not.
PROBE = (
    'for p in "$@"; do if [ -e "$p" ] || [ -L "$p" ]; then echo "VISIBLE $p"; fi; done; echo done'
)


@pytest.fixture
def caller_cwd(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The test runs from a directory of its own (under /var/tmp), holding a marker file."""
    where = Path(tempfile.mkdtemp(prefix="skyrl-caller-cwd-", dir="/var/tmp"))
    where.chmod(0o755)
    (where / "marker.txt").write_text("caller data")
    (where / "marker.txt").chmod(0o644)
    monkeypatch.chdir(where)
    yield where
    shutil.rmtree(where, ignore_errors=True)


def visible_from_inside(paths: list[str], spec: SandboxSpec | None = None) -> list[str]:
    async def go() -> str:
        async with create_sandbox(spec or SandboxSpec()) as sb:
            result = await sb.exec(["/bin/sh", "-c", PROBE, "probe", *paths])
            assert result.stdout.endswith("done\n"), result.output
            return result.stdout

    out = arun(go())
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("VISIBLE ")]


def test_host_project_venv_homes_and_cwd_are_invisible(caller_cwd: Path) -> None:
    """Vector 2: nothing of the host that a task does not need is visible by default."""
    secret_paths = [
        str(CHECKOUT),
        "/work/main",
        "/work",
        str(Path(__file__).resolve()),
        str(TASKS),
        sys.prefix,
        sys.base_prefix,
        os.path.realpath(sys.executable),
        "/root",
        "/home",
        "/var",
        "/opt",
        "/mnt",
        "/srv",
        "/media",
        str(caller_cwd),
        str(caller_cwd / "marker.txt"),
        "/etc/shadow",
        "/etc/machine-id",
        "/etc/resolv.conf",  # only with network
    ]
    leaked = visible_from_inside(secret_paths)
    assert leaked == [], f"host paths visible inside a default sandbox: {leaked}"


def test_the_minimal_system_still_runs_programs() -> None:
    """Vector 2 (the other side): what programs need is there, read-only."""

    async def go():
        async with create_sandbox() as sb:
            return await sb.exec(
                "python3 -c 'import ssl, sqlite3, json; print(ssl.OPENSSL_VERSION[:7])' && "
                "id -un && ls /etc/passwd /etc/ld.so.cache /etc/ssl >/dev/null && "
                "touch /usr/x 2>/dev/null || echo read-only"
            )

    result = arun(go())
    assert result.ok, result.output
    ssl, user, readonly = result.stdout.splitlines()
    assert ssl == "OpenSSL" and readonly == "read-only"
    if os.geteuid() == 0:
        assert user == "nobody"


def test_explicit_ro_bind_is_visible_and_nothing_next_to_it() -> None:
    """Vector 2: a caller's bind shows that directory only, not its host neighbours."""
    parent = Path(tempfile.mkdtemp(prefix="skyrl-bind-parent-", dir="/var/tmp"))
    try:
        parent.chmod(0o755)
        (parent / "shared").mkdir(mode=0o755)
        (parent / "shared" / "data.txt").write_text("x")
        (parent / "shared" / "data.txt").chmod(0o644)
        (parent / "sibling.txt").write_text("secret")
        leaked = visible_from_inside(
            [str(parent / "shared" / "data.txt"), str(parent / "sibling.txt")],
            SandboxSpec(ro_binds=(str(parent / "shared"),)),
        )
        assert leaked == [str(parent / "shared" / "data.txt")]
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def test_networked_sandbox_gets_resolv_conf_only() -> None:
    """Vector 2: /etc/resolv.conf comes with network, nothing else of /etc does."""
    try:
        leaked = visible_from_inside(
            ["/etc/resolv.conf", "/etc/shadow", "/var"], SandboxSpec(network=True)
        )
    except SandboxError as e:  # no user-mode networking tool here: said clearly
        pytest.skip(f"no networked sandbox here: {e}")
    assert leaked == (["/etc/resolv.conf"] if os.path.exists("/etc/resolv.conf") else [])


def test_python_env_agent_cannot_read_the_answers() -> None:
    """Vector 2: through the python env, code searching the host finds no tasks.jsonl."""
    answer = json.loads(TASKS.read_text().splitlines()[0])["answer"]
    code = (
        "import os, subprocess\n"
        f"for p in [{str(TASKS)!r}, {str(CHECKOUT)!r}]:\n"
        "    print(p, os.path.exists(p))\n"
        "out = subprocess.run(['find', '/', '-path', '/proc', '-prune', '-o', '-name',"
        " 'tasks.jsonl', '-print'], capture_output=True, text=True).stdout\n"
        "print('found:', out.split())\n"
        "for f in out.split():\n"
        "    print(open(f).read()[:4000])\n"
    )
    env = skyrl_gym.make("python")
    try:
        env.reset(seed=0)
        messages, *_ = env.step(f"<python>{code}</python>")
    finally:
        env.close()
    text = "\n".join(str(m.get("content", "")) for m in messages)
    assert "found: []" in text, text[-2000:]
    assert f"{TASKS} False" in text and answer not in text
