"""The seccomp filter of a bwrap sandbox, as a classic BPF program generated here.

Sandboxed code runs as the same uid as the in-sandbox command server (PID 1). The server
makes itself non-dumpable, which stops `ptrace` and `/proc/1/mem`. As in Docker's default
profile (kernel >= 4.8), `ptrace` and `process_vm_readv/writev` are allowed otherwise, so
`PTRACE_TRACEME` anti-debug checks, gdb and strace work on the sandbox's own processes; the
kernel still refuses the server (non-dumpable) and, in a two-uid grading sandbox, the
verifier (another uid; nobody holds CAP_SYS_PTRACE). A single-uid grading sandbox, where
agent programs share the verifier's uid, and older kernels keep them refused. The filter
also closes what dumpability does not cover: nested user namespaces
(where the code would hold every capability), the kernel keyring, eBPF, perf events, mounts,
userfaultfd (a tool for kernel races) and kexec. A refused call fails with EPERM, so programs
see an ordinary permission error rather than a crash.

`clone3` fails with ENOSYS instead: its flags live in memory that a classic BPF filter cannot
read, and on ENOSYS glibc falls back to `clone`, whose flags (a register) are checked:
`clone` with `CLONE_NEWUSER` is refused.

The program checks the architecture first. It knows x86_64 and aarch64; x32 system calls
(x86_64 numbers with bit 30 set) are refused, and a process that makes system calls of any
other architecture (e.g. i386 through `int 0x80`, whose numbers differ) is killed, so no
alternate syscall table slips past the lists.

bwrap loads it with `--seccomp FD` (a file holding the raw `struct sock_filter` array) just
before it executes the command server, so it covers the server and everything it starts.
"""

from __future__ import annotations

import errno
import os
import struct
from dataclasses import dataclass
from functools import cache

__all__ = [
    "BLOCKED_SYSCALLS",
    "CLONE_NEWUSER",
    "TRACE_SYSCALLS",
    "Arch",
    "filter_fd",
    "filter_program",
    "ptrace_safe_kernel",
]

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000
CLONE_NEWUSER = 0x10000000

SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000

# Classic BPF opcodes.
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K

# Offsets in `struct seccomp_data`: nr, arch, then args[6] as u64 (low word first: both
# supported architectures are little-endian).
_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0_LO = 16

TRACE_SYSCALLS = ("ptrace", "process_vm_readv", "process_vm_writev")
"""Tracing calls: allowed where Docker's default profile allows them (kernel >= 4.8, whose
seccomp re-checks a call a tracer changed), refused with EPERM otherwise and in a
single-uid grading sandbox (see `filter_program`)."""

BLOCKED_SYSCALLS = (
    "pidfd_getfd",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "mount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    "userfaultfd",
    "kexec_load",
    "kexec_file_load",
)
"""System calls refused with EPERM in every bwrap sandbox (besides `TRACE_SYSCALLS` where
they are refused)."""


