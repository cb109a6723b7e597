"""Two uids in a grading sandbox (`SandboxSpec(grading=True)`, `GradingIsolation.TWO_UID`):
which programs run as the verifier and which as the agent, and the single-uid fallback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from skyrl_sdk.sandboxes import (
    AGENT_UID,
    VERIFIER_HOST_UID,
    BackendUnavailable,
    GradingIsolation,
    SandboxSpec,
    create_sandbox,
    grading_env,
)
from skyrl_sdk.sandboxes.bwrap import GRADING_UIDS_ENV, BwrapSandbox
from tests.conftest import arun, needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="the two-uid grading sandbox needs root"),
]

UID_PY = "import os; print(os.getuid())\n"
UID_SH = "#!/bin/sh\nid -u\n"
FILES = {"x.py": UID_PY, "x.sh": UID_SH, "sub/y.sh": UID_SH}


def _agent_owned(workspace: Path) -> None:
    """The agent phase's files: owned by the agent's uid, as the runtime leaves them."""
    for root, dirs, files in os.walk(workspace):
        for name in dirs + files:
            # Never through a symlink: the test's link to /usr/bin/python3 must stay a link.
            os.chown(os.path.join(root, name), AGENT_UID, AGENT_UID, follow_symlinks=False)
    for script in ("x.sh", "sub/y.sh"):
        if (workspace / script).exists():
            (workspace / script).chmod(0o755)


async def _uids(commands: list[str], **spec_args) -> tuple[GradingIsolation, list[str]]:
    """The stdout of each command in a fresh grading sandbox with the agent's FILES."""
    spec = SandboxSpec(grading=True, files=FILES, **spec_args)
    async with create_sandbox(spec) as sb:
        _agent_owned(sb.host_workspace)
        out = []
        for command in commands:
            result = await sb.exec(command, env=grading_env())
            assert result.exit_code == 0, (command, result.output)
            out.append(result.stdout.strip())
        return sb.grading_isolation, out


AGENT_COMMANDS = [
    "python3 /workspace/x.py",
    "python3 -u x.py",
    "sh /workspace/x.sh",
    "bash -e x.sh",
    "./x.sh",
    "sub/y.sh",
    "cd sub && ./y.sh",
    # Python's subprocess: fork+execve and posix_spawn (close_fds=False takes that path).
    "python3 -c 'import subprocess; subprocess.run([\"./x.sh\"])'",
    "python3 -c 'import subprocess; subprocess.run([\"./x.sh\"], close_fds=False)'",
    'python3 -c \'import os; os.wait4(os.posix_spawn("./x.sh", ["x"], os.environ), 0)\'',
    'python3 -c \'import os; os.wait4(os.posix_spawnp("sh", ["sh", "x.sh"], os.environ), 0)\'',
    # CPython searches PATH itself: a PATH entry without python3 must fail as ENOENT, so the
    # next entry is tried.
    'python3 -c \'import subprocess; subprocess.run(["python3", "x.py"])\'',
    # A clean environment does not lose the shim.
    "python3 -c 'import subprocess; subprocess.run([\"/workspace/x.sh\"], env={})'",
    "env -i /workspace/x.sh",
    "timeout 5 python3 x.py",
    "sh < x.sh",
    "python3 - < x.py",
]
VERIFIER_COMMANDS = [
    "id -u",
    "/usr/bin/id -u",
    "sh -c 'id -u'",
    "python3 -c 'import os; print(os.getuid())'",
    # The script is the verifier's; the agent's file is its data.
    "cp /workspace/x.py /tmp/v.py && python3 /tmp/v.py /workspace/x.sh",
    "env -i /usr/bin/id -u",
]


def test_agent_programs_run_as_the_agent():
    how, out = arun(_uids(AGENT_COMMANDS))
    assert how is GradingIsolation.TWO_UID
    assert out == [str(AGENT_UID)] * len(AGENT_COMMANDS), list(
        zip(AGENT_COMMANDS, out, strict=True)
    )


def test_system_programs_and_verifier_scripts_stay_the_verifier():
    how, out = arun(_uids(VERIFIER_COMMANDS))
    assert how is GradingIsolation.TWO_UID
    assert out == ["0"] * len(VERIFIER_COMMANDS), list(zip(VERIFIER_COMMANDS, out, strict=True))


