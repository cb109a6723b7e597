"""Agent programs a grading command runs cannot take over the grading (issue 23, item 1).

Each test is a small verifier, run as a real grading sandbox's command the way a terminal
check or a Harbor test.sh runs: it makes its result directory, runs the agent's program from
the workspace, then writes its own verdict (0: the program's output is wrong). The agent's
program attacks the verifier instead of doing its job:

- it writes reward 1 into the verifier's result directory and replaces the verdict file
  after the verifier wrote it (a writer left behind);
- it kills the verifier's shell after planting reward 1, so no verdict of the verifier's
  own is ever written;
- it rewrites the verifier shell's memory through /proc/PID/mem (the issue's exit_group
  rewrite: the shell resumes in code that writes reward 1 and exits 0).

Under `GradingIsolation.TWO_UID` the program runs as `AGENT_UID` and the verifier as uid 0
of its own user namespace (`VERIFIER_HOST_UID` on the host): each attack fails and the
verdict is 0. Each test checks the verdict, not merely that a defence is configured.
"""

from __future__ import annotations

import os
import platform

import pytest

from skyrl_sdk.sandboxes import (
    AGENT_UID,
    VERIFIER_HOST_UID,
    GradingIsolation,
    SandboxSpec,
    create_sandbox,
    grading_env,
)
from skyrl_sdk.sandboxes.audit import AuditReport, Verdict, run_audit
from skyrl_sdk.sandboxes.bwrap import BwrapSandbox
from tests.conftest import arun, needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="the two-uid grading sandbox needs root"),
]

# The verifier: result dir 0755 (its own), run the agent's program, write the verdict last.
VERIFIER = """
mkdir -p -m 0755 /tmp/verifier
out=$(timeout 10 {run} 2>&1)
echo "program printed: $out"
if [ "$out" = "42" ]; then echo 1 > /tmp/verifier/reward.txt; else echo 0 > /tmp/verifier/reward.txt; fi
sleep 0.5
"""

# Writes reward 1 into the verifier's result dir and leaves a writer that replaces the
# verdict once the verifier has written its own.
WRITER = r"""
import os, subprocess, sys
try:
    open("/tmp/verifier/reward.txt", "w").write("1\n")
    print("planted")
except OSError as e:
    print(f"refused: {e.strerror}")
subprocess.Popen(
    [sys.executable, "-c",
     "import time\nfor _ in range(200):\n time.sleep(0.01)\n try: open('/tmp/verifier/reward.txt','w').write('1\\n')\n except OSError: pass"],
    start_new_session=True,
    stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
)
"""

# Plants reward 1, then kills the verifier's shell so its verdict never comes.
KILLER = r"""
import os, signal

def verifier_shell():
    pids = []
    for name in os.listdir("/proc"):
        try:
            if b"mkdir -p -m 0755 /tmp/verifier" in open(f"/proc/{name}/cmdline", "rb").read():
                pids.append(int(name))
        except (OSError, ValueError):
            continue
    return min(pids) if pids else os.getppid()  # hidden: its parent at least is known
try:
    open("/tmp/verifier/reward.txt", "w").write("1\n")
except OSError as e:
    print(f"refused: {e.strerror}")
for pid in (verifier_shell(), 1):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError as e:
        print(f"kill {pid} refused: {e.strerror}")
"""

# The attack: find the verifier's shell, read where it resumes from
# /proc/PID/syscall, write code there that writes reward 1 and calls exit_group(0).
MEM = r"""
import os, time

def verifier_shell():
    pids = []
    for name in os.listdir("/proc"):
        try:
            if b"mkdir -p -m 0755 /tmp/verifier" in open(f"/proc/{name}/cmdline", "rb").read():
                pids.append(int(name))
        except (OSError, ValueError):
            continue
    return min(pids) if pids else os.getppid()  # hidden: its parent at least is known
CODE = bytes.fromhex(
    "488d3d2f000000be41020000baa4010000b8020000000f0589c7488d352f000000ba02000000b8010000000f0531ffb8e70000000f052f746d702f76657269666965722f7265776172642e7478740000310a"
)
pid = verifier_shell()
fields = ["running"]
try:
    for _ in range(200):
        fields = open(f"/proc/{pid}/syscall").read().split()
        if fields[0].isdigit():
            break
        time.sleep(0.01)
    fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
    os.pwrite(fd, CODE, int(fields[-1], 16))
    print("mem written")
except OSError as e:
    print(f"mem refused: {e.strerror}")
"""


