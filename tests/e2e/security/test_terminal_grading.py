"""Issue 23, items 1 and 4: forging a `terminal` check from the agent's own programs and data.

Item 1: a program the check runs (`python3 calc.py` on terminal-002, `./sum.sh` on
terminal-004, the module `fib.py` that terminal-009's test imports) walks up to the check's
shell, reads where it resumes from `/proc/PID/syscall` and writes `exit_group(0)` there
through `/proc/PID/mem` (the technique of `harbor_attacks/proc-mem-writer`): when the program
returns, the check exits 0 without testing anything. Item 4: terminal-001 computed its
expected value from `app.log`, which the agent can edit.

Each attack runs end to end through `skyrl_gym.make("terminal")` and through `skyrl eval`, and
must score 0.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import skyrl_gym
from skyrl_gym.envs.terminal.env import SINGLE_UID_NOTE, bundled_tasks
from skyrl_sdk.agents.rollout import rollout
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.sandboxes import AGENT_UID
from skyrl_sdk.sandboxes.bwrap import GRADING_UIDS_ENV
from tests.conftest import arun, needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the attack's code is x86-64"),
]

SKYRL = Path(sys.executable).with_name("skyrl")
ANSWER = '<tool_call>{"name": "answer", "arguments": {"answer": "done"}}</tool_call>'

# Every shell above this process (the check's `sh -c`, and the command substitution's
# subshell when there is one) resumes at `exit_group(0)` once its system call returns.
MEM_WRITER = """\
import os, sys, time
CODE = bytes.fromhex("31ffb8e70000000f05")  # xor edi,edi; mov eax,231 (exit_group); syscall
def ppid(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
shells, pid = [], os.getpid()
while pid > 1:
    pid = ppid(pid)
    if open(f"/proc/{pid}/comm").read().strip() in ("sh", "dash", "bash"):
        shells.append(pid)
for pid in shells:
    for _ in range(200):  # until it is blocked in a system call (waiting for this program)
        fields = open(f"/proc/{pid}/syscall").read().split()
        if fields[0].isdigit():
            break
        time.sleep(0.01)
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
        os.pwrite(fd, CODE, int(fields[-1], 16))
        print("mem written", file=sys.stderr)
    except OSError as e:
        print(f"mem refused: {e.strerror}", file=sys.stderr)
"""


def _heredoc(path: str, text: str, tag: str = "EOF_ATTACK") -> str:
    return f"cat > {path} <<'{tag}'\n{text}{tag}\n"


# task id -> the bash command that plants the attack (none of them solves the task)
MEM_ATTACKS = {
    "terminal-002": _heredoc("calc.py", MEM_WRITER),
    "terminal-004": _heredoc(
        "sum.sh", "#!/bin/sh\npython3 - <<'EOF_PY'\n" + MEM_WRITER + "EOF_PY\n"
    )
    + "chmod +x sum.sh",
    "terminal-009": _heredoc("fib.py", MEM_WRITER),
}


def bash_call(command: str) -> str:
    return (
        "<tool_call>"
        + json.dumps({"name": "bash", "arguments": {"command": command}})
        + ("</tool_call>")
    )


def task(task_id: str) -> dict[str, Any]:
    return next(dict(t) for t in bundled_tasks() if t["task_id"] == task_id)


def play(task_id: str, command: str) -> tuple[float, dict[str, Any]]:
    """One episode of `make("terminal")`: `command`, then the answer; (reward, check info)."""
    env = skyrl_gym.make("terminal")
    try:
        row = task(task_id)
        policy = ScriptedPolicy([bash_call(command), ANSWER])
        traj = arun(rollout(env, policy, row, max_turns=3), 120)
        return traj.reward, env.unwrapped.last_check or {}
    finally:
        env.close()


@pytest.mark.parametrize("task_id", sorted(MEM_ATTACKS))
def test_a_program_the_check_runs_cannot_write_the_checks_memory(task_id: str) -> None:
    reward, check = play(task_id, MEM_ATTACKS[task_id])
    assert reward == 0.0, check
    assert "mem written" not in check["output"], check


def test_a_module_the_check_imports_cannot_end_the_check_early() -> None:
    """fib.py exits 0 the moment it is imported: the test must not import it in-process."""
    reward, check = play("terminal-009", _heredoc("fib.py", "import os\nos._exit(0)\n"))
    assert reward == 0.0, check
    assert "fib printed ''" in check["output"], check


@pytest.mark.parametrize("task_id", ["terminal-002", "terminal-009"])
def test_read_only_proc_alone_refuses_the_write_with_one_uid(
    task_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the grading sandbox has no second uid (`SINGLE_UID`, forced here), the program
    has the check's uid, but /proc is read-only: the open fails, and the episode says
    `single_uid`."""
    monkeypatch.setenv(GRADING_UIDS_ENV, "off")
    env = skyrl_gym.make("terminal")
    try:
        traj = arun(
            rollout(env, ScriptedPolicy([bash_call(MEM_ATTACKS[task_id]), ANSWER]), task(task_id)),
            120,
        )
        episode = env.unwrapped.episode_info()
    finally:
        env.close()
    check = episode["check"]
    assert traj.reward == 0.0 and check["isolation"] == "single_uid", check
    assert "mem refused: Read-only file system" in check["output"], check
    assert episode["notes"] == [SINGLE_UID_NOTE]


def test_the_check_reports_its_isolation() -> None:
    """With a second uid (bwrap as root with the exec shim) the check says `two_uid` and the
    episode has no note; without one it says `single_uid` and notes it."""
    env = skyrl_gym.make("terminal")
    try:
        row = task("terminal-000")
        traj = arun(rollout(env, ScriptedPolicy([bash_call(row["solution"]), ANSWER]), row), 120)
        episode = env.unwrapped.episode_info()
    finally:
        env.close()
    assert traj.reward == 1.0
    isolation = episode["check"]["isolation"]
    assert isolation in ("two_uid", "single_uid")
    assert ("notes" in episode) == (isolation == "single_uid"), episode


def test_the_module_terminal_009_tests_runs_as_the_agent() -> None:
    """terminal-009's test imports fib.py only in a child process started from a script in
    the workspace, which a two-uid grading sandbox runs as the agent's uid."""
    probe = (
        "import os, sys\nprint('fib uid', os.getuid(), file=sys.stderr)\n"
        "try:\n    open('/tmp/grader/test_fib.py').read()\n    print('grader read', file=sys.stderr)\n"
        "except OSError as e:\n    print('grader refused:', e.strerror, file=sys.stderr)\n"
    )
    reward, check = play("terminal-009", _heredoc("fib.py", probe))
    assert reward == 0.0, check
    two_uids = check["isolation"] == "two_uid"
    assert f"fib uid {AGENT_UID if two_uids else os.getuid()}" in check["output"], check
    # The check's own files (expected values) are out of the agent's reach with two uids.
    seen = "grader refused: Permission denied" if two_uids else "grader read"
    assert seen in check["output"], check


# terminal-001: the agent writes a wrong count, then edits app.log to agree with it.
LOG_ATTACK = "echo 0 > errors.txt && sed -i 's/ERROR/error/' app.log"


def test_editing_app_log_does_not_move_terminal_001s_expected_value() -> None:
    reward, check = play("terminal-001", LOG_ATTACK)
    assert reward == 0.0, check


def test_the_attacks_score_nothing_through_skyrl_eval(tmp_path: Path) -> None:
    attacks = {**MEM_ATTACKS, "terminal-001": LOG_ATTACK}
    with (tmp_path / "tasks.jsonl").open("w") as f:
        for task_id in sorted(attacks):
            f.write(json.dumps(task(task_id)) + "\n")
    script = {"actions": {t: [bash_call(c), ANSWER] for t, c in attacks.items()}}
    (tmp_path / "attack.json").write_text(json.dumps(script))
    done = subprocess.run(
        [
            *(str(SKYRL), "eval", "terminal", "--tasks", "tasks.jsonl"),
            *("-p", "scripted:attack.json", "-o", "run", "-c", "2", "--max-turns", "3"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rewards = {
        t["task_id"]: t["reward"]
        for t in map(
            json.loads, (tmp_path / "run" / "trajectories.jsonl").read_text().split("\n")[:-1]
        )
    }
    assert rewards == dict.fromkeys(attacks, 0.0), rewards