def test_the_verifier_maps_to_its_own_host_uid_and_writes_the_agents_files():
    async def go() -> tuple[int, int, str]:
        async with create_sandbox(SandboxSpec(grading=True, files=FILES)) as sb:
            _agent_owned(sb.host_workspace)
            done = await sb.exec("echo verdict > /workspace/v.txt && echo more >> x.py && id -G")
            st = os.stat(sb.host_workspace / "v.txt")
            return st.st_uid, st.st_gid, done.stdout.strip()

    uid, gid, groups = arun(go())
    assert (uid, gid) == (VERIFIER_HOST_UID, VERIFIER_HOST_UID)
    assert groups == "0"  # no supplementary group of the host's root came along


def test_an_agent_program_has_no_capabilities_and_cannot_reach_the_verifier():
    probe = (
        "#!/bin/sh\n"
        "grep -E '^Cap(Prm|Eff|Amb)' /proc/self/status | awk '{print $2}' | sort -u\n"
        "kill -0 1 2>/dev/null && echo signalled\n"
        "cat /proc/1/environ >/dev/null 2>&1 && echo environ\n"
        "echo x > /tmp/verifier/r 2>/dev/null && echo wrote\n"
        "unshare -U true 2>/dev/null && echo userns\n"
        "echo -n 1 > /proc/self/comm 2>/dev/null && echo proc-writable\n"
        "true\n"
    )

    async def go() -> str:
        async with create_sandbox(SandboxSpec(grading=True, files={"p.sh": probe})) as sb:
            _agent_owned_probe(sb.host_workspace / "p.sh")
            done = await sb.exec("mkdir -m 0755 /tmp/verifier && ./p.sh")
            return done.stdout.strip()

    assert arun(go()) == "0000000000000000"


def _agent_owned_probe(path: Path) -> None:
    os.chown(path, AGENT_UID, AGENT_UID)
    path.chmod(0o755)


def test_nested_user_namespaces_are_refused_to_the_verifier_too():
    async def go() -> str:
        async with create_sandbox(SandboxSpec(grading=True)) as sb:
            return (await sb.exec("unshare -U true || echo refused")).stdout.strip()

    assert arun(go()) == "refused"


def test_git_in_an_agent_repository_runs_its_hooks_and_fsmonitor_as_the_agent():
    """The agent's .git/config names an fsmonitor and a hook; `git status` and `git commit`
    run them, as the agent. grading_env() turns both off altogether."""
    setup = (
        "git init -q /workspace/repo && cd /workspace/repo"
        " && git config core.fsmonitor 'id -u >> /tmp/ran; false; #'"
        " && printf '#!/bin/sh\\nid -u >> /tmp/ran\\n' > .git/hooks/pre-commit"
        " && chmod +x .git/hooks/pre-commit && chmod 1777 /tmp"
    )
    run = (
        "cd /workspace/repo && git status -s >/dev/null 2>&1;"
        " git -c user.name=a -c user.email=b commit -q --allow-empty -m x >/dev/null 2>&1;"
        " sort -u /tmp/ran 2>/dev/null; rm -f /tmp/ran"
    )

    async def go() -> tuple[str, str]:
        async with create_sandbox(SandboxSpec(grading=True)) as sb:
            assert (await sb.exec(setup)).ok
            _agent_owned(sb.host_workspace)
            plain = (await sb.exec(run)).stdout.strip()
            hardened = (await sb.exec(run, env=grading_env())).stdout.strip()
            return plain, hardened

    plain, hardened = arun(go())
    assert plain == str(AGENT_UID)
    assert hardened == ""


def test_make_in_an_agent_tree_runs_as_the_agent():
    async def go() -> str:
        spec = SandboxSpec(grading=True, files={"Makefile": "all:\n\t@id -u\n"})
        async with create_sandbox(spec) as sb:
            _agent_owned_probe(sb.host_workspace / "Makefile")
            return (await sb.exec("make -s && cd /tmp && make -s -C /workspace")).stdout

    assert arun(go()).split() == [str(AGENT_UID)] * 2