async def _grade(program: str, run: str) -> tuple[str, str, GradingIsolation]:
    """Put `program` in the workspace as x.py, run the verifier, return (verdict, log, how)."""
    spec = SandboxSpec(grading=True, files={"x.py": program}, timeout_s=30)
    async with create_sandbox(spec) as sb:
        os.chown(sb.host_workspace / "x.py", AGENT_UID, AGENT_UID)  # the agent's file
        result = await sb.exec(VERIFIER.format(run=run), env=grading_env())
        await sb.exec("sleep 1")  # a writer left behind has had its chance
        try:
            verdict = (await sb.read_file("/tmp/verifier/reward.txt")).decode().strip()
        except FileNotFoundError:
            verdict = "missing"
        return verdict, result.output, sb.grading_isolation


def test_an_agent_program_cannot_write_the_verifiers_result_dir():
    verdict, log, how = arun(_grade(WRITER, "python3 /workspace/x.py"))
    assert how is GradingIsolation.TWO_UID
    assert verdict == "0", log
    assert "refused: Permission denied" in log


def test_an_agent_program_cannot_kill_the_verifier():
    verdict, log, how = arun(_grade(KILLER, "python3 /workspace/x.py"))
    assert how is GradingIsolation.TWO_UID
    assert verdict == "0", log
    assert "kill 1 refused: Operation not permitted" in log


# Reads the check's expected value from the verifier's command line (`test "$(prog)" = "X"`
# is how terminal checks are written) and prints it.
SNOOPER = r"""
import os
for name in os.listdir("/proc"):
    try:
        words = open(f"/proc/{name}/cmdline", "rb").read().split(b"\0")
    except OSError:
        continue
    for word in words:
        if b"= " in word and b"expected-" in word:
            print(word.split(b'"')[-2].decode())
            raise SystemExit
print("nothing seen")
"""
SNOOPED_CHECK = 'test "$(python3 /workspace/x.py)" = "expected-1729"'


def test_an_agent_program_cannot_read_the_checks_expected_value_from_its_command_line():
    async def go() -> tuple[bool, str, GradingIsolation]:
        spec = SandboxSpec(grading=True, files={"x.py": SNOOPER})
        async with create_sandbox(spec) as sb:
            os.chown(sb.host_workspace / "x.py", AGENT_UID, AGENT_UID)
            check = await sb.exec(SNOOPED_CHECK, env=grading_env())
            seen = await sb.exec(
                ["sh", "-c", "python3 /workspace/x.py; sleep 0.1"], env=grading_env()
            )
            return check.ok, seen.stdout.strip(), sb.grading_isolation

    passed, seen, how = arun(go())
    assert how is GradingIsolation.TWO_UID
    assert not passed, "the check passed on a program that only read its command line"
    assert seen == "nothing seen"


# Reads the check's own test file (written by the host into the grading sandbox, as the
# terminal env writes its check files, in a 0700 directory of the verifier's) and prints the
# expected value it holds. With one uid the 0700 directory is no obstacle.
TEST_READER = r"""
import glob
for path in glob.glob("/tmp/grader/*") or ["/tmp/grader/test_x.py"]:  # listed, or guessed
    try:
        text = open(path).read()
    except OSError as e:
        print(f"refused: {e.strerror}")
        raise SystemExit
    print(text.split("EXPECTED = ")[1].split()[0].strip("'"))
"""


