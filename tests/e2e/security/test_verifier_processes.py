"""Programs that test.sh runs: what they can do to the grading, and what the runtime allows.

Many Harbor tasks' test.sh runs the agent's program. With one uid for both, that program
can write reward.txt and kill test.sh, leave a writer that rewrites reward.txt after
test.sh's verdict, or rewrite test.sh's own memory through /proc/PID/mem. A two-uid grading
sandbox (issue 23) runs it under the agent's uid, which can do none of these; each attack
is run in both modes. The attack task folders are in
`tests/e2e/security/harbor_attacks/` (their `solution/solve.sh` installs the attacking program);
here each is graded through `HarborRuntime` both as its task.toml asks and under plain Harbor
semantics (`require_exit_zero=False`), next to legitimate tasks whose grading must stay as in
Harbor: a non-zero exit after a reward, a server left running.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_gym.envs.harbor import runtime as harbor_runtime
from skyrl_gym.envs.harbor.env import HarborEnv
from skyrl_gym.envs.harbor.runtime import HarborRuntime, VerifierError, VerifierResult
from skyrl_gym.envs.harbor.task import load_task
from skyrl_sdk.agents.rollout import rollout
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.sandboxes import GradingIsolation
from tests.skyrl_gym.envs.harbor.conftest import (
    ANSWER,
    GRADING_UIDS_ENV,
    arun,
    bash_call,
    isolation_env,
    isolation_fixture,  # noqa: F401 - the `isolation` fixture
    make_task,
    needs_bwrap,
)

pytestmark = needs_bwrap

ATTACKS = Path(__file__).with_name("harbor_attacks")
REPO = Path(__file__).parents[3]
STRICT_TOML = """\
schema_version = "1.4"
[verifier]
timeout_sec = 30.0
require_exit_zero = true
[environment]
network_mode = "no-network"
"""


def _grade(task_dir: Path, agent: str = "bash /solution/solve.sh", **options) -> VerifierResult:
    """Run `agent` in the task's agent phase (solution/ at /solution), then its verifier."""

    async def go() -> VerifierResult:
        runtime = HarborRuntime(load_task(task_dir), **options)
        try:
            sandbox = await runtime.start(with_solution=True)
            await sandbox.exec([runtime.shell, "-c", agent], timeout=60)
            return await runtime.verify()
        finally:
            await runtime.close()

    return arun(go(), 180)


# ---- Harbor semantics kept ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "want"),
    [
        ("echo 0 > /logs/verifier/reward.txt; exit 1", 0.0),  # a failing pytest run
        ("echo 1 > /logs/verifier/reward.txt; exit 3", 1.0),  # Harbor ignores the status
    ],
)
def test_a_non_zero_exit_keeps_the_reward_by_default(tmp_path, script, want):
    task = make_task(tmp_path, "exits-non-zero", test_sh=script)
    result = _grade(task)
    assert (result.reward, result.error, result.exit_code) == (want, None, int(script[-1]))
    assert result.left_running == 0 and result.orphaned == 0


def test_require_exit_zero_voids_a_non_zero_exit(tmp_path):
    script = "echo 1 > /logs/verifier/reward.txt; exit 3"
    task = make_task(tmp_path, "strict", toml=STRICT_TOML, test_sh=script)
    assert load_task(task).verifier.require_exit_zero
    result = _grade(task)
    assert result.reward is None and result.error is VerifierError.EXIT_NONZERO, result
    assert "reward it left (1) is void" in result.message
    # The runtime option overrides the task either way.
    assert _grade(task, require_exit_zero=False).reward == 1.0


def test_a_server_left_running_keeps_the_reward_by_default_and_is_killed(tmp_path):
    """Harbor semantics: a test.sh may leave a server behind. It is killed the moment test.sh
    exits (counted in `left_running`) and the reward stands; `require_exit_zero` voids it."""
    script = (
        "setsid sh -c 'while :; do date > /tmp/alive; sleep 0.05; done' "
        "</dev/null >/dev/null 2>&1 &\necho 1 > /logs/verifier/reward.txt"
    )
    task = make_task(tmp_path, "leaves-a-server", test_sh=script)
    result = _grade(task)
    assert (result.reward, result.error, result.left_running) == (1.0, None, 1), result
    strict = _grade(task, require_exit_zero=True)
    assert strict.reward is None and strict.error is VerifierError.STRAY_PROCESSES, strict


