"""Vector 8 (issue 14): unbounded SQL on the exploration, reward and eval paths.

Each attack runs through the public entry points (`skyrl_gym.make("sql" | "sql-basic")`, the
`skyrl text2sql eval` CLI) in a child process bounded by an address-space limit, a file-size
limit and a timeout, so that a path without caps fails the test instead of eating the machine;
its peak resident memory comes from `wait4`. The caps under test live in
`skyrl_sdk.tools.sql_limits` (10,000 rows, 16 MiB of result, 256 MiB of memory growth).
"""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]

ADDRESS_SPACE = 2 << 30
"""RLIMIT_AS of every child: an uncapped path runs into it instead of into the machine."""
FILE_SIZE = 1 << 30
"""RLIMIT_FSIZE of every child (SQLite's temporary files)."""
PEAK_RSS_BOUND = 1 << 30
"""The containment bound: a capped path stays well under it (caps add at most ~300 MB)."""

ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c)"
ENDLESS_ROWS = f"{ENDLESS} SELECT x,x FROM c"
"""The issue's query: an endless result of small rows."""
ENDLESS_WIDE = f"{ENDLESS} SELECT x, hex(randomblob(4000000)), hex(randomblob(4000000)) FROM c"
"""Endless 16 MB rows: a row count alone (the exploration's 50-row cut) does not bound it."""
ENDLESS_SORT = f"{ENDLESS} SELECT x FROM c ORDER BY x DESC"
"""Nothing comes out before the endless input is sorted: no row or byte cap ever sees a row."""


@dataclass(frozen=True)
class Bounded:
    """How a bounded child process ended."""

    returncode: int | None
    """Its exit code, or None when it was killed at the timeout."""
    stdout: str
    """Everything it printed."""
    stderr: str
    """Its error output."""
    peak_rss: int
    """Its peak resident memory in bytes (from `wait4`)."""
    seconds: float
    """Wall time until it ended or was killed."""

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def result(self) -> dict[str, Any]:
        """The JSON object on its last line of output."""
        assert self.returncode == 0, f"child failed ({self.returncode}):\n{self.stderr[-3000:]}"
        return json.loads(self.stdout.strip().splitlines()[-1])


def _limit_child() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE, FILE_SIZE))


def run_bounded(args: list[str], *, timeout_s: float, tmp: Path) -> Bounded:
    """Run `python ARGS` from the repository root under the limits above."""
    env = {**os.environ, "SQLITE_TMPDIR": str(tmp), "PYTHONDONTWRITEBYTECODE": "1"}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=err,
            preexec_fn=_limit_child,
        )
        killed = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - started > timeout_s:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                killed = True
                break
            time.sleep(0.02)
        seconds = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        return Bounded(
            None if killed else proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            usage.ru_maxrss * 1024,
            seconds,
        )


def assert_contained(run: Bounded, what: str) -> None:
    """The containment assertion: the child finished on its own, within the memory bound."""
    assert not run.timed_out, f"{what}: still running after {run.seconds:.0f} s (not stopped)"
    assert run.peak_rss < PEAK_RSS_BOUND, (
        f"{what}: the process grew to {run.peak_rss / 2**20:,.0f} MiB "
        f"(bound {PEAK_RSS_BOUND / 2**20:,.0f} MiB; the child's address space is capped at "
        f"{ADDRESS_SPACE / 2**20:,.0f} MiB)"
    )


@pytest.fixture
def db_root(tmp_path: Path) -> Path:
    """A Spider-layout folder with one small SQLite database, `shop`."""
    path = tmp_path / "data" / "shop" / "shop.sqlite"
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE person (id INTEGER PRIMARY KEY, name TEXT, age INTEGER);"
        "INSERT INTO person VALUES (1, 'Ann', 31), (2, 'Bob', 25), (3, 'Cid', 40);"
    )
    conn.commit()
    conn.close()
    return path.parent.parent


SQL_ENV_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import skyrl_gym
    root, action = sys.argv[1], sys.argv[2]
    task = {"task_id": "t", "question": "q", "db_id": "shop",
            "gold_sql": "SELECT name FROM person WHERE age > 30"}
    env = skyrl_gym.make("sql", tasks=[task], db_root=root)
    env.reset(options={"task": task})
    obs, reward, terminated, truncated, info = env.step(action)
    text = obs[0]["content"] if obs else ""
    print(json.dumps({"reward": reward, "episode": info.get("episode"), "length": len(text),
                      "head": text[:300], "tail": text[-600:]}))
    """
)

SQL_BASIC_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import skyrl_gym
    env = skyrl_gym.make("sql-basic")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(sys.argv[2])
    text = obs[0]["content"]
    print(json.dumps({"reward": reward, "length": len(text), "head": text[:300],
                      "tail": text[-600:]}))
    """
)


def play(script: str, db_root: Path, action: str, tmp: Path, timeout_s: float = 30) -> Bounded:
    return run_bounded(["-c", script, str(db_root), action], timeout_s=timeout_s, tmp=tmp)


def test_recursive_cte_as_solution_scores_zero_within_bounds(db_root: Path, tmp_path: Path) -> None:
    """Vector 8: `<solution>` with an endless recursive CTE (the reward path, solution side)."""
    run = play(
        SQL_ENV_SCRIPT, db_root, f"<think>x</think><solution>{ENDLESS_ROWS}</solution>", tmp_path
    )
    assert_contained(run, "endless <solution>")
    result = run.result()
    assert result["reward"] == 0.0
    assert result["episode"]["outcome"] == "wrong"
    assert "row cap" in result["episode"]["problem"], result["episode"]


