"""Regenerate `tasks.jsonl` (run `python -m skyrl_gym.envs.terminal.make_tasks`).

The test suite checks, in real sandboxes, that every check fails on the starting workspace and
passes after the reference `solution` runs.

What a check may trust: the workspace is the agent's, so a check reads the agent's files as the
answer only. Expected values are computed here, at build time, and written into the check
(terminal-001 counts the ERROR lines of `LOG`, not of the `app.log` the agent can edit), and
no check imports the agent's code into the process whose exit status is the verdict:
terminal-009's test runs `fib` in a child process and compares what it prints (a module
imported in-process could simply `os._exit(0)`).
"""

from __future__ import annotations

import json
from pathlib import Path

LOG = "\n".join(
    f"2024-01-{d:02d} {'ERROR' if d % 3 == 0 else 'INFO'} job {d} {'failed' if d % 3 == 0 else 'ok'}"
    for d in range(1, 29)
)
LOG_ERRORS = sum("ERROR" in line for line in LOG.splitlines())
"""terminal-001's expected answer, counted here: the agent can edit app.log."""

# terminal-009: the agent's fib runs in a child process (`fib` is imported there, never
# into the test itself) and the test compares what it prints with values computed here. The
# child is a driver script the test creates in the workspace under a fresh name (O_EXCL: no
# planted file or link is used): a script in an agent-writable directory, which the grading
# sandbox's exec shim runs as the agent's uid, so fib.py never runs with the checker's uid.
FIB_CASES = (*range(10), 90)


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


FIB_VALUES = " ".join(str(_fib(n)) for n in FIB_CASES)
FIB_DRIVER = (
    f"import sys; sys.path.insert(0, '.'); from fib import fib; print(*map(fib, {FIB_CASES}))\n"
)
FIB_TEST = f"""\
import os
import subprocess
import sys
import tempfile

fd, driver = tempfile.mkstemp(prefix=".grader-fib-", suffix=".py", dir=".")
try:
    os.write(fd, {FIB_DRIVER!r}.encode())
    os.close(fd)
    os.chmod(driver, 0o644)
    run = subprocess.run([sys.executable, driver], capture_output=True, text=True, timeout=20)
finally:
    os.unlink(driver)
got = run.stdout.strip()
assert got == {FIB_VALUES!r}, f"fib printed {{got!r}} (exit {{run.returncode}}): {{run.stderr[-500:]}}"
print("ok")
"""

TASKS = [
    {
        "instruction": "Create a file hello.txt in the workspace containing exactly the line: hello world",
        "files": {},
        "check": 'test "$(cat hello.txt)" = "hello world"',
        "solution": "echo 'hello world' > hello.txt",
    },
    {
        "instruction": "Count the lines containing ERROR in app.log and write just that number to errors.txt.",
        "files": {"app.log": LOG + "\n"},
        "check": f'test "$(tr -d " \\n" < errors.txt)" = {LOG_ERRORS}',
        "solution": "grep -c ERROR app.log > errors.txt",
    },
    {
        "instruction": "calc.py should print the sum of its two integer arguments (python3 calc.py 2 3 prints 5) but it has a bug. Fix it.",
        "files": {"calc.py": "import sys\n\nprint(int(sys.argv[1]) - int(sys.argv[2]))\n"},
        "check": 'test "$(python3 calc.py 2 3)" = 5 && test "$(python3 calc.py 40 -2)" = 38',
        "solution": "sed -i 's/ - / + /' calc.py",
    },
    {
        "instruction": "Rename every .txt file in the docs directory to have the extension .md instead.",
        "files": {"docs/a.txt": "a\n", "docs/b.txt": "b\n", "docs/keep.rst": "k\n"},
        "check": "test -f docs/a.md && test -f docs/b.md && test -f docs/keep.rst && ! ls docs/*.txt 2>/dev/null",
        "solution": 'for f in docs/*.txt; do mv "$f" "${f%.txt}.md"; done',
    },
    {
        "instruction": "Write an executable shell script sum.sh that prints the sum of all its integer arguments (./sum.sh 1 2 3 prints 6).",
        "files": {},
        "check": 'test -x sum.sh && test "$(./sum.sh 1 2 3)" = 6 && test "$(./sum.sh 10 -4)" = 6 && test "$(./sum.sh)" = 0',
        "solution": "printf '#!/bin/sh\\ns=0\\nfor n in \"$@\"; do s=$((s + n)); done\\necho $s\\n' > sum.sh && chmod +x sum.sh",
    },
    {
        "instruction": "data.csv has a header line and rows name,score. Write the name with the highest score to best.txt.",
        "files": {"data.csv": "name,score\nada,91\nbob,78\ncyd,97\ndee,88\n"},
        "check": 'test "$(tr -d " \\n" < best.txt)" = cyd',
        "solution": "tail -n +2 data.csv | sort -t, -k2 -n | tail -1 | cut -d, -f1 > best.txt",
    },
    {
        "instruction": "Create the directory tree project/src and project/tests, each containing an empty file named __init__.py.",
        "files": {},
        "check": "test -f project/src/__init__.py && test -f project/tests/__init__.py && test ! -s project/src/__init__.py",
        "solution": "mkdir -p project/src project/tests && touch project/src/__init__.py project/tests/__init__.py",
    },
    {
        "instruction": "Sort the words in words.txt (one per line) alphabetically, remove duplicates, and write the result to sorted.txt.",
        "files": {"words.txt": "pear\napple\nfig\napple\nkiwi\nfig\nbanana\n"},
        "check": 'test "$(cat sorted.txt)" = "$(printf "apple\\nbanana\\nfig\\nkiwi\\npear")"',
        "solution": "sort -u words.txt > sorted.txt",
    },
    {
        "instruction": "config.ini sets debug = true. Change it to debug = false without changing any other line.",
        "files": {"config.ini": "[app]\nname = demo\ndebug = true\nport = 8080\n"},
        "check": 'grep -qx "debug = false" config.ini && grep -qx "port = 8080" config.ini && grep -qx "name = demo" config.ini && ! grep -q "debug = true" config.ini',
        "solution": "sed -i 's/^debug = true$/debug = false/' config.ini",
    },
    {
        "instruction": "Write a Python module fib.py with a function fib(n) returning the n-th Fibonacci number (fib(0) = 0, fib(1) = 1). The grader runs its own tests.",
        "files": {},
        "check_files": {"test_fib.py": FIB_TEST},
        "check": 'python3 "$GRADER/test_fib.py"',
        "solution": "printf 'def fib(n):\\n    a, b = 0, 1\\n    for _ in range(n):\\n        a, b = b, a + b\\n    return a\\n' > fib.py",
    },
]


def main() -> None:
    path = Path(__file__).with_name("tasks.jsonl")
    with path.open("w") as f:
        for i, task in enumerate(TASKS):
            f.write(json.dumps({"task_id": f"terminal-{i:03d}", **task}) + "\n")
    print(f"wrote {len(TASKS)} tasks to {path}")


if __name__ == "__main__":
    main()