def test_a_malformed_require_exit_zero_is_a_clear_task_error(tmp_path):
    from skyrl_gym.envs.harbor.task import TaskFormatError

    toml = STRICT_TOML.replace("require_exit_zero = true", 'require_exit_zero = "yes"')
    task = make_task(tmp_path, "bad", toml=toml)
    with pytest.raises(TaskFormatError, match=r"\[verifier\]\.require_exit_zero.*true or false"):
        load_task(task)


# ---- the attacks ----------------------------------------------------------------------------
#
# Each runs in both grading modes (the `isolation` fixture). With two uids the program test.sh
# runs has the agent's uid: it cannot write /logs/verifier or /tests, signal test.sh or open
# its /proc files, so the attack is refused and test.sh's own verdict (0) stands. With one uid
# (no second uid on the machine) the older defences still hold where they can, and the known
# limits of plain Harbor grading are strict xfails.

TWO = GradingIsolation.TWO_UID
ONE_UID_LIMIT = "known limit of one-uid grading under Harbor semantics (require_exit_zero off): "


def _one_uid_xfail(request: pytest.FixtureRequest, isolation: GradingIsolation, reason: str):
    """Mark this run a strict xfail when graded with one uid (the known limit `reason`): it
    still runs, and passing would fail it."""
    if isolation is not TWO:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


@pytest.mark.parametrize("require_exit_zero", [None, False, True])
def test_a_program_that_writes_the_reward_then_kills_test_sh_earns_nothing(
    require_exit_zero, isolation
):
    """One uid: test.sh did not end on its own (`verifier_killed`) in every grading mode.
    Two uids: the program can neither write reward.txt nor kill test.sh; test.sh's 0 stands
    (its exit 1 voids it under `require_exit_zero`)."""
    result = _grade(ATTACKS / "verifier-killer", require_exit_zero=require_exit_zero)
    if isolation is TWO:
        assert result.exit_code == 1 and result.error is not VerifierError.KILLED, result
        if require_exit_zero:
            assert result.error is VerifierError.EXIT_NONZERO, result
        else:
            assert (result.reward, result.error) == (0.0, None), result
        return
    assert result.reward is None and result.error is VerifierError.KILLED, result
    assert result.exit_code == -9 and "reward it left (1) is void" in result.message


@pytest.mark.parametrize("task", ["lingering-writer", "orphan-rewriter"])
def test_a_writer_that_outlives_its_parent_earns_nothing_under_require_exit_zero(task, isolation):
    """lingering-writer keeps rewriting reward.txt (still running at test.sh's exit);
    orphan-rewriter overwrites the verdict once and exits before test.sh does (with two uids
    it never sees the verdict, so it is still waiting at test.sh's exit). Both tasks set
    `require_exit_zero`: both are `verifier_stray_processes`."""
    assert load_task(ATTACKS / task).verifier.require_exit_zero
    result = _grade(ATTACKS / task)
    assert result.reward is None and result.error is VerifierError.STRAY_PROCESSES, result
    count = result.orphaned if task == "orphan-rewriter" and isolation is not TWO else None
    assert (count if count is not None else result.left_running) >= 1, result
    assert "greet.sh printed: goodbye" in result.output_tail


@pytest.mark.parametrize("task", ["lingering-writer", "orphan-rewriter"])
def test_a_writer_that_outlives_its_parent_under_plain_harbor_grading(task, isolation, request):
    """Two uids (issue 23): the writer has the agent's uid and cannot touch reward.txt, so
    the verdict stands even without `require_exit_zero`. One uid: nothing tells it from a
    server a test.sh legitimately leaves (a strict xfail)."""
    _one_uid_xfail(
        request,
        isolation,
        ONE_UID_LIMIT + "a writer that test.sh's program leaves behind rewrites reward.txt "
        "after the verdict; tasks that run the agent's programs must set require_exit_zero",
    )
    result = _grade(ATTACKS / task, require_exit_zero=False)
    assert (result.reward, result.error) == (0.0, None), result


def test_a_program_that_stops_test_sh_early_earns_nothing_under_require_exit_zero(isolation):
    """greet.sh writes reward 1 (refused with two uids) and fails; test.sh (`set -e`) stops
    before its verdict with status 1. The task sets `require_exit_zero`:
    `verifier_exit_nonzero`."""
    result = _grade(ATTACKS / "early-exit")
    assert result.reward is None and result.error is VerifierError.EXIT_NONZERO, result
    assert result.exit_code == 1
    left = "reward it left (1) is void" in result.message
    assert left is (isolation is not TWO), result.message


