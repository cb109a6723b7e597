"""The `sql` env: SkyRL-SQL protocol, reward 1 / 0 / -1, read-only episodes, native tool calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_gym.envs.sql.env import INVALID_ACTION, TRUNCATION_NOTE, SQLEnv
from skyrl_gym.envs.sql.reward import check_format
from tests.skyrl_gym.envs.sql.conftest import digest, make_sqlite

GOLD = "SELECT name FROM person WHERE age > 30"
TASK = {"task_id": "t1", "question": "Who is older than 30?", "db_id": "shop", "gold_sql": GOLD}


def play(env, actions):  # type: ignore[no-untyped-def]
    results = []
    for action in actions:
        results.append(env.step(action))
        if results[-1][2] or results[-1][3]:
            break
    return results


def test_explore_error_fix_answer_scores_one(db_root: Path) -> None:
    env = skyrl_gym.make("sql", tasks=[TASK], db_root=db_root)
    messages, info = env.reset(options={"task": TASK})
    assert messages[0]["role"] == "system" and "<solution>" in messages[0]["content"]
    assert "CREATE TABLE person" in messages[1]["content"]  # schema read from the database
    assert "Who is older than 30?" in messages[1]["content"] and info["task_id"] == "t1"
    results = play(env, [
        "<think>What tables are there?</think>\n<sql>SELECT name FROM sqlite_master</sql>",
        "<think>Ages.</think>\n<sql>SELECT name, agee FROM person</sql>",
        "<think>Typo; fix it.</think>\n<sql>SELECT name, age FROM person WHERE age > 30</sql>",
        f"<think>Got it.</think>\n<solution>{GOLD}</solution>",
    ])  # fmt: skip
    obs = [r[0][0]["content"] for r in results[:3]]
    assert all(o.startswith("\n\n<observation>") and o.endswith("</observation>\n\n") for o in obs)
    assert "<reminder>You have 5 turns left to complete the task.</reminder>" in obs[0]
    assert "You have 3 turns left" in obs[2]
    assert "Error executing SQL: no such column: agee" in obs[1]
    assert "Ann" in obs[2] and "Cid" in obs[2] and "Bob" not in obs[2]
    assert [r[1] for r in results] == [0.0, 0.0, 0.0, 1.0]
    messages, reward, terminated, truncated, info = results[-1]
    assert messages == [] and terminated and not truncated
    assert info["episode"]["correct"] and info["episode"]["outcome"] == "correct"
    assert results[0][4]["tool_calls"][0]["arguments"]["query"].startswith("SELECT name")
    env.close()
    env.close()


def test_wrong_answer_scores_zero_and_format_violations_minus_one(db_root: Path) -> None:
    env = SQLEnv(tasks=[TASK], db_root=db_root)
    env.reset(options={"task": TASK})
    assert env.step("<think>hm</think><solution>SELECT name FROM person</solution>")[1] == 0.0
    env.reset(options={"task": TASK})
    assert env.step(f"<solution>{GOLD}</solution>")[1] == -1.0  # no <think>
    env.reset(options={"task": TASK})
    env.step("<think>a</think><sql>SELECT 1</sql>")
    # after an observation the next reply must start with <think>
    assert env.step(f"<solution>{GOLD}</solution><think>x</think>")[1] == -1.0
    env.reset(options={"task": TASK})
    assert env.step(f"<think>a</think><solution><sql>{GOLD}</sql></solution>")[1] == -1.0


def test_running_out_of_turns_is_truncated_with_minus_one(db_root: Path) -> None:
    env = skyrl_gym.make("sql", tasks=[TASK], db_root=db_root)
    env.reset(options={"task": TASK})
    results = play(env, ["<think>x</think><sql>SELECT 1</sql>"] * 10)
    assert len(results) == 6  # default max_turns, as in the SkyRL-SQL recipe
    _, reward, terminated, truncated, info = results[-1]
    assert reward == -1.0 and truncated and not terminated
    assert info["episode"]["outcome"] == "format_violation"
    short = SQLEnv(tasks=[TASK], db_root=db_root, max_turns=2)
    short.reset(options={"task": TASK})
    assert (
        "You have 1 turns left"
        in short.step("<think>x</think><sql>SELECT 1</sql>")[0][0]["content"]
    )
    assert short.step("<think>x</think><sql>SELECT 1</sql>")[3]


def test_invalid_action_observation(db_root: Path) -> None:
    env = SQLEnv(tasks=[TASK], db_root=db_root)
    env.reset(options={"task": TASK})
    messages, reward, terminated, truncated, info = env.step("I think it is Ann.")
    assert INVALID_ACTION in messages[0]["content"] and reward == 0.0
    assert info["parse_error"]["kind"] == "no_action" and not (terminated or truncated)


def test_write_attempts_are_refused_and_database_is_byte_identical(db_root: Path) -> None:
    path = db_root / "shop" / "shop.sqlite"
    before = digest(path)
    env = SQLEnv(tasks=[TASK], db_root=db_root, max_turns=10)
    env.reset(options={"task": TASK})
    attempts = [
        "DELETE FROM person",
        "UPDATE person SET age = 99",
        "DROP TABLE person",
        f"ATTACH DATABASE '{db_root}/evil.sqlite' AS evil",
        "PRAGMA journal_mode = WAL",
        "SELECT 1; DELETE FROM person",
        "WITH x AS (SELECT 1) INSERT INTO city VALUES (9, 'X', 'Y')",
    ]
    for sql in attempts:
        content = env.step(f"<think>try</think><sql>{sql}</sql>")[0][0]["content"]
        assert "SQL refused: refused:" in content, content
        assert "read-only" in content or "one statement" in content
    final = env.step("<think>ok</think><solution>DELETE FROM person</solution>")
    assert final[1] == 0.0 and final[4]["episode"]["outcome"] == "wrong"
    env.close()
    assert digest(path) == before
    assert not (db_root / "evil.sqlite").exists()


def test_long_results_are_cut_to_50_rows(tmp_path: Path) -> None:
    rows = ",".join(f"({i}, '{'x' * 40}')" for i in range(400))
    make_sqlite(
        tmp_path / "big" / "big.sqlite",
        f"CREATE TABLE t (i INT, s TEXT); INSERT INTO t VALUES {rows};",
    )
    task = {"task_id": "b", "question": "q", "db_id": "big", "gold_sql": "SELECT COUNT(*) FROM t"}
    env = SQLEnv(tasks=[task], db_root=tmp_path)
    env.reset(options={"task": task})
    content = env.step("<think>x</think><sql>SELECT * FROM t</sql>")[0][0]["content"]
    body = content.split("<observation>")[1].split("\n<reminder>")[0]
    assert body.startswith(TRUNCATION_NOTE)
    assert len(body[len(TRUNCATION_NOTE) :].splitlines()) == 51  # header + 50 rows
    small = env.step("<think>x</think><sql>SELECT i FROM t WHERE i < 60</sql>")[0][0]["content"]
    assert TRUNCATION_NOTE not in small and "\n59\n" in small  # short enough: every row shown


def test_text2sql_alias_and_bundled_default(bundled: Path) -> None:
    env = skyrl_gym.make("text2sql")
    messages, info = env.reset(seed=3)
    assert info["task_id"].startswith("bundled-")
    task = env.unwrapped.task
    result = env.step(f"<think>known</think><solution>{task['gold_sql']}</solution>")
    assert result[1] == 1.0
    env.close()


def test_env_checker_passes(bundled: Path) -> None:
    skyrl_gym.check_env(lambda: skyrl_gym.make("sql"))


def test_native_hermes_tool_calls(db_root: Path) -> None:
    env = SQLEnv(tasks=[TASK], db_root=db_root, tool_format="hermes")
    messages, _ = env.reset(options={"task": TASK})
    assert "<tools>" in messages[0]["content"]

    def call(name: str, **arguments: str) -> str:
        return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"

    obs = env.step(call("sql", query="SELECT name FROM person WHERE age > 30"))[0]
    assert obs[0]["role"] == "tool" and "Ann" in obs[0]["content"]
    bad = env.step("<tool_call>{not json</tool_call>")
    assert bad[4]["parse_error"]["kind"] == "invalid_json"
    done = env.step(call("solution", sql=GOLD))
    assert done[1] == 1.0 and done[2]


def test_duckdb_task(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "shop.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE person (name TEXT, age INTEGER)")
    conn.execute("INSERT INTO person VALUES ('Ann', 31), ('Bob', 25)")
    conn.close()
    task = {**TASK, "db": f"duckdb:///{path}"}
    env = SQLEnv(tasks=[task])
    messages, _ = env.reset(options={"task": task})
    assert "DuckDB" in messages[0]["content"] and "person" in messages[1]["content"]
    assert "Ann" in env.step("<think>x</think><sql>SELECT * FROM person</sql>")[0][0]["content"]
    assert env.step(f"<think>x</think><solution>{GOLD}</solution>")[1] == 1.0
    env.close()


def test_check_format_rules() -> None:
    ok = "<think>a</think><sql>x</sql>\n\n<observation>r</observation>\n\n<think>b</think><solution> S </solution>"
    assert check_format(ok) == ("S", None)
    assert (
        check_format("<think>a</think>")[1] == "there must be exactly one <solution>...</solution>"
    )
    two = "<think>a</think><solution>1</solution><solution>2</solution>"
    assert check_format(two)[0] is None
    assert check_format("<think>a</think></solution>x<solution>")[0] is None
