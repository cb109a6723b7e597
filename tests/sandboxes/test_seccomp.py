"""The generated seccomp program, run through a small classic-BPF interpreter here (both
architectures, whatever this machine is), and once for real inside bwrap."""

from __future__ import annotations

import errno
import struct

import pytest

from skyrl_sdk.sandboxes import create_sandbox
from skyrl_sdk.sandboxes.seccomp import (
    AARCH64,
    AUDIT_ARCH_X86_64,
    BLOCKED_SYSCALLS,
    CLONE_NEWUSER,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_ERRNO,
    SECCOMP_RET_KILL_PROCESS,
    X86_64,
    filter_program,
)
from tests.conftest import arun, needs_bwrap

EPERM = SECCOMP_RET_ERRNO | errno.EPERM
ENOSYS = SECCOMP_RET_ERRNO | errno.ENOSYS


def run_filter(arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """Evaluate the default program on one `struct seccomp_data`."""
    return _run_program(filter_program(), arch, nr, args)


def _run_program(code: bytes, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """Evaluate a program on one `struct seccomp_data` (the subset of cBPF it uses)."""
    args = (*args, 0, 0, 0, 0, 0, 0)[:6]
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
    prog = [struct.unpack_from("=HBBI", code, i) for i in range(0, len(code), 8)]
    pc, acc = 0, 0
    for _ in range(len(prog) + 1):
        op, jt, jf, k = prog[pc]
        if op == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif op == 0x06:
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[op]
            pc += 1 + (jt if taken else jf)
    raise AssertionError("the program did not return")


@pytest.mark.parametrize("arch", [X86_64, AARCH64], ids=lambda a: a.name)
def test_blocked_syscalls_get_eperm_and_others_pass(arch) -> None:
    for name in BLOCKED_SYSCALLS:
        assert run_filter(arch.audit, arch.numbers[name]) == EPERM, name
    assert run_filter(arch.audit, arch.numbers["clone3"]) == ENOSYS
    clone = arch.numbers["clone"]
    assert run_filter(arch.audit, clone, (CLONE_NEWUSER | 17,)) == EPERM
    assert run_filter(arch.audit, clone, (0x3D0F00,)) == SECCOMP_RET_ALLOW  # a thread
    for nr in (0, 1, 2, 3, 59, 60, 221, 231):  # read, write, open..., execve, exit
        if nr not in arch.numbers.values():
            assert run_filter(arch.audit, nr) == SECCOMP_RET_ALLOW


def test_x32_and_foreign_architectures_are_refused() -> None:
    assert run_filter(AUDIT_ARCH_X86_64, 0x40000000 | 101) == EPERM  # x32 ptrace
    assert run_filter(AUDIT_ARCH_X86_64, 0x40000000 | 1) == EPERM  # any x32 call
    assert run_filter(0x40000003, 26) == SECCOMP_RET_KILL_PROCESS  # i386 via int 0x80


@needs_bwrap
def test_the_filter_and_the_undumpable_server_are_live_in_a_bwrap_sandbox() -> None:
    async def go():
        async with create_sandbox() as sb:
            status = await sb.exec("grep -E '^(Seccomp|NoNewPrivs):' /proc/1/status")
            return status.stdout, sb.hardening

    status, hardening = arun(go())
    assert "Seccomp:\t2" in status
    assert hardening == {"nondumpable": True, "seccomp": True, "no_userns": True}


@pytest.mark.parametrize("arch", [X86_64, AARCH64], ids=lambda a: a.name)
def test_tracing_calls_pass_only_when_allowed(arch) -> None:
    from skyrl_sdk.sandboxes.seccomp import TRACE_SYSCALLS

    for name in TRACE_SYSCALLS:
        assert run_filter(arch.audit, arch.numbers[name]) == EPERM, name
        code = filter_program(True)
        assert code != filter_program(False)
    allowed = _run_program(filter_program(True), arch.audit, arch.numbers["ptrace"])
    assert allowed == SECCOMP_RET_ALLOW
    for name in BLOCKED_SYSCALLS:
        assert _run_program(filter_program(True), arch.audit, arch.numbers[name]) == EPERM, name


def test_ptrace_safe_kernel_reads_the_release() -> None:
    from skyrl_sdk.sandboxes.seccomp import ptrace_safe_kernel

    assert ptrace_safe_kernel("4.8.0") and ptrace_safe_kernel("6.1.0-13-amd64")
    assert not ptrace_safe_kernel("4.4.0-210-generic") and not ptrace_safe_kernel("3.10.0")
    assert not ptrace_safe_kernel("weird")