def test_gold_query_runs_under_the_same_caps(db_root: Path, tmp_path: Path) -> None:
    """Vector 8: a gold query that never ends (a broken dataset row) cannot take the process."""
    script = SQL_ENV_SCRIPT.replace(
        '"gold_sql": "SELECT name FROM person WHERE age > 30"', f'"gold_sql": {ENDLESS_ROWS!r}'
    )
    run = play(script, db_root, "<think>x</think><solution>SELECT 1</solution>", tmp_path)
    assert_contained(run, "endless gold query")
    result = run.result()
    assert result["reward"] == 0.0 and "row cap" in result["episode"]["problem"]


@pytest.mark.parametrize("env_id", ["sql", "sql-basic"])
def test_recursive_cte_exploration_is_truncated_with_a_marker(
    env_id: str, db_root: Path, tmp_path: Path
) -> None:
    """Vector 8: an exploring `<sql>` call over an endless CTE of 16 MB rows: the rows kept are
    bounded in bytes, not only in number, and the observation ends with a truncation marker."""
    script = SQL_ENV_SCRIPT if env_id == "sql" else SQL_BASIC_SCRIPT
    run = play(script, db_root, f"<think>x</think><sql>{ENDLESS_WIDE}</sql>", tmp_path)
    assert_contained(run, f"{env_id} exploration of endless wide rows")
    result = run.result()
    assert result["length"] < 40_000, result["head"]
    assert "[... truncated:" in result["tail"], result["tail"]


def test_randomblob_observation_is_cut_with_a_marker(db_root: Path, tmp_path: Path) -> None:
    """Vector 8: one 8-million-character value (under the byte cap) gives an observation cut
    to the observation limit, with a `[... truncated: N more characters ...]` marker."""
    action = "<think>x</think><sql>SELECT hex(randomblob(4000000))</sql>"
    run = play(SQL_ENV_SCRIPT, db_root, action, tmp_path)
    assert_contained(run, "randomblob observation")
    result = run.result()
    assert result["length"] < 40_000, f"a {result['length']:,}-character observation"
    assert "more characters ...]" in result["tail"], result["tail"]


def test_issue_randomblob_query_gives_a_short_clear_observation(
    db_root: Path, tmp_path: Path
) -> None:
    """Vector 8: the issue's `SELECT hex(randomblob(100000000))` (a 200-million-character value)
    is refused by the byte cap with a short observation that names it."""
    action = "<think>x</think><sql>SELECT hex(randomblob(100000000))</sql>"
    run = play(SQL_ENV_SCRIPT, db_root, action, tmp_path)
    assert_contained(run, "the issue's randomblob query")
    result = run.result()
    assert result["length"] < 2_000, f"a {result['length']:,}-character observation"
    assert "16 MiB" in result["head"], result["head"]


def test_order_by_over_endless_cte_is_stopped_by_the_memory_bound(
    db_root: Path, tmp_path: Path
) -> None:
    """Vector 8: sorting an endless CTE returns no row before it runs out of memory (or, with
    temporary files, fills the disk): only the memory bound stops it, long before its 30 s
    time limit, and the solution scores 0 naming the memory cap."""
    run = play(
        SQL_ENV_SCRIPT,
        db_root,
        f"<think>x</think><solution>{ENDLESS_SORT}</solution>",
        tmp_path,
        timeout_s=25,
    )
    assert_contained(run, "ORDER BY over an endless CTE")
    result = run.result()
    assert result["reward"] == 0.0
    assert "memory cap" in result["episode"]["problem"], result["episode"]


def test_text2sql_eval_caps_each_prediction_and_keeps_going(db_root: Path, tmp_path: Path) -> None:
    """Vector 8: `skyrl text2sql eval` with endless predictions between good ones: memory stays
    bounded, each endless one scores 0 as `pred_too_large`, and the others are still scored."""
    dev = [
        {"db_id": "shop", "question": "Names over 30", "query": "SELECT name FROM person WHERE age > 30"},
        {"db_id": "shop", "question": "Endless", "query": "SELECT name FROM person"},
        {"db_id": "shop", "question": "Sorted", "query": "SELECT name FROM person ORDER BY name"},
        {"db_id": "shop", "question": "Endless sort", "query": "SELECT age FROM person"},
    ]  # fmt: skip
    dataset = db_root / "dev.json"
    dataset.write_text(json.dumps(dev))
    predictions = tmp_path / "pred.sql"
    predictions.write_text(
        "\n".join(
            [
                "SELECT name FROM person WHERE age >= 31",
                ENDLESS_ROWS,
                "SELECT name FROM person ORDER BY name",
                ENDLESS_SORT,
            ]
        )
        + "\n"
    )
    out = tmp_path / "out"
    cli = "import sys; from skyrl_gym.cli import main; sys.argv[0] = 'skyrl'; main()"
    args = ["-c", cli, "text2sql", "eval", "--dataset", str(dataset), "--db-root", str(db_root),
            "--predictions", str(predictions), "--out", str(out)]  # fmt: skip
    run = run_bounded(args, timeout_s=60, tmp=tmp_path)
    assert_contained(run, "text2sql eval")
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    statuses = [item["status"] for item in data["items"]]
    assert statuses == ["correct", "pred_too_large", "correct", "pred_too_large"], data["items"]
    assert "row cap" in data["items"][1]["error"]
    assert "memory cap" in data["items"][3]["error"]
    assert data["accuracy"] == 0.5
