"""Issue 25, differences 3 to 7: real-format task folders whose tasks rely on the container
their Dockerfile describes, run end to end through `skyrl harbor run` on the bwrap backend.

- `sibling-imports`: test.sh runs the task's own `/app/main.py`, which does
  `from run import run_tasks` next to it (the grading PYTHONSAFEPATH used to reach it);
- `tmux-session`: the solution drives a detached tmux session (its pane used to exit at
  once: no `$SHELL`, login shell /usr/sbin/nologin);
- `ptrace-traceme`: an anti-debug check (PTRACE_TRACEME in a child) guards the answer
  (seccomp used to refuse every ptrace);
- `core-limit`: `ulimit -c unlimited` (RLIMIT_CORE used to be 0 hard);
- `rename-tmp`: rename(2) from /tmp into /app (EXDEV while /tmp and the workspace were two
  mounts; one filesystem in the copy-on-write root).

The oracle scores 1 and the nop agent 0 on each.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import needs_bwrap

pytestmark = needs_bwrap

REPO = Path(__file__).parents[4]
FIXTURES = Path(__file__).parent / "real_format"
NO_TMUX = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed here")
TASKS = [
    "sibling-imports",
    pytest.param("tmux-session", marks=NO_TMUX),
    "ptrace-traceme",
    "core-limit",
]


def _harbor_run(task: str, out: Path, agent: str = "oracle") -> dict:
    """`skyrl harbor run -a AGENT -p FIXTURE`: its only trial's result."""
    cli = [sys.executable, "-m", "skyrl_gym", "harbor", "run", "-a", agent]
    done = subprocess.run(
        [*cli, "-p", str(FIXTURES / task), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert (out / "job.json").is_file(), done.stdout + done.stderr
    job = json.loads((out / "job.json").read_text())
    (trial,) = job["trials"]
    return json.loads((out / trial["trial_name"] / "result.json").read_text())


@pytest.mark.parametrize("task", TASKS)
def test_oracle_scores_one(task: str, tmp_path: Path) -> None:
    result = _harbor_run(task, tmp_path / "out")
    assert (result["rewards"], result["error"]) == ({"reward": 1.0}, None), json.dumps(result)


@pytest.mark.parametrize("task", TASKS)
def test_nop_scores_zero(task: str, tmp_path: Path) -> None:
    result = _harbor_run(task, tmp_path / "out", agent="nop")
    assert result["rewards"] == {"reward": 0.0}, json.dumps(result)


def test_rename_from_tmp_into_the_workspace(tmp_path: Path) -> None:
    result = _harbor_run("rename-tmp", tmp_path / "out")
    assert (result["rewards"], result["error"]) == ({"reward": 1.0}, None), json.dumps(result)
