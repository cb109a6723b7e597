"""Vector 3 of issue 14: the host reads (or writes) files that sandboxed code chose, as root.

After the verifier ran, the host reads `reward.txt`, `reward.json` and `test-stdout.txt` back
from `/logs/verifier`, copies `/logs/*` into the job folder, and writes `trajectory.json` next
to what the agent left in `/logs/agent`. A program of the agent's that the verifier runs (as
real Harbor tasks do: the test calls `/app/<tool>`), or the agent itself for `/logs/agent`,
can leave a symlink to a root-only host file in each of those places. The host must neither
put that file's bytes into its outputs nor write through the link.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyrl_gym.envs.harbor.runtime import HarborRuntime
from skyrl_gym.envs.harbor.task import load_task
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.benchmarks.harbor.job import JobConfig, run_job
from skyrl_sdk.sandboxes import GradingIsolation
from tests.conftest import arun, needs_bwrap
from tests.skyrl_gym.envs.harbor.conftest import ANSWER, bash_call, isolation_fixture, make_task

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="the host-side read as root is the vector"),
]

# The verifier runs the agent's tool, then writes its honest reward (0: the task is not done).
RUNS_AGENT_TOOL = (
    "bash /app/tool.sh\n"
    '[ "$(cat /app/done.txt 2>/dev/null)" = ok ] && r=1 || r=0\n'
    "echo $r > /logs/verifier/reward.txt"
)


@pytest.fixture
def secret() -> Iterator[tuple[Path, str]]:
    """A root-only host file (0600 in /root) with a random, recognisable content."""
    token = f"SKYRL-SECRET-{secrets.token_hex(12)}"
    path = Path("/root") / f"secret-{secrets.token_hex(6)}"
    path.write_text(token + "\n")
    path.chmod(0o600)
    try:
        yield path, token
    finally:
        path.unlink(missing_ok=True)


def files_under(root: Path) -> Iterator[Path]:
    """Every regular file below `root`, symlinks not followed."""
    for base, _, names in os.walk(root):
        for name in names:
            path = Path(base, name)
            if path.is_file() and not path.is_symlink():
                yield path


def assert_nowhere(root: Path, token: str) -> None:
    leaked = [str(p) for p in files_under(root) if token in p.read_text(errors="replace")]
    assert leaked == [], f"host secret copied into {leaked}"


def oracle_job(tmp_path: Path, tool: str) -> tuple[dict, Path]:
    """One oracle trial of a task whose verifier runs /app/tool.sh (written by solve.sh)."""
    tasks = tmp_path / "tasks"
    make_task(
        tasks,
        "runs-tool",
        test_sh=RUNS_AGENT_TOOL,
        solve_sh=f"cat > /app/tool.sh <<'EOF'\n{tool}\nEOF",
    )
    out = tmp_path / "out"
    job = arun(run_job(JobConfig(tasks, out, agent="oracle")), 120)
    (trial,) = job.trials
    return json.loads((out / trial.trial_name / "result.json").read_text()), out


__all__ = ["isolation_fixture"]  # the `isolation` fixture: each grading mode in turn


def assert_link_refused(result: dict, isolation: GradingIsolation) -> None:
    """One uid: the program made the link, and the host refused to read through it. Two uids:
    the program (the agent's uid) cannot write /logs/verifier at all, so test.sh's honest 0
    stands."""
    if isolation is GradingIsolation.TWO_UID:
        assert result["reward"] == 0.0 and result["error"] is None, result
    else:
        assert result["reward"] is None and result["error"] == "reward_file_unsafe", result


def test_reward_txt_symlink_to_a_host_file_is_not_read(
    tmp_path: Path, secret: tuple[Path, str], isolation: GradingIsolation
) -> None:
    """Vector 3: reward.txt -> /root/secret-*: its bytes must not reach result.json."""
    path, token = secret
    tool = f"rm -f /logs/verifier/reward.txt; ln -s {path} /logs/verifier/reward.txt"
    result, out = oracle_job(tmp_path, tool)
    assert token not in json.dumps(result)
    assert_nowhere(out, token)
    assert_link_refused(result, isolation)


def test_reward_json_symlink_to_a_host_file_gives_no_reward(
    tmp_path: Path, isolation: GradingIsolation
) -> None:
    """Vector 3: reward.json -> a root-only host file that happens to parse: no reward."""
    forged = Path("/root") / f"rewards-{secrets.token_hex(6)}.json"
    forged.write_text('{"reward": 1.0}')
    forged.chmod(0o600)
    try:
        tool = f"ln -s {forged} /logs/verifier/reward.json"
        result, _ = oracle_job(tmp_path, tool)
    finally:
        forged.unlink(missing_ok=True)
    assert_link_refused(result, isolation)


def test_test_stdout_symlink_to_a_host_file_is_not_read(
    tmp_path: Path, secret: tuple[Path, str]
) -> None:
    """Vector 3: test-stdout.txt swapped for a link to /root/secret-* while test.sh runs."""
    path, token = secret
    make_task(
        tmp_path,
        "swap-log",
        test_sh=(
            "echo honest output\n"
            f"rm -f /logs/verifier/test-stdout.txt; ln -s {path} /logs/verifier/test-stdout.txt\n"
            "echo 0 > /logs/verifier/reward.txt"
        ),
    )
    runtime = HarborRuntime(load_task(tmp_path / "swap-log"))

    async def go() -> object:
        try:
            await runtime.start()
            result = await runtime.verify()
            runtime.copy_logs(tmp_path / "trial")
            return result
        finally:
            await runtime.close()

    result = arun(go(), 120)
    assert token not in result.output_tail  # type: ignore[attr-defined]
    assert result.reward == 0.0  # type: ignore[attr-defined]
    assert_nowhere(tmp_path / "trial", token)
    assert (tmp_path / "trial" / "verifier" / "test-stdout.txt").is_symlink()  # kept as a link


def test_llm_trial_never_writes_through_a_link_the_agent_left(tmp_path: Path) -> None:
    """Vector 3: /logs/agent/trajectory.json -> a host file; the job writes its own
    trajectory.json next to the copied logs and must replace the link, not the host file."""
    victim = Path("/root") / f"victim-{secrets.token_hex(6)}"
    original = f"ORIGINAL-{secrets.token_hex(12)}\n"
    victim.write_text(original)
    victim.chmod(0o600)
    tasks = tmp_path / "tasks"
    make_task(tasks, "plain")
    actions = [
        bash_call(
            f"ln -s {victim} /logs/agent/trajectory.json; ln -s /root /logs/artifacts/root-dir; "
            f"ln -s {victim} /logs/artifacts/victim; mkfifo /logs/agent/pipe; ls -l /logs/agent"
        ),
        ANSWER,
    ]
    config = JobConfig(tasks, tmp_path / "out", agent="llm", policy="scripted")
    try:
        job = arun(run_job(config, policy=ScriptedPolicy(actions, name="linker")), 120)
        content = victim.read_text()
    finally:
        victim.unlink(missing_ok=True)
    assert content == original, "the host wrote through the agent's symlink"
    (trial,) = job.trials
    trial_dir = tmp_path / "out" / trial.trial_name
    trajectory = trial_dir / "agent" / "trajectory.json"
    assert not trajectory.is_symlink() and json.loads(trajectory.read_text())["steps"]
    assert (trial_dir / "artifacts" / "root-dir").is_symlink()  # copied as links
    assert (trial_dir / "artifacts" / "victim").is_symlink()
    assert_nowhere(trial_dir, original.strip())