def test_a_script_the_agent_made_read_only_still_runs_as_the_agent():
    """The agent made its script and its directory read-only for itself: still its own
    (ownership decides, not only writability)."""

    async def go() -> str:
        async with create_sandbox(SandboxSpec(grading=True, files=FILES)) as sb:
            _agent_owned(sb.host_workspace)
            (sb.host_workspace / "sub" / "y.sh").chmod(0o505)
            (sb.host_workspace / "sub").chmod(0o555)
            return (await sb.exec("sub/y.sh")).stdout.strip()

    assert arun(go()) == str(AGENT_UID)


def test_networked_grading_has_two_uids_and_its_network():
    async def go() -> tuple[GradingIsolation, str]:
        async with create_sandbox(SandboxSpec(grading=True, network=True, files=FILES)) as sb:
            _agent_owned(sb.host_workspace)
            done = await sb.exec("id -u; ./x.sh; cat /proc/net/route | wc -l")
            return sb.grading_isolation, done.stdout.split()

    how, out = arun(go())
    assert how is GradingIsolation.TWO_UID
    assert out[:2] == ["0", str(AGENT_UID)]


def test_python_command_server_keeps_the_split(monkeypatch):
    monkeypatch.setenv("SKYRL_SANDBOX_SERVER", "python")
    how, out = arun(_uids(["id -u", "./x.sh", "python3 x.py"]))
    assert how is GradingIsolation.TWO_UID
    assert out == ["0", str(AGENT_UID), str(AGENT_UID)]


def test_forced_single_uid_says_so_and_keeps_proc_read_only(monkeypatch, caplog):
    monkeypatch.setenv(GRADING_UIDS_ENV, "off")
    monkeypatch.setattr("skyrl_sdk.sandboxes.bwrap._warned_single_uid", False)

    async def go() -> tuple[GradingIsolation, str]:
        async with create_sandbox(SandboxSpec(grading=True, files=FILES)) as sb:
            _agent_owned(sb.host_workspace)
            done = await sb.exec("id -u; ./x.sh; echo x > /proc/self/comm || echo ro")
            return sb.grading_isolation, done.stdout.split()

    with caplog.at_level("WARNING"):
        how, out = arun(go())
        arun(go())
    assert how is GradingIsolation.SINGLE_UID
    assert out == [str(AGENT_UID), str(AGENT_UID), "ro"]
    assert sum("single uid" in r.getMessage() for r in caplog.records) == 1


def test_not_grading_sandboxes_are_unchanged_but_hide_the_kernel_command_line():
    async def go() -> tuple[GradingIsolation, str]:
        async with create_sandbox(SandboxSpec()) as sb:
            done = await sb.exec("id -u; wc -c < /proc/cmdline")
            return sb.grading_isolation, done.stdout.split()

    how, out = arun(go())
    assert how is GradingIsolation.NOT_GRADING
    assert out == [str(AGENT_UID), "0"]


def test_an_image_root_gets_two_uids_when_its_sh_loads_the_shim():
    how, out = arun(_uids(["id -u", "./x.sh"], rootfs="/"))
    assert (how, out) == (GradingIsolation.TWO_UID, ["0", str(AGENT_UID)])


def test_an_image_whose_libc_refuses_the_shim_runs_with_one_uid(monkeypatch):
    async def refused(self) -> bool:
        return False

    monkeypatch.setattr(BwrapSandbox, "_shim_loads", refused)
    how, out = arun(_uids(["id -u", "./x.sh"], rootfs="/"))
    # Commands still run (no shim in their LD_PRELOAD), all as the verifier.
    assert (how, out) == (GradingIsolation.SINGLE_UID, ["0", "0"])


def test_a_system_interpreter_started_through_the_agents_symlink_runs_as_the_agent():
    """/workspace/bin/python3 -> /usr/bin/python3 with a pyvenv.cfg next to it: Python would
    take its prefix from the agent's directory."""

    async def go() -> str:
        async with create_sandbox(
            SandboxSpec(grading=True, files={"bin/pyvenv.cfg": "x = 1\n"})
        ) as sb:
            (sb.host_workspace / "bin" / "python3").symlink_to("/usr/bin/python3")
            _agent_owned(sb.host_workspace)
            code = "import os; print(os.getuid())"
            done = await sb.exec(["/workspace/bin/python3", "-c", code], env=grading_env())
            return done.stdout.strip()

    assert arun(go()) == str(AGENT_UID)