def test_an_agent_program_cannot_read_the_checks_test_files():
    async def go() -> tuple[bool, str, GradingIsolation]:
        spec = SandboxSpec(grading=True, files={"x.py": TEST_READER})
        async with create_sandbox(spec) as sb:
            os.chown(sb.host_workspace / "x.py", AGENT_UID, AGENT_UID)
            test = "import subprocess\nEXPECTED = '31337'\nout = subprocess.run(['python3', '/workspace/x.py'], capture_output=True, text=True).stdout\nassert out.strip() == EXPECTED, out\n"
            # The check's own directory, 0700: under two uids no agent program can read it.
            assert (await sb.exec(["mkdir", "-m", "0700", "/tmp/grader"])).ok
            await sb.write_file("/tmp/grader/test_x.py", test)
            check = await sb.exec(["python3", "/tmp/grader/test_x.py"], env=grading_env())
            return check.ok, check.output, sb.grading_isolation

    passed, output, how = arun(go())
    assert how is GradingIsolation.TWO_UID
    assert not passed, "the check passed on a program that only read the check's test file"
    assert "refused: Permission denied" in output


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the planted code is x86-64")
def test_an_agent_program_cannot_rewrite_the_verifiers_memory():
    """Read-only /proc (landed with `SandboxSpec.grading`) already refuses the open; under two
    uids the verifier's memory is also another user's."""
    verdict, log, _ = arun(_grade(MEM, "python3 /workspace/x.py"))
    assert verdict == "0", log
    assert "mem refused" in log and "mem written" not in log


def test_verifier_host_uid_is_neither_root_nor_the_agent():
    assert VERIFIER_HOST_UID not in (0, AGENT_UID)


# ---- `skyrl sandbox audit` rows: each is NOT contained without its defence ------------------


class OneUidSandbox(BwrapSandbox):
    """Weakened on purpose: grading sandboxes never get the second uid."""

    def _pick_grading(self):
        return None


class WritableProcSandbox(OneUidSandbox):
    """Weakened on purpose: one uid and a writable /proc in grading (today's terminal checks)."""

    def _server_argv(self, workspace, python_args):
        argv = super()._server_argv(workspace, python_args)
        at = argv.index("--remount-ro")
        return argv[:at] + argv[at + 2 :]


class HostCmdlineSandbox(BwrapSandbox):
    """Weakened on purpose: the host's /proc/cmdline is not covered."""

    def _server_argv(self, workspace, python_args):
        argv = super()._server_argv(workspace, python_args)
        at = argv.index("--ro-bind-data")
        return argv[: at - 2] + argv[at + 3 :]  # also its --perms 0444


GRADING_PROBES = [
    "grading-result-dir",
    "grading-signal",
    "grading-memory",
    "grading-cmdline",
    "grading-proc",
]


def _not_contained(report: AuditReport) -> set[str]:
    return {r.probe for r in report.results if r.verdict is Verdict.NOT_CONTAINED}


def test_audit_rows_hold_on_the_default_backend():
    report = arun(run_audit("bwrap", probes=[*GRADING_PROBES, "proc-cmdline"]))
    assert report.exit_code == 0, report.failures()


@pytest.mark.parametrize(
    ("weakened", "broken"),
    [
        (OneUidSandbox, {"grading-result-dir", "grading-signal", "grading-cmdline"}),
        (
            WritableProcSandbox,
            {
                "grading-result-dir",
                "grading-signal",
                "grading-memory",
                "grading-cmdline",
                "grading-proc",
            },
        ),
        (HostCmdlineSandbox, {"proc-cmdline"}),
    ],
)
def test_audit_rows_fail_without_their_defence(weakened, broken):
    report = arun(run_audit(weakened, probes=[*GRADING_PROBES, "proc-cmdline"]))
    assert _not_contained(report) == broken, report.to_json()
    assert report.exit_code == 1