def test_a_program_that_stops_test_sh_early_under_plain_harbor_grading(isolation, request):
    """Two uids (issue 23): the program cannot write the reward it wants before making
    test.sh stop, so there is no reward file at all. One uid: it keeps its reward 1 (a
    strict xfail)."""
    _one_uid_xfail(
        request,
        isolation,
        ONE_UID_LIMIT + "a program that writes reward 1 and makes test.sh stop early with "
        "a non-zero status (set -e) keeps it; such tasks must set require_exit_zero",
    )
    result = _grade(ATTACKS / "early-exit", require_exit_zero=False)
    assert result.error is VerifierError.REWARD_FILE_NOT_FOUND, result


def _ungraded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Open the verifier's sandbox as an ordinary one, not a grading one: /proc writable, one
    uid for test.sh and the programs it runs (the control experiment)."""
    bound = harbor_runtime._BoundBwrap.__init__

    def init(self, spec, binds, *, ro_binds=None):
        bound(self, dataclasses.replace(spec, grading=False), binds, ro_binds=ro_binds)

    monkeypatch.setattr(harbor_runtime._BoundBwrap, "__init__", init)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the attack's machine code is x86-64")
@pytest.mark.parametrize("require_exit_zero", [None, False])
def test_a_program_cannot_write_test_sh_memory(require_exit_zero, isolation, monkeypatch):
    """greet.py opens test.sh's /proc/PID/mem to plant code that writes reward 1 and exits 0.
    The grading sandbox's /proc is read-only (and with two uids test.sh's process is hidden
    from the program, or not its to open): test.sh's own verdict (0) stands. Control: in an ordinary
    sandbox (writable /proc, one uid) the same attack forges reward 1 with exit 0."""
    task = ATTACKS / "proc-mem-writer"
    result = _grade(task, require_exit_zero=require_exit_zero)
    assert result.reward == 0.0 and result.exit_code == 0, result
    if isolation is TWO:  # test.sh's process is hidden from it (hidepid) or not its to open
        assert "greet.py printed: " in result.output_tail
        assert "mem written" not in result.output_tail
    else:
        assert "mem refused: Read-only file system" in result.output_tail
    if require_exit_zero is False:
        _ungraded(monkeypatch)
        forged = _grade(task, require_exit_zero=False)
        assert (forged.reward, forged.exit_code) == (1.0, 0), forged


def _writable_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bind all of /tests read-write in a one-uid grading sandbox (the control experiment)."""
    monkeypatch.setenv(GRADING_UIDS_ENV, "off")
    bound = harbor_runtime._BoundBwrap.__init__

    def init(self, spec, binds, *, ro_binds=None):
        binds = {**binds, **(ro_binds or {})}
        bound(self, spec, binds, ro_binds={})

    monkeypatch.setattr(harbor_runtime._BoundBwrap, "__init__", init)


@pytest.mark.parametrize("require_exit_zero", [None, True])
def test_a_program_cannot_rewrite_the_running_test_sh(require_exit_zero, isolation, monkeypatch):
    """greet.sh appends its own verdict to /tests/test.sh (bash reads a script as it runs
    it). test.sh is read-only in every grading mode (and the verifier's with two uids): the
    append fails and the verdict is 0. Control: with a writable test.sh and one uid the
    appended line runs and forges reward 1."""
    task = ATTACKS / "script-rewriter"
    result = _grade(task, require_exit_zero=require_exit_zero)
    assert (result.reward, result.error) == (0.0, None), result
    assert "greet.sh printed: append refused" in result.output_tail
    if require_exit_zero is None:
        _writable_tests(monkeypatch)
        assert _grade(task).reward == 1.0


def test_a_program_cannot_swap_a_test_file_under_require_exit_zero(isolation, monkeypatch):
    """greet.sh replaces /tests/check.py, which test.sh runs next. The task sets
    `require_exit_zero`, so all of /tests is read-only. Control: writable, one uid, it
    forges."""
    task = ATTACKS / "helper-swapper"
    result = _grade(task)
    assert (result.reward, result.error) == (0.0, None), result
    assert "greet.sh printed: swap refused" in result.output_tail
    _writable_tests(monkeypatch)
    assert _grade(task).reward == 1.0


def test_a_program_that_swaps_a_test_file_under_plain_harbor_grading(isolation, request):
    """Two uids (issue 23): /tests stays writable for test.sh (Harbor semantics) but is the
    verifier's, so the program (the agent's uid) cannot replace a test file. One uid: it can
    (a strict xfail)."""
    _one_uid_xfail(
        request,
        isolation,
        ONE_UID_LIMIT + "/tests stays writable (test.sh may write there), so a program "
        "test.sh runs can replace a test file, a helper or an expected output that test.sh "
        "uses after it; such tasks must set require_exit_zero",
    )
    result = _grade(ATTACKS / "helper-swapper", require_exit_zero=False)
    assert (result.reward, result.error) == (0.0, None), result
    assert "greet.sh printed: swap refused" in result.output_tail


