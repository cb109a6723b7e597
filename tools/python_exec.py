"""`python`: run code in a persistent interpreter inside a sandbox (state survives across calls).

The interpreter is a small daemon started in the sandbox on first use. Each call hands it the
code through a FIFO pair with one cheap `exec` (no interpreter start per call). Like a notebook
cell, the value of a final expression is printed. A call that runs past its timeout is
interrupted; if the interpreter does not come back, it is killed and restarted, and the model
is told that its state was lost.
"""

from __future__ import annotations

import asyncio

from skyrl_sdk.sandboxes import Sandbox
from skyrl_sdk.tools.core import Tool, tool

DAEMON_DIR = "/tmp/.skyrl-python"

# Runs inside the sandbox (stdlib only; Python >= 3.6).
DAEMON_SOURCE = r'''
import ast, io, os, signal, sys, traceback

DIR = sys.argv[1]
LIMIT = int(sys.argv[2])


class ExecutionTimeout(BaseException):
    """Raised by the alarm; a BaseException so user `except Exception` cannot swallow it."""


def on_alarm(signum, frame):
    raise ExecutionTimeout("execution timed out")


def run(code, ns, timeout):
    tree = ast.parse(code, "<cell>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        exec(compile(tree, "<cell>", "exec"), ns)
        if last is not None:
            value = eval(compile(last, "<cell>", "eval"), ns)
            if value is not None:
                print(repr(value))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def cell(code, ns, timeout):
    capture = os.open(os.path.join(DIR, "capture"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    sys.stdout.flush(); sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(capture, 1); os.dup2(capture, 2)
    try:
        run(code, ns, timeout)
    except SyntaxError:
        traceback.print_exc(limit=0)
    except ExecutionTimeout:
        print("TimeoutError: execution timed out after %gs" % timeout, file=sys.stderr)
    except BaseException as e:  # the cell's error is output for the model
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
    finally:
        sys.stdout.flush(); sys.stderr.flush()
        os.dup2(saved[0], 1); os.dup2(saved[1], 2)
        os.close(saved[0]); os.close(saved[1])
    size = os.lseek(capture, 0, os.SEEK_END)
    os.lseek(capture, 0, os.SEEK_SET)
    head = os.read(capture, min(size, LIMIT))
    if size > LIMIT:
        head += b"\n[... %d bytes truncated ...]" % (size - LIMIT)
    os.close(capture)
    return head


def serve():
    ns = {"__name__": "__main__"}
    # Unbuffered text streams: prints and tracebacks land in the order they happened.
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    signal.signal(signal.SIGALRM, on_alarm)
    while True:
        with open(os.path.join(DIR, "in"), "rb") as f:
            request = f.read()
        timeout_s, _, code = request.partition(b"\n")
        out = cell(code.decode("utf-8", "replace"), ns, float(timeout_s))
        with open(os.path.join(DIR, "out"), "wb") as f:
            f.write(out)


os.makedirs(DIR, exist_ok=True)
for name in ("in", "out"):
    path = os.path.join(DIR, name)
    if not os.path.exists(path):
        os.mkfifo(path, 0o600)
if os.fork() == 0:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    with open(os.path.join(DIR, "pid"), "w") as f:
        f.write(str(os.getpid()))
    serve()
else:
    print("ready")
'''

# Hand the cell over, then wait for the reply; a watcher ends the call (and this whole
# process group, including the blocked reader) as soon as the interpreter dies.
_CALL = """
pid=$(cat "$1/pid") || exit 3
( while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done; kill -9 0 ) &
cat > "$1/in" && cat "$1/out"
status=$?
kill $! 2>/dev/null
exit $status
"""


class PythonSession:
    """A persistent interpreter inside one sandbox."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        timeout_s: float = 30.0,
        python: str = "python3",
        output_limit: int = 64 * 1024,
    ):
        self.sandbox = sandbox
        self.timeout_s = timeout_s
        self.python = python
        self.output_limit = output_limit
        self._running = False
        self._lock = asyncio.Lock()

    async def _start(self) -> None:
        await self.sandbox.write_file(f"{DAEMON_DIR}/daemon.py", DAEMON_SOURCE)
        result = await self.sandbox.exec(
            [self.python, f"{DAEMON_DIR}/daemon.py", DAEMON_DIR, str(self.output_limit)],
            timeout=30,
        )
        if result.stdout.strip() != "ready":
            raise RuntimeError(f"the Python interpreter did not start: {result.output[-500:]}")
        self._running = True

    async def restart(self) -> None:
        """Kill the interpreter (losing its state); the next call starts a fresh one."""
        await self.sandbox.exec(
            ["sh", "-c", 'kill -9 "$(cat "$1/pid")" 2>/dev/null; rm -f "$1/pid"', "sh", DAEMON_DIR],
            timeout=10,
        )
        self._running = False

    async def run(self, code: str) -> str:
        """Run a cell; returns its output (and the traceback if it raised)."""
        async with self._lock:
            if not self._running:
                await self._start()
            request = f"{self.timeout_s:g}\n{code}"
            result = await self.sandbox.exec(
                ["sh", "-c", _CALL, "sh", DAEMON_DIR], stdin=request, timeout=self.timeout_s + 5
            )
            if result.timed_out or result.exit_code != 0:
                await self.restart()
                why = "did not stop at its timeout" if result.timed_out else "crashed"
                return (
                    f"{result.output}\n[the interpreter {why}; it was restarted and all "
                    "variables were lost]"
                ).lstrip()
            return result.stdout or "[no output]"


def python_tool(sandbox: Sandbox, *, timeout_s: float = 30.0, python: str = "python3") -> Tool:
    """A `python` tool bound to `sandbox`, keeping variables and imports across calls."""
    session = PythonSession(sandbox, timeout_s=timeout_s, python=python)

    async def python_(code: str) -> str:
        """Run Python code in a persistent interpreter; variables persist between calls.

        The value of a final expression is printed, as in a notebook.

        Args:
            code: Python source to execute.
        """
        return await session.run(code)

    return tool(python_, name="python")
