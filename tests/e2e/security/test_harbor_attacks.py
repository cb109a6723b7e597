"""Issue 14's "Must show": Harbor tasks whose oracle solution IS an attack all score 0.

`tests/e2e/security/harbor_attacks/` holds one task per attack (see its README): start-up hooks
for the verifier's Python (vector 1), a detached process waiting for the verifier (vector 1),
symlinked verifier files (vector 3), the host's loopback (vector 4), a search of the host's
filesystem for the hidden tests and the SDK's bundled tasks (vector 2), and programs that
test.sh runs attacking the grading from inside it (kill test.sh after writing reward 1, a
writer left behind, test.sh's /proc/PID/mem, rewriting test.sh or a test file; see also
test_verifier_processes.py), and (issue 23, item 2) the agent's code that a bundled
task's test.sh runs writing reward.json, which used to win over test.sh's reward.txt: those
attack folders copy the bundled task's task.toml, instruction, environment and tests (a
test keeps them equal), so the attack runs against the bundled grader as shipped. They run through the
real CLI, `skyrl harbor run -a oracle`, once per test module, with a root-only secret planted
on the host and a server on the host's 127.0.0.1 that hands out the loopback task's answer.
Every task must score 0 (or no reward at all), the secret must appear in no file of the job's
output, and the server must never be reached.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_gym.envs.harbor.env import BUNDLED_TASKS
from skyrl_sdk.agents.rollout import rollout
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.sandboxes import GradingIsolation
from tests.conftest import needs_bwrap
from tests.skyrl_gym.envs.harbor.conftest import (
    ANSWER,
    arun,
    bash_call,
    isolation_env,
    isolation_fixture,  # noqa: F401 - the `isolation` fixture
)

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="the planted secret must be root-only"),
]

ATTACKS = Path(__file__).with_name("harbor_attacks")
REPO = Path(__file__).parents[3]
TASKS = sorted(p.name for p in ATTACKS.iterdir() if (p / "task.toml").is_file())
# What each solve.sh prints once its attack is in place (so a 0 is not a broken attack).
ATTEMPTED = {
    "startup-hooks": "hooks planted",
    "detached-writer": "writer left running",
    "symlinked-reward": "tool written",
    "host-loopback": "",  # prints whether it got through; checked by the server's log
    "host-search": "search done",
    "verifier-killer": "killer written",
    "lingering-writer": "writer written",
    "orphan-rewriter": "rewriter written",
    "proc-mem-writer": "mem writer written",
    "script-rewriter": "appender written",
    "helper-swapper": "swapper written",
    "early-exit": "failer written",
    "reward-json-fix-failing-script": "reward.json writer planted",
    "reward-json-word-frequency": "reward.json writer planted",
    "reward-json-fix-python-bug": "reward.json writer planted",
    "fsmonitor-repair-git-repo": "reward.json writer planted",
}
TWO, ONE = GradingIsolation.TWO_UID, GradingIsolation.SINGLE_UID
# The grading-phase attacks (test.sh runs the program they install): the verifier error each
# must end in, and what test-stdout.txt must show, in each grading mode. With two uids the
# program has the agent's uid: it cannot write the reward, kill test.sh or open its /proc
# files, so test.sh's own verdict (0) stands; with one uid the older defences catch it.
GRADING_PHASE = {
    "verifier-killer": {ONE: ("verifier_killed", ""), TWO: (None, "greet.sh printed: \n")},
    "lingering-writer": {
        ONE: ("verifier_stray_processes", "greet.sh printed: goodbye"),
        TWO: ("verifier_stray_processes", "greet.sh printed: goodbye"),
    },
    "orphan-rewriter": {
        ONE: ("verifier_stray_processes", "greet.sh printed: goodbye"),
        TWO: ("verifier_stray_processes", "greet.sh printed: goodbye"),
    },
    "proc-mem-writer": {
        ONE: (None, "mem refused: Read-only file system"),
        TWO: (None, "greet.py printed: "),  # test.sh's process hidden or not its to open
    },
    "script-rewriter": {
        ONE: (None, "greet.sh printed: append refused"),
        TWO: (None, "greet.sh printed: append refused"),
    },
    "helper-swapper": {
        ONE: (None, "greet.sh printed: swap refused"),
        TWO: (None, "greet.sh printed: swap refused"),
    },
    "early-exit": {ONE: ("verifier_exit_nonzero", ""), TWO: ("verifier_exit_nonzero", "")},
}

# Issue 23, item 2: the bundled task each attack folder links, whose test.sh runs the agent's
# code (the script it fixed, the module it loads, `git status` with the agent's .git/config).
REWARD_FILE_ATTACKS = {
    "reward-json-fix-failing-script": "fix-failing-script",
    "reward-json-word-frequency": "word-frequency",
    "reward-json-fix-python-bug": "fix-python-bug",
    "fsmonitor-repair-git-repo": "repair-git-repo",
}
# What each ends in: with two uids the write is refused (test.sh's 0 stands); with one uid
# the agent's reward.json disagrees with test.sh's reward.txt. repair-git-repo's test.sh
# runs git with fsmonitor off, so that hook never runs in either mode.
REWARD_FILE_OUTCOMES = {
    TWO: dict.fromkeys(REWARD_FILE_ATTACKS, (0.0, None)),
    ONE: {
        "reward-json-fix-failing-script": (None, "reward_files_disagree"),
        "reward-json-word-frequency": (None, "reward_files_disagree"),
        "reward-json-fix-python-bug": (None, "reward_files_disagree"),
        "fsmonitor-repair-git-repo": (0.0, None),
    },
}


def _harbor_run(
    tasks: Path, out: Path, isolation: GradingIsolation, *flags: str
) -> dict[str, dict]:
    """`skyrl harbor run -a oracle` over `tasks`: each trial's result.json by task."""
    cli = [sys.executable, "-m", "skyrl_gym", "harbor", "run", "-a", "oracle", "-n", "2"]
    done = subprocess.run(
        [*cli, *flags, "-p", str(tasks), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=isolation_env(isolation),
    )
    assert (out / "job.json").is_file(), done.stdout + done.stderr
    results = {}
    for trial in json.loads((out / "job.json").read_text())["trials"]:
        results[trial["task"]] = json.loads((out / trial["trial_name"] / "result.json").read_text())
    return results


@dataclass(frozen=True)
class AttackJob:
    """One `skyrl harbor run -a oracle` over copies of the attack tasks."""

    out: Path
    """The job's output folder."""
    job: dict
    """job.json."""
    secret: str
    """The content of the planted root-only host file."""
    server_hits: list[str]
    """Requests the loopback server received."""
    cli_output: str
    """What the CLI printed."""
    isolation: GradingIsolation
    """The grading mode the job ran in."""

    def trial(self, task: str) -> dict:
        (trial,) = [t for t in self.job["trials"] if t["task"] == task]
        return json.loads((self.out / trial["trial_name"] / "result.json").read_text())

    def oracle_log(self, task: str) -> str:
        path = self.out / self.trial(task)["trial_name"] / "agent" / "oracle.txt"
        return path.read_text(errors="replace") if path.is_file() and not path.is_symlink() else ""


class _Answer(BaseHTTPRequestHandler):
    hits: list[str]
    answer: bytes

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(self.answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module", params=[TWO, ONE], ids=lambda mode: mode.value)
def attack_job(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[AttackJob]:
    """The job, once per grading mode: two uids (where the machine has them), one uid."""
    isolation: GradingIsolation = request.param
    env = isolation_env(isolation)
    root = tmp_path_factory.mktemp("attacks")
    token = f"SKYRL-HOST-SECRET-{secrets.token_hex(12)}"
    secret = Path("/root") / f"secret-{secrets.token_hex(6)}"
    secret.write_text(token + "\n")
    secret.chmod(0o600)
    hits: list[str] = []
    answer = (ATTACKS / "host-loopback" / "tests" / "expected.txt").read_bytes()
    handler = type("Answer", (_Answer,), {"hits": hits, "answer": answer})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tasks = root / "tasks"
        shutil.copytree(ATTACKS, tasks, ignore=shutil.ignore_patterns("README.md"))
        for task in TASKS:
            (tasks / task / "solution" / "config.env").write_text(
                f"SECRET_PATH={secret}\nPORT={server.server_address[1]}\n"
            )
        out = root / "job"
        cli = [sys.executable, "-m", "skyrl_gym", "harbor", "run", "-a", "oracle"]
        done = subprocess.run(
            [*cli, "-p", str(tasks), "-o", str(out), "-n", "2"],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=REPO,  # `-m skyrl_gym` runs this checkout's code; the checkout must stay hidden
            env=env,
        )
        assert (out / "job.json").is_file(), done.stdout + done.stderr
        job = json.loads((out / "job.json").read_text())
        yield AttackJob(out, job, token, hits, done.stdout + done.stderr, isolation)
    finally:
        server.shutdown()
        server.server_close()
        secret.unlink(missing_ok=True)


@pytest.mark.parametrize("task", TASKS)
def test_oracle_attack_scores_zero(attack_job: AttackJob, task: str) -> None:
    """Vectors 1-4: the attack ran (its solve.sh says so) and earned no reward."""
    result = attack_job.trial(task)
    assert ATTEMPTED[task] in attack_job.oracle_log(task), (result, attack_job.cli_output)
    assert not result["reward"], result  # 0.0, or None: no valid reward at all


@pytest.mark.parametrize("task", sorted(GRADING_PHASE))
def test_grading_phase_attacks_end_in_their_verifier_error(attack_job: AttackJob, task: str):
    """A program test.sh runs tried to write reward 1 and kill test.sh, left a writer, tried
    test.sh's /proc/PID/mem, or rewrote test.sh or a test file: `skyrl harbor run`'s
    result.json and test-stdout.txt say which defence held, in each grading mode."""
    result = attack_job.trial(task)
    error, shown = GRADING_PHASE[task][attack_job.isolation]
    assert result["verifier_isolation"] == attack_job.isolation.value, result
    assert result["error"] == error, result
    if error is None:
        assert result["reward"] == 0.0, result
    if shown and platform.machine() == "x86_64":
        log = attack_job.out / result["trial_name"] / "verifier" / "test-stdout.txt"
        assert shown in log.read_text(), log.read_text()


def test_no_host_file_content_in_the_job_output(attack_job: AttackJob) -> None:
    """Vector 3: the planted root-only file's bytes are in no file of the job folder (links
    the agent left are copied as links, never followed)."""
    leaked = []
    for base, _, names in os.walk(attack_job.out):
        for name in names:
            path = Path(base, name)
            if path.is_symlink():
                continue
            if attack_job.secret in path.read_text(errors="replace"):
                leaked.append(str(path.relative_to(attack_job.out)))
    assert leaked == []


def test_the_hosts_loopback_server_was_never_reached(attack_job: AttackJob) -> None:
    """Vector 4: public network is a namespace of its own, with no route to host 127.0.0.1."""
    assert attack_job.server_hits == [], attack_job.oracle_log("host-loopback")
    assert "REACHED-HOST-LOOPBACK" not in attack_job.oracle_log("host-loopback")


def test_the_host_filesystem_search_finds_nothing(attack_job: AttackJob) -> None:
    """Vector 2: neither this task's tests (in the project's checkout) nor the SDK's bundled
    tasks nor the python env's answers are visible from the sandbox."""
    log = attack_job.oracle_log("host-search")
    assert "FOUND-" not in log, log


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_reward_file_attacks_run_against_the_bundled_graders() -> None:
    """Each item-2 attack folder is a copy of the bundled task (its task.toml, instruction,
    environment and tests, byte for byte: a change to the bundled task must be copied here)
    with the attack as its oracle solution."""
    for attack, bundled in REWARD_FILE_ATTACKS.items():
        ours, theirs = _files(ATTACKS / attack), _files(BUNDLED_TASKS / bundled)
        assert {k: v for k, v in ours.items() if not k.startswith("solution/")} == {
            k: v for k, v in theirs.items() if not k.startswith("solution/")
        }, attack
        assert ours["solution/solve.sh"] != theirs["solution/solve.sh"], attack


@pytest.mark.parametrize("task", sorted(REWARD_FILE_ATTACKS))
def test_agent_code_that_writes_reward_json_earns_nothing(attack_job: AttackJob, task: str):
    """Issue 23, item 2, through `skyrl harbor run`: the agent's code that test.sh runs wrote
    (or, with two uids, tried to write) `{"reward": 1.0}` to reward.json; the trial scores 0
    (two uids: the write was refused) or is void (`reward_files_disagree`)."""
    result = attack_job.trial(task)
    assert ATTEMPTED[task] in attack_job.oracle_log(task), result
    want = REWARD_FILE_OUTCOMES[attack_job.isolation][task]
    assert (result["reward"], result["error"]) == want, result


@pytest.mark.parametrize("isolation", [TWO, ONE], ids=lambda mode: mode.value)
def test_agent_code_that_writes_reward_json_earns_nothing_under_require_exit_zero(
    tmp_path: Path, isolation: GradingIsolation
):
    """The same attacks with `--require-exit-zero`: test.sh exits 0 after its (0) verdict, so
    that rule alone does not catch them."""
    tasks = tmp_path / "tasks"
    for attack in REWARD_FILE_ATTACKS:
        shutil.copytree(ATTACKS / attack, tasks / attack)  # links followed: real copies
    results = _harbor_run(tasks, tmp_path / "job", isolation, "--require-exit-zero")
    got = {task: (r["reward"], r["error"]) for task, r in results.items()}
    assert got == REWARD_FILE_OUTCOMES[isolation]


def test_agent_code_that_writes_reward_json_earns_nothing_through_make_harbor(
    isolation: GradingIsolation,
):
    """The same attack on word-frequency played through `make("harbor")` by a scripted model:
    episode reward 0, and the info says why when it is void."""
    task = ATTACKS / "reward-json-word-frequency"
    solve = (task / "solution" / "solve.sh").read_text()
    env = skyrl_gym.make("harbor", path=str(task))
    try:
        row = env.unwrapped.tasks[0]
        policy = ScriptedPolicy([bash_call(solve), ANSWER])
        traj = arun(rollout(env.unwrapped, policy, row, max_turns=4), 120)
        info = env.unwrapped.episode_info()
        assert traj.reward == 0.0, info
        want = REWARD_FILE_OUTCOMES[isolation]["reward-json-word-frequency"][1]
        assert info["verifier_error"] == want, info
        assert info["grading_isolation"] == isolation.value, info
    finally:
        env.close()


OLD_IN_PROCESS_CHECK = """\
import importlib.util

spec = importlib.util.spec_from_file_location("stats", "/app/stats.py")
stats = importlib.util.module_from_spec(spec)
spec.loader.exec_module(stats)
raise SystemExit(1)  # (the cases would follow; stats.py never lets them run)
"""


def test_agent_module_that_exits_zero_when_loaded_earns_nothing(tmp_path: Path) -> None:
    """The bundled fix-python-bug loads the agent's stats.py only in a probe child: a
    stats.py that calls os._exit(0) when loaded ends the probe, not the check (reward 0).
    Control: the check that loaded stats.py in its own process (as the task did before issue
    23) exits 0 through it, and test.sh writes reward 1."""
    tasks = tmp_path / "tasks"
    shutil.copytree(BUNDLED_TASKS / "fix-python-bug", tasks / "exits-zero")
    (tasks / "exits-zero" / "solution" / "solve.sh").write_text(
        "#!/bin/bash\nprintf 'import os\\nos._exit(0)\\n' > /app/stats.py\necho planted\n"
    )
    shutil.copytree(tasks / "exits-zero", tasks / "in-process-control")
    (tasks / "in-process-control" / "tests" / "test_stats.py").write_text(OLD_IN_PROCESS_CHECK)
    results = _harbor_run(tasks, tmp_path / "job", ONE)
    got = {task: (r["reward"], r["error"]) for task, r in results.items()}
    assert got == {"exits-zero": (0.0, None), "in-process-control": (1.0, None)}