def test_tests_stay_writable_by_default_but_not_under_require_exit_zero(tmp_path):
    """Harbor semantics: test.sh may write into /tests (a cache, a venv); only test.sh itself
    is read-only. Under `require_exit_zero` all of /tests is read-only."""
    script = (
        "mkdir /tests/.cache && echo 1 > /logs/verifier/reward.txt "
        "|| echo 0 > /logs/verifier/reward.txt\n"
        "echo x >> /tests/test.sh || echo 'test.sh read-only'"
    )
    task = make_task(tmp_path, "writes-tests", test_sh=script)
    result = _grade(task)
    assert result.reward == 1.0 and "test.sh read-only" in result.output_tail, result
    assert _grade(task, require_exit_zero=True).reward == 0.0


def test_the_harbor_env_reports_a_killed_verifier(tmp_path, monkeypatch):
    """The `harbor` env: reward 0 and `verifier_killed` in the episode's info (graded with
    one uid, where the program can kill test.sh)."""
    monkeypatch.setenv(GRADING_UIDS_ENV, "off")
    solve = (ATTACKS / "verifier-killer" / "solution" / "solve.sh").read_text()
    row = {"task_id": "verifier-killer", "path": str(ATTACKS / "verifier-killer")}
    env = HarborEnv([row])
    try:
        traj = arun(rollout(env, ScriptedPolicy([bash_call(solve), ANSWER]), row, max_turns=4), 120)
        assert traj.reward == 0.0
        info = env.episode_info()
        assert info["verifier_error"] == "verifier_killed", info
        assert "killed" in info["verifier_message"]
    finally:
        env.close()


def test_grading_runs_in_a_read_only_proc_but_the_agent_phase_does_not(tmp_path):
    """Only the grading sandbox's /proc is read-only (the agent phase is untouched)."""
    probe = "touch /proc/self/comm 2>&1 | grep -q 'Read-only' && echo ro || echo rw"
    task = make_task(
        tmp_path,
        "proc-probe",
        test_sh=f"[ $({probe}) = ro ] && echo 1 > /logs/verifier/reward.txt",
        solve_sh=f"{probe} > /logs/agent/proc.txt",
    )

    async def go() -> tuple[str, VerifierResult]:
        runtime = HarborRuntime(load_task(task))
        try:
            sandbox = await runtime.start()
            seen = (await sandbox.exec(probe)).stdout.strip()
            return seen, await runtime.verify()
        finally:
            await runtime.close()

    seen, result = asyncio.run(go())
    assert seen == "rw" and result.reward == 1.0, (seen, result)


def test_skyrl_harbor_run_reports_the_outcome_and_can_require_exit_zero(tmp_path):
    """`skyrl harbor run`: result.json carries the verifier error and the process counts;
    `--require-exit-zero` grades every task as if its task.toml asked for it (graded with one
    uid, where verifier-killer can kill test.sh)."""
    tasks = tmp_path / "tasks"
    make_task(tasks, "exits-3", test_sh="echo 1 > /logs/verifier/reward.txt; exit 3")
    shutil.copytree(ATTACKS / "verifier-killer", tasks / "verifier-killer")
    results = {}
    for flags in ((), ("--require-exit-zero",)):
        out = tmp_path / f"job{len(flags)}"
        cli = [sys.executable, "-m", "skyrl_gym", "harbor", "run", "-a", "oracle", "-n", "2"]
        done = subprocess.run(
            [*cli, *flags, "-p", str(tasks), "-o", str(out)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
            env=isolation_env(GradingIsolation.SINGLE_UID),
        )
        assert (out / "job.json").is_file(), done.stdout + done.stderr
        for trial in json.loads((out / "job.json").read_text())["trials"]:
            result = json.loads((out / trial["trial_name"] / "result.json").read_text())
            results[(result["task"], flags)] = (result["reward"], result["error"])
            assert result["verifier_isolation"] == "single_uid", result
        assert "verifier_killed" in done.stdout
    assert results == {
        ("exits-3", ()): (1.0, None),
        ("exits-3", ("--require-exit-zero",)): (None, "verifier_exit_nonzero"),
        ("verifier-killer", ()): (None, "verifier_killed"),
        ("verifier-killer", ("--require-exit-zero",)): (None, "verifier_killed"),
    }