def ptrace_safe_kernel(release: str | None = None) -> bool:
    """True on Linux >= 4.8: seccomp runs again after a tracer's change to a system call, so
    a traced process cannot be steered past the filter (Docker's condition for ptrace)."""
    text = release if release is not None else os.uname().release
    try:
        major, minor = (int(part) for part in text.split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (4, 8)


@dataclass(frozen=True)
class Arch:
    """One architecture's system call numbers."""

    name: str
    """`uname -m` name."""
    audit: int
    """AUDIT_ARCH_* value seen in `seccomp_data.arch`."""
    numbers: dict[str, int]
    """System call name -> number (those this filter uses)."""


_SHARED = {  # numbers shared by both tables (the unified range above 424)
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "clone3": 435,
    "pidfd_getfd": 438,
    "mount_setattr": 442,
}

X86_64 = Arch(
    "x86_64",
    AUDIT_ARCH_X86_64,
    {
        **_SHARED,
        "clone": 56,
        "ptrace": 101,
        "pivot_root": 155,
        "mount": 165,
        "umount2": 166,
        "kexec_load": 246,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "unshare": 272,
        "perf_event_open": 298,
        "setns": 308,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "kexec_file_load": 320,
        "bpf": 321,
        "userfaultfd": 323,
    },
)
AARCH64 = Arch(
    "aarch64",
    AUDIT_ARCH_AARCH64,
    {
        **_SHARED,
        "umount2": 39,
        "mount": 40,
        "pivot_root": 41,
        "unshare": 97,
        "kexec_load": 104,
        "ptrace": 117,
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "clone": 220,
        "perf_event_open": 241,
        "setns": 268,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "bpf": 280,
        "userfaultfd": 282,
        "kexec_file_load": 294,
    },
)
ARCHES = (X86_64, AARCH64)


class _Assembler:
    """Classic BPF with symbolic forward jumps (`"label"`, resolved by `assemble`)."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def load(self, offset: int) -> None:
        self.code.append((_LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, value: int, if_true: int | str, if_false: int | str = 0) -> None:
        self.code.append((op, if_true, if_false, value))

    def ret(self, value: int) -> None:
        self.code.append((_RET_K, 0, 0, value))

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (op, jt, jf, k) in enumerate(self.code):
            jt_n = self._offset(index, jt)
            jf_n = self._offset(index, jf)
            out += struct.pack("=HBBI", op, jt_n, jf_n, k)
        return bytes(out)

    def _offset(self, index: int, target: int | str) -> int:
        if isinstance(target, int):
            return target
        offset = self.labels[target] - index - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"BPF jump to {target} out of range ({offset})")
        return offset


@cache
def filter_program(allow_trace: bool = False) -> bytes:
    """The filter as raw `struct sock_filter` entries (8 bytes each, native byte order).

    Args:
        allow_trace: Let `TRACE_SYSCALLS` through (`PTRACE_TRACEME`, gdb and strace on the
            sandbox's own processes). The kernel's own checks still stand: a process may
            trace only a dumpable one of its own uid, so the non-dumpable command server
            stays out of reach, and so does a two-uid grading sandbox's verifier (another
            uid, with no CAP_SYS_PTRACE anywhere). Callers pass False for a single-uid
            grading sandbox, where agent programs share the verifier's uid.
    """
    blocked = BLOCKED_SYSCALLS if allow_trace else TRACE_SYSCALLS + BLOCKED_SYSCALLS
    asm = _Assembler()
    asm.load(_OFF_ARCH)
    for arch in ARCHES:
        asm.jump(_JEQ_K, arch.audit, arch.name)
    asm.ret(SECCOMP_RET_KILL_PROCESS)
    for arch in ARCHES:
        asm.label(arch.name)
        asm.load(_OFF_NR)
        if arch is X86_64:
            asm.jump(_JGE_K, X32_SYSCALL_BIT, "eperm")
        for name in blocked:
            asm.jump(_JEQ_K, arch.numbers[name], "eperm")
        asm.jump(_JEQ_K, arch.numbers["clone3"], "enosys")
        asm.jump(_JEQ_K, arch.numbers["clone"], "clone")
        asm.ret(SECCOMP_RET_ALLOW)
    asm.label("clone")
    asm.load(_OFF_ARG0_LO)  # clone's flags are its first argument on both architectures
    asm.jump(_JSET_K, CLONE_NEWUSER, "eperm")
    asm.ret(SECCOMP_RET_ALLOW)
    asm.label("eperm")
    asm.ret(SECCOMP_RET_ERRNO | errno.EPERM)
    asm.label("enosys")
    asm.ret(SECCOMP_RET_ERRNO | errno.ENOSYS)
    return asm.assemble()


def supported() -> bool:
    """True if this machine's architecture is one the filter knows."""
    return os.uname().machine in {a.name for a in ARCHES}


def filter_fd(allow_trace: bool = False) -> int:
    """A new readable descriptor (a memfd at offset 0) holding the program, for bwrap.

    Args:
        allow_trace: As for `filter_program`; honoured only where `ptrace_safe_kernel()`.
    """
    program = filter_program(allow_trace and ptrace_safe_kernel())
    fd = os.memfd_create("skyrl-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
