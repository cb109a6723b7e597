"""Prints the key only when PTRACE_TRACEME succeeds (nobody traces it), as anti-debug code does."""

import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
child = os.fork()
if child == 0:
    os._exit(0 if libc.ptrace(0, 0, None, None) == 0 else 1)
_, status = os.waitpid(child, 0)
if status != 0:
    raise SystemExit("debugger detected")
print("key-" + str(sum(map(ord, "skyrl"))))
