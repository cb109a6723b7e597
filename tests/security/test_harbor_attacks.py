"""Issue 14's "Must show": Harbor tasks whose oracle solution IS an attack all score 0.

`tests/security/harbor_attacks/` holds one task per attack (see its README): start-up hooks
for the verifier's Python (vector 1), a detached process waiting for the verifier (vector 1),
symlinked verifier files (vector 3), the host's loopback (vector 4), a search of the host's
filesystem for the hidden tests and the SDK's bundled tasks (vector 2), and programs that
test.sh runs attacking the grading from inside it (kill test.sh after writing reward 1, a
writer left behind, test.sh's /proc/PID/mem, rewriting test.sh or a test file; see also
test_verifier_processes.py). They run through the
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

from tests.conftest import needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="the planted secret must be root-only"),
]

ATTACKS = Path(__file__).with_name("harbor_attacks")
REPO = Path(__file__).parents[2]
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
}
# The grading-phase attacks (test.sh runs the program they install): the verifier error each
# must end in, and what test-stdout.txt must show.
GRADING_PHASE = {
    "verifier-killer": ("verifier_killed", ""),
    "lingering-writer": ("verifier_stray_processes", "greet.sh printed: goodbye"),
    "orphan-rewriter": ("verifier_stray_processes", "greet.sh printed: goodbye"),
    "proc-mem-writer": (None, "mem refused: Read-only file system"),
    "script-rewriter": (None, "greet.sh printed: append refused"),
    "helper-swapper": (None, "greet.sh printed: swap refused"),
    "early-exit": ("verifier_exit_nonzero", ""),
}


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


@pytest.fixture(scope="module")
def attack_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AttackJob]:
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
        )
        assert (out / "job.json").is_file(), done.stdout + done.stderr
        job = json.loads((out / "job.json").read_text())
        yield AttackJob(out, job, token, hits, done.stdout + done.stderr)
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
    """A program test.sh runs (same uid) wrote reward 1 and killed test.sh, left a writer,
    tried test.sh's /proc/PID/mem, or rewrote test.sh or a test file: `skyrl harbor run`'s
    result.json and test-stdout.txt say which defence held."""
    result = attack_job.trial(task)
    error, shown = GRADING_PHASE[task]
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
