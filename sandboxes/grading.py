"""The process environment of a grading (verifier) command.

An agent controls every file in its workspace, and the workspace is often the agent's `HOME`.
If a verifier then starts Python with that `HOME`, a `usercustomize.py` or a `.pth` file the
agent left in `~/.local/lib/python3.X/site-packages` runs inside the verifier and can print
whatever reward it likes. `grading_env()` closes the routes that do not depend on the task:

- `HOME=/tmp`: the private, fresh `/tmp` of a *new* sandbox (the grading sandbox), which no
  agent process ever saw (they are all dead before grading starts);
- `PYTHONNOUSERSITE=1`: no user site-packages at all;
- `PYTHONSAFEPATH=1` (Python >= 3.11): neither the current directory nor the script's
  directory is put on `sys.path`, so `/app/json.py` does not shadow the standard library;
- `PYTHONDONTWRITEBYTECODE=1`: the verifier leaves no `.pyc` behind;
- `PATH`: the default system PATH, without any agent-writable directory;
- `GIT_CONFIG_COUNT`/`KEY`/`VALUE`: `core.hooksPath=/dev/null` and `core.fsmonitor=false`,
  above every config file, so git run by the verifier runs no hook or fsmonitor the agent
  put in its repository's `.git/config` or `.git/hooks`.

In a two-uid grading sandbox (`SandboxSpec(grading=True)`, `GradingIsolation.TWO_UID`) the
verifier's `HOME=/tmp` becomes a directory of its own (`bwrap.VERIFIER_HOME`), since the
agent's programs may write /tmp there, and programs the verifier runs from agent-writable
paths run as the agent (see `sandboxes/_grading.c`).

Whose interpreters the defences guard: the verifier's own. `PYTHONSAFEPATH` and
`PYTHONNOUSERSITE` exist so that the verifier's Python does not load the agent's modules; a
task's *own* program in the workspace, which test.sh starts (`python3 /app/main.py` doing
`from run import run_tasks` next to it), must import its siblings as in a container. In a
two-uid sandbox such a program runs as the agent anyway, and the drop to the agent's uid
takes both variables out of its environment (and its children's): it gets its script's
directory on `sys.path` and its user site, with none of the verifier's rights. The
verifier's scripts keep the defences: `cd /app && python3 -c 'import json'` or
`python3 -m pytest` still ignores `/app/json.py`. pytest puts each test file's own directory
(rootdir-based `prepend` import mode) on `sys.path` itself, so `/tests/test_outputs.py`
still imports `/tests/helpers.py`; a verifier script run directly (`python3 /tests/check.py`)
does not get `/tests` on its path and must add it itself (deliberately: the shim does not
tell a safe script directory from an unsafe one). With one uid (`SINGLE_UID`: not root, or
the local and Docker backends) every program keeps both variables, so a task program that
relies on sibling imports fails there.

What a task author must still do: not import or execute code from the workspace in the
verifier (e.g. `sys.path.insert(0, "/app")` or `source /app/env.sh` re-opens the hole), run
tests with an interpreter and packages from the read-only image or the grading sandbox's own
binds, and treat everything read from the workspace as data.
"""

from __future__ import annotations

from collections.abc import Mapping

from skyrl_sdk.sandboxes.spec import DEFAULT_PATH

__all__ = ["GIT_HARDENING", "GRADING_HOME", "grading_env"]

GIT_HARDENING = {
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "core.hooksPath",
    "GIT_CONFIG_VALUE_0": "/dev/null",
    "GIT_CONFIG_KEY_1": "core.fsmonitor",
    "GIT_CONFIG_VALUE_1": "false",
}
"""Git configuration given on git's command-line level (above every config file): no hooks
and no fsmonitor from an agent's `.git/config`, whoever runs git."""

GRADING_HOME = "/tmp"
"""`HOME` of a grading command: the grading sandbox's own fresh tmpfs."""


def grading_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a grading command: `exec(cmd, env=grading_env(task_env))`.

    Args:
        extra: Variables the task author asks for; applied first, so the hardening
            variables (HOME, PATH, PYTHONNOUSERSITE, PYTHONSAFEPATH,
            PYTHONDONTWRITEBYTECODE) win over them.

    Returns:
        A new dict of environment variables.
    """
    env = {str(k): str(v) for k, v in (extra or {}).items()}
    env.update(
        {
            "HOME": GRADING_HOME,
            "PATH": DEFAULT_PATH,
            "PYTHONNOUSERSITE": "1",
            "PYTHONSAFEPATH": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            **GIT_HARDENING,
        }
    )
    return env