def test_git_options_before_dash_c_do_not_hide_the_agents_tree():
    setup = (
        "git init -q /workspace/repo && git -C /workspace/repo config core.fsmonitor"
        " 'id -u >> /tmp/ran; false; #' && chmod 1777 /tmp"
    )
    run = "git -c color.ui=never -C /workspace/repo status -s >/dev/null 2>&1; sort -u /tmp/ran"

    async def go() -> str:
        async with create_sandbox(SandboxSpec(grading=True)) as sb:
            assert (await sb.exec(setup)).ok
            _agent_owned(sb.host_workspace)
            return (await sb.exec(run, cwd="/")).stdout.strip()

    assert arun(go()) == str(AGENT_UID)


def test_agent_programs_see_only_their_own_processes_and_the_verifier_sees_all():
    lister = (
        "#!/bin/sh\nsleep 5 &\n"
        "for p in /proc/[0-9]*; do stat -c %u $p; done 2>/dev/null | sort -u | tr '\\n' ' '\n"
        "echo; ls -d /proc/1 2>&1 | head -1\n"
    )

    async def go() -> tuple[list[str], str, str]:
        async with create_sandbox(SandboxSpec(grading=True, files={"l.sh": lister})) as sb:
            _agent_owned_probe(sb.host_workspace / "l.sh")
            agent = await sb.exec("./l.sh", end_all=True)
            verifier = await sb.exec(
                "./l.sh >/dev/null; ps -eo user:12,comm | grep -c sleep", end_all=True
            )
            caps = await sb.exec("grep CapBnd /proc/self/status")
            return agent.stdout.split("\n")[:2], verifier.stdout.strip(), caps.stdout.split()[1]

    agent, verifier_sees, bounding = arun(go())
    assert agent[0].split() == [str(AGENT_UID)]  # its own processes only: no verifier, no PID 1
    assert "No such file" in agent[1]
    assert verifier_sees == "1"  # the verifier still sees (and can end) the agent's processes
    assert int(bounding, 16) == 0xEB  # the six verifier capabilities, nothing else


@pytest.mark.parametrize("server", ["native", "python"])
def test_a_script_too_long_for_execve_runs_in_a_grading_sandbox(monkeypatch, server):
    """Above 128 KiB a `sh -c` script goes to the server as a file (argv cannot hold it),
    also behind the helper's `exec --` prefix."""
    monkeypatch.setenv("SKYRL_SANDBOX_SERVER", server)
    script = "x=1\n" * 60_000 + "id -u\n"

    async def go() -> tuple[int, str]:
        async with create_sandbox(SandboxSpec(grading=True)) as sb:
            done = await sb.exec(script)
            return done.exit_code, done.stdout.strip()

    assert arun(go()) == (0, "0")


def test_a_verifier_script_whose_interpreter_is_the_agents_runs_as_the_agent():
    """/tmp/check (the verifier's) starts with #!/workspace/x.sh: the kernel would run the
    agent's interpreter with the exec's uid."""
    check = "printf '#!/workspace/x.sh\\n' > /tmp/check && chmod 755 /tmp/check && /tmp/check"
    how, out = arun(_uids([check]))
    assert (how, out) == (GradingIsolation.TWO_UID, [str(AGENT_UID)])


def test_no_exec_shim_means_one_uid(monkeypatch):
    """No C compiler (or a failed build): grading still runs, with one uid, and says so."""

    def no_compiler():
        raise BackendUnavailable("the grading helper is unavailable: no C compiler")

    monkeypatch.setattr("skyrl_sdk.sandboxes._native.build_grading", no_compiler)
    monkeypatch.setattr("skyrl_sdk.sandboxes._native.grading_settled", lambda: True)
    how, out = arun(_uids(["id -u", "./x.sh"]))
    assert (how, out) == (GradingIsolation.SINGLE_UID, [str(AGENT_UID), str(AGENT_UID)])
