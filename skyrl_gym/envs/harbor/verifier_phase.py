"""The verifier phase of a Harbor trial: test.sh in a fresh grading sandbox, from a process
environment the agent never wrote, then its verdict read once that sandbox is closed (the
rules are in `runtime`'s docstring and docs/security.md)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from skyrl_gym.envs.harbor.dockerfile import inside
from skyrl_gym.envs.harbor.trial_paths import (
    AGENT_LOGS,
    ARTIFACTS,
    LOGS,
    SOLUTION,
    TESTS,
    VERIFIER_LOGS,
    fresh_dir,
    give,
)
from skyrl_gym.envs.harbor.verdict import (
    REWARD_FILES,
    RewardFileError,
    VerifierError,
    VerifierResult,
    missing_commands,
    primary_reward,
    read_rewards,
)
from skyrl_sdk.sandboxes import (
    VERIFIER_HOST_UID,
    Backend,
    ExecResult,
    GradingIsolation,
    Sandbox,
    SandboxError,
    chown_tree,
    grading_env,
    read_regular_file,
)
from skyrl_sdk.sandboxes.bwrap import BwrapSandbox
from skyrl_sdk.sandboxes.spec import DEFAULT_PATH

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.runtime import HarborRuntime

_OUTPUT_TAIL = 4000

# Environment variables that name code to load or run: in the verifier, their entries that
# lie in a directory the agent could write are dropped.
CODE_PATH_VARS = (
    "PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "BASH_ENV",
    "ENV",
    "PERL5LIB",
    "PERLLIB",
    "RUBYLIB",
    "NODE_PATH",
    "GEM_HOME",
    "GEM_PATH",
    "CLASSPATH",
)


SINGLE_UID_NOTE = (
    "single_uid: the verifier sandbox had no second uid (not root, no exec shim, or the docker "
    "backend), so the programs test.sh ran had the verifier's uid: a reward file they wrote "
    "cannot be told from test.sh's own (only reward.json and reward.txt disagreeing is caught)"
)
"""The note a trial gets when its verifier sandbox had `GradingIsolation.SINGLE_UID`."""


def agent_writable(rt: HarborRuntime, path: str) -> bool:
    """True when the agent phase could have written `path` (or it is relative, i.e. the
    verifier's working directory): the working directory, `/logs`, `/tmp`, `/solution`."""
    if not path.startswith("/"):
        return True
    roots = (rt.workdir, rt.mount_dir, *rt.roots, LOGS, "/tmp", "/var/tmp", "/dev/shm")
    roots += (SOLUTION,)
    return any(inside(os.path.normpath(path), root) for root in roots)


def verifier_env(rt: HarborRuntime) -> dict[str, str]:
    """The environment of `test.sh`: the task's variables (Dockerfile ENV,
    `[environment].env`, `[verifier].env`) hardened by `grading_env` (HOME=/tmp,
    PYTHONNOUSERSITE, PYTHONSAFEPATH, ...), with every agent-writable directory dropped
    from the variables that name code to load (`CODE_PATH_VARS`). The task's own PATH is
    kept (it may name the image's tools), minus those directories, plus the system PATH."""
    task_env = {**rt._env, **rt.task.verifier.env}
    env = grading_env(task_env)
    for name in CODE_PATH_VARS:
        value = task_env.get(name)
        if value is None:
            continue
        sep = " " if name == "LD_PRELOAD" and ":" not in value else ":"
        kept = [p for p in value.split(sep) if p and not rt.agent_writable(p)]
        if name == "PATH":
            kept += [p for p in DEFAULT_PATH.split(":") if p not in kept]
        if kept:
            env[name] = sep.join(kept)
        else:
            env.pop(name, None)
    return env


async def run_verifier(rt: HarborRuntime, started: float) -> VerifierResult:
    """The verifier phase of `rt` (its agent phase over): tests/ uploaded only now, test.sh
    run in a fresh grading sandbox, which is closed before its verdict is read back."""
    task = rt.task
    timeout = task.verifier.timeout_s
    # Stale rewards never count: the host's /logs/verifier starts empty (bwrap binds it;
    # docker's is the container's own, emptied of reward files below before test.sh).
    verifier_dir = fresh_dir(rt.verifier_logs_dir)
    # The script is run through its own #! line: the docker sandbox's /tmp is noexec.
    # `exec`: test.sh's interpreter is the command server's own child, so the status the
    # server reports is test.sh's own (a signal that killed it is not hidden behind a shell).
    run = rt.script_command(task.tests_dir / "test.sh", f"{TESTS}/test.sh")
    command = (
        f"chmod +x {TESTS}/test.sh 2>/dev/null; exec {run} > {VERIFIER_LOGS}/test-stdout.txt 2>&1"
    )
    # The same hardened environment is the sandbox's and the command's, so no variable
    # of the agent phase's environment is left over underneath it.
    env = rt.verifier_env()
    sandbox: Sandbox | None = None
    isolation: GradingIsolation | None = None
    try:
        if rt.backend is Backend.BWRAP:
            sandbox = await _open_bwrap_grading(rt, env, verifier_dir)
        else:
            sandbox = await rt._open({}, env, grading=True)
            await sandbox.upload(task.tests_dir, rt._real(TESTS))
            await remove_reward_files(rt, sandbox)
        isolation = sandbox.grading_isolation
        _hand_to_verifier(rt, isolation, verifier_dir)
        ran = await _run_test_sh(rt, sandbox, command, env, verifier_dir)
    except (TimeoutError, SandboxError, OSError) as e:
        if isinstance(e, TimeoutError):
            return VerifierResult(
                None,
                VerifierError.TIMEOUT,
                f"test.sh ran past {timeout:g}s",
                duration_s=time.monotonic() - started,
                isolation=isolation,
            )
        return VerifierResult(
            None,
            VerifierError.SANDBOX_ERROR,
            f"{type(e).__name__}: {e}",
            duration_s=time.monotonic() - started,
            isolation=isolation,
        )
    finally:
        # Closed before anything is read back: whatever test.sh (or an agent program it
        # ran) left running is dead, so no file below changes after this point.
        if sandbox is not None:
            await sandbox.close()
    output = _output_tail(verifier_dir)
    return _verdict(rt, ran, output, verifier_dir, isolation, started)


async def _open_bwrap_grading(
    rt: HarborRuntime, env: Mapping[str, str], verifier_dir: Path
) -> Sandbox:
    """bwrap: the grading sandbox, with the task's tests/ copied in only now and bound at
    /tests (read-only as `run_verifier`'s rules say) and an empty /logs/verifier."""
    tests = rt._work / "tests"
    shutil.rmtree(tests, ignore_errors=True)
    shutil.copytree(rt.task.tests_dir, tests)  # uploaded only now
    tests.chmod(0o755)
    (tests / "test.sh").chmod(0o755)
    give(tests)
    binds = {
        AGENT_LOGS: rt.agent_logs_dir,
        VERIFIER_LOGS: verifier_dir,
        ARTIFACTS: rt.artifacts_dir,
    }
    # A program test.sh runs has its uid. test.sh itself is always read-only (bash
    # reads a script as it goes, so rewriting the rest of it would run the
    # program's own verdict); under require_exit_zero all of /tests is (no helper
    # or test file swapped, no conftest.py planted, before test.sh uses it).
    if rt.strict_verifier:
        ro_binds = {TESTS: tests}
    else:
        binds[TESTS] = tests
        ro_binds = {f"{TESTS}/test.sh": tests / "test.sh"}
    return await rt._open(binds, env, grading=True, ro_binds=ro_binds)


def _hand_to_verifier(
    rt: HarborRuntime, isolation: GradingIsolation | None, verifier_dir: Path
) -> None:
    """Two-uid grading (bwrap): /tests and /logs/verifier become the verifier's; else the
    trial gets the `SINGLE_UID_NOTE`."""
    if isolation is GradingIsolation.TWO_UID and rt.backend is Backend.BWRAP:
        # /tests and /logs/verifier belong to the verifier (its uid 0 inside), mode
        # 0755, before test.sh starts: test.sh is not agent code (the exec shim runs
        # a script in an agent-owned tree as the agent), and the programs it runs
        # from the agent's paths have the agent's uid: they can neither write a
        # reward file nor swap one in, nor change a test file.
        chown_tree(rt._work / "tests", VERIFIER_HOST_UID)
        os.chown(verifier_dir, VERIFIER_HOST_UID, VERIFIER_HOST_UID)
        verifier_dir.chmod(0o755)
    else:
        rt.notes.append(SINGLE_UID_NOTE)


async def _run_test_sh(
    rt: HarborRuntime,
    sandbox: Sandbox,
    command: str,
    env: Mapping[str, str],
    verifier_dir: Path,
) -> ExecResult:
    """Run test.sh (`command`) in the grading sandbox, within `[verifier].timeout_sec`;
    docker: /logs/verifier is then downloaded into `verifier_dir`."""
    timeout = rt.task.verifier.timeout_s
    argv = [rt._shell, "-c", command]
    if isinstance(sandbox, BwrapSandbox):
        # The moment test.sh exits, the server (PID 1) kills whatever it left running,
        # so nothing can rewrite the reward files after its verdict; it says how many.
        call = sandbox.exec(argv, timeout=timeout, env=env, end_all=True)
    else:
        call = sandbox.exec(argv, timeout=timeout, env=env)
    ran = await asyncio.wait_for(call, timeout + 30)
    if rt.backend is Backend.DOCKER:
        try:
            await sandbox.download(rt._real(VERIFIER_LOGS), verifier_dir.parent)
        except Exception as e:
            # The verdict could not be read back: a sandbox failure, never test.sh leaving
            # no reward file (`reward_file_not_found`). A timeout stays a timeout.
            if not ran.timed_out:
                raise SandboxError(
                    f"cannot copy {VERIFIER_LOGS} out of the container: "
                    f"{type(e).__name__}: {str(e)[:300]}"
                ) from e
    return ran


def _output_tail(verifier_dir: Path) -> str:
    """The end of test-stdout.txt ("" when it cannot be read as a regular file)."""
    output = ""
    with contextlib.suppress(OSError):  # a symlink or a FIFO is not read (UnsafeFileError)
        tail = read_regular_file(
            "test-stdout.txt", max_bytes=4 * _OUTPUT_TAIL, tail=True, under=verifier_dir
        )
        output = tail.decode("utf-8", errors="replace")[-_OUTPUT_TAIL:]
    return output


def _verdict(
    rt: HarborRuntime,
    ran: ExecResult,
    output: str,
    verifier_dir: Path,
    isolation: GradingIsolation | None,
    started: float,
) -> VerifierResult:
    """What test.sh's run gives, read once its sandbox is closed: its reward files (the
    verifier's own), void when it was killed or (`strict_verifier`) did not end cleanly."""
    timeout = rt.task.verifier.timeout_s
    duration = time.monotonic() - started
    if ran.timed_out:
        return VerifierResult(
            None,
            VerifierError.TIMEOUT,
            f"test.sh ran past [verifier].timeout_sec={timeout:g}s and was killed",
            exit_code=None,
            duration_s=duration,
            output_tail=output,
            isolation=isolation,
        )
    left, orphaned = ran.left_running, ran.orphaned
    # Two-uid grading: a reward file counts only if the verifier's uid wrote it (docker
    # downloads copies, whose host owner says nothing: one uid runs everything there).
    owner = VERIFIER_HOST_UID if isolation is GradingIsolation.TWO_UID else None
    try:
        rewards = read_rewards(verifier_dir, verifier_uid=owner)
    except RewardFileError as e:
        rewards, problem = None, e
    counts = {"left_running": left, "orphaned": orphaned, "isolation": isolation}
    void = void_reason(rt, ran.exit_code, ran.oom_killed, left, orphaned)
    if void is not None:
        kind, message = void
        if rewards is not None:
            message += f"; the reward it left ({primary_reward(rewards):g}) is void"
        return VerifierResult(None, kind, message, ran.exit_code, duration, output, **counts)
    # A verifier that could not even start its tools is its own error, not a reward 0:
    # only when it gave nothing better (a reward above 0 means it did run), so output an
    # agent program prints cannot turn a passing reward into an error.
    missing = missing_commands(output)
    if missing and (rewards is None or primary_reward(rewards) == 0):
        names = ", ".join(f"`{n}`" for n in missing[:3])
        left = "no reward" if rewards is None else "a reward of 0"
        message = (
            f"test.sh could not run {names}: command not found (exit {ran.exit_code}); it "
            f"left {left}. Install it in the task's environment (offline: a root that has it)"
        )
        return VerifierResult(
            None,
            VerifierError.COMMAND_NOT_FOUND,
            message,
            ran.exit_code,
            duration,
            output,
            **counts,
        )
    if rewards is None:
        return VerifierResult(
            None, problem.kind, str(problem), ran.exit_code, duration, output, **counts
        )
    return VerifierResult(rewards, None, "", ran.exit_code, duration, output, **counts)


async def remove_reward_files(rt: HarborRuntime, sandbox: Sandbox) -> None:
    """Docker: no reward file may be in the container's /logs/verifier before test.sh
    starts (raises `SandboxError` when one cannot be removed: a stale one would count)."""
    paths = " ".join(f"{rt._real(VERIFIER_LOGS)}/{name}" for name in REWARD_FILES)
    gone = await sandbox.exec(
        f"rm -rf {paths}; for f in {paths}; do if [ -e $f ] || [ -L $f ]; then exit 1; fi; done",
        timeout=30,
    )
    if not gone.ok:
        raise SandboxError(f"cannot remove a stale reward file: {gone.output[-300:]}")


def void_reason(
    rt: HarborRuntime, exit_code: int, oom_killed: bool, left: int | None, orphaned: int | None
) -> tuple[VerifierError, str] | None:
    """Why test.sh's reward file is not its verdict, or None when it is."""
    if exit_code < 0:
        try:
            name = f" ({signal.Signals(-exit_code).name})"
        except ValueError:
            name = ""
        how = ", out of memory" if oom_killed else ""
        return (
            VerifierError.KILLED,
            f"test.sh did not end on its own: signal {-exit_code}{name}{how} killed it",
        )
    if not rt.strict_verifier:
        return None
    if exit_code != 0:
        return (
            VerifierError.EXIT_NONZERO,
            f"test.sh exited {exit_code} and the task requires exit 0 (require_exit_zero)",
        )
    if left or orphaned:
        return (
            VerifierError.STRAY_PROCESSES,
            f"processes test.sh started outlived their parent ({left or 0} still running "
            f"at its exit, killed then; {orphaned or 0} ended before it): they could have "
            "rewritten the reward after its verdict (require_exit_zero)",
        )
    return None
