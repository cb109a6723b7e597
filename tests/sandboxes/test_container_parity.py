"""A bwrap sandbox behaves as a Docker container where real tasks rely on it (issue 25):
ptrace as Docker's default seccomp profile allows it, raisable core dumps, ... Each test
fails on the sandbox as it was before (EPERM on every ptrace, RLIMIT_CORE hard 0)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest

from skyrl_sdk.sandboxes import (
    AGENT_UID,
    GradingIsolation,
    SandboxSpec,
    create_sandbox,
    grading_env,
)
from skyrl_sdk.sandboxes.bwrap import GRADING_UIDS_ENV
from skyrl_sdk.sandboxes.seccomp import ptrace_safe_kernel
from tests.conftest import arun, needs_bwrap

pytestmark = needs_bwrap

# A child asks to be traced (PTRACE_TRACEME) and stops; its parent sees the stop, resumes it
# and reads its exit status: what anti-debug checks and debuggers do.
TRACEME_PY = textwrap.dedent(
    """
    import ctypes, json, os, signal
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    pid = os.fork()
    if pid == 0:
        if libc.ptrace(0, 0, None, None) != 0:  # PTRACE_TRACEME
            os._exit(100 + ctypes.get_errno())
        os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    out = {"stopped": os.WIFSTOPPED(status)}
    if out["stopped"]:
        libc.ptrace(7, pid, None, None)  # PTRACE_CONT
        _, status = os.waitpid(pid, 0)
    out["exit"] = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    print(json.dumps(out))
    """
)

needs_new_kernel = pytest.mark.skipif(
    not ptrace_safe_kernel(), reason="ptrace stays refused on kernels older than 4.8"
)


async def _run(command: str, spec: SandboxSpec | None = None, env=None):
    async with create_sandbox(spec) as sb:
        return await sb.exec(["/bin/sh", "-c", command], env=env, timeout=60)


@needs_new_kernel
def test_ptrace_traceme_and_a_traced_child_work() -> None:
    result = arun(_run(f"python3 -c '{TRACEME_PY}'"))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"stopped": True, "exit": 7}


@needs_new_kernel
@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed here")
def test_strace_runs_a_program() -> None:
    result = arun(_run("strace -f -e trace=write -o /tmp/trace echo traced && cat /tmp/trace"))
    assert result.exit_code == 0, result.output
    assert "traced" in result.stdout and "write(1" in result.stdout


@needs_new_kernel
@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed here")
def test_gdb_runs_a_program_to_a_breakpoint() -> None:
    command = "gdb -batch -nx -ex 'break getpid' -ex run -ex bt -ex kill --args python3 -c 'import os; os.getpid()'"
    result = arun(_run(command))
    assert "Breakpoint 1" in result.output and "getpid" in result.output, result.output
    assert "ptrace: Operation not permitted" not in result.output


def test_ptrace_stays_refused_where_agent_programs_share_the_verifiers_uid(monkeypatch) -> None:
    """One-uid grading: an agent program could trace test.sh's shell, so the filter keeps
    every ptrace refused there."""
    monkeypatch.setenv(GRADING_UIDS_ENV, "off")
    result = arun(_run(f"python3 -c '{TRACEME_PY}'", SandboxSpec(grading=True), env=grading_env()))
    assert json.loads(result.stdout) == {"stopped": False, "exit": 101}  # 100 + EPERM


def test_core_dumps_are_off_but_raisable_and_land_in_the_workspace() -> None:
    async def go():
        async with create_sandbox() as sb:
            default = await sb.exec(["/bin/sh", "-c", "ulimit -c; ulimit -H -c"])
            crash = await sb.exec(
                [
                    "/bin/sh",
                    "-c",
                    "ulimit -c unlimited && ulimit -c && python3 -c 'import os; os.abort()'",
                ],
                timeout=60,
            )
            cores = [p.name for p in sb.host_workspace.iterdir() if p.name.startswith("core")]
            return default, crash, cores

    default, crash, cores = arun(go())
    soft, hard = default.stdout.split()
    assert soft == "0" and hard != "0", default.output
    assert crash.stdout.startswith("unlimited"), crash.output
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"this host's core_pattern {pattern!r} sends dumps elsewhere")
    assert cores, f"no core file in the workspace ({crash.output!r})"


needs_two_uids = pytest.mark.skipif(os.geteuid() != 0, reason="two grading uids need root")

SIBLING_FILES = {
    "run.py": "def run_tasks():\n    return 'sibling-ok'\n",
    "main.py": "from run import run_tasks\nprint(run_tasks())\n",
    "json.py": "raise SystemExit('the agent shadowed json')\n",
}


@needs_two_uids
def test_grading_task_programs_import_their_siblings_and_the_verifier_stays_safe() -> None:
    """test.sh's `python3 /workspace/main.py` (the task's program, agent code) imports
    `run` next to it; the verifier's own `python3 -c 'import json'` in the workspace still
    gets the standard library, not /workspace/json.py."""

    async def go():
        spec = SandboxSpec(grading=True, files=SIBLING_FILES)
        async with create_sandbox(spec) as sb:
            for root, dirs, files in os.walk(sb.host_workspace):
                for name in dirs + files:
                    os.chown(os.path.join(root, name), AGENT_UID, AGENT_UID)
            os.chown(sb.host_workspace, AGENT_UID, AGENT_UID)
            task = await sb.exec(["/bin/sh", "-c", "python3 /workspace/main.py"], env=grading_env())
            verifier = await sb.exec(
                [
                    "/bin/sh",
                    "-c",
                    "cd /workspace && python3 -c 'import json; print(json.__file__)'",
                ],
                env=grading_env(),
            )
            return sb.grading_isolation, task, verifier

    isolation, task, verifier = arun(go())
    if isolation is not GradingIsolation.TWO_UID:
        pytest.skip(f"grading runs with {isolation.value} here")
    assert task.exit_code == 0 and task.stdout.strip() == "sibling-ok", task.output
    assert verifier.exit_code == 0 and verifier.stdout.startswith("/usr/"), verifier.output


def test_the_sandbox_user_has_a_login_shell_shell_and_home() -> None:
    async def go():
        async with create_sandbox() as sb:
            return await sb.exec(["/bin/sh", "-c", 'getent passwd "$(id -u)"; echo "$SHELL $HOME"'])

    result = arun(go())
    entry, env = result.stdout.splitlines()
    shell = "/bin/bash" if shutil.which("bash") else "/bin/sh"
    assert entry.split(":")[5:] == ["/workspace", shell], entry
    assert env == f"{shell} /workspace"


@pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)"
)
def test_a_detached_tmux_session_keeps_its_shell_pane() -> None:
    async def go():
        async with create_sandbox() as sb:
            await sb.exec(["tmux", "new-session", "-d", "-s", "work"], timeout=20)
            await asyncio.sleep(0.5)
            alive = await sb.exec(["tmux", "has-session", "-t", "work"], timeout=20)
            await sb.exec(["tmux", "kill-server"], timeout=20)
            return alive

    alive = arun(go())
    assert alive.exit_code == 0, f"the tmux pane exited at once: {alive.output}"
