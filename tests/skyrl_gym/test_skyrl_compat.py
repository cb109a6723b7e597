"""Envs written for SkyRL's `skyrl-gym` run unchanged: SkyRL's import path, `register`/`make`
spellings, `init(prompt)` and the dict `step`, adapted to a Gymnasium-faithful `TextEnv`; and
SkyRL dataset rows (JSONL or parquet) accepted as task rows.

The user env is `tests/fixtures/skyrl_user_env.py` (written against SkyRL's API only)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import skyrl_gym
from skyrl_gym.checker import run_checks
from skyrl_gym.core import ResetNeeded, TextEnv
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.registry import EnvSpec
from skyrl_gym.skyrl_compat import EnvConfig, SkyRLStepError, SkyRLTextEnv
from skyrl_gym.tasks import TaskError, load_tasks, skyrl_row_parts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ROWS = FIXTURES / "skyrl_multiply_rows.jsonl"
SCRIPT = FIXTURES / "skyrl_multiply_script.json"
# What the scripted actions earn per step with a 3-turn budget (see the script's comments).
EXPECTED_STEP_REWARDS = {
    "0": [1.0],
    "1": [0.0, 1.0],
    "2": [0.0, 0.0, 0.0],
    "3": [0.0, 0.0, 0.25],
    "4": [0.0, 1.0],
}


@pytest.fixture
def user_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fixture module, imported the way a user's module is: it registers `multiply`."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    return importlib.import_module("skyrl_user_env")


def play(env: Any, task: dict[str, Any] | None, actions: list[str]) -> list[tuple]:
    """Reset on `task` and step `actions` until the episode ends; the 5-tuples."""
    env.reset(seed=0, options={"task": task} if task is not None else None)
    steps = []
    for action in actions:
        steps.append(env.step(action))
        if steps[-1][2] or steps[-1][3]:
            break
    return steps


# ---- SkyRL's base classes --------------------------------------------------------------------


def test_base_text_env_defaults_match_skyrls_contract() -> None:
    class Echo(BaseTextEnv):
        pass

    env = Echo()
    assert (env.turns, env.max_turns, env.tool_groups, env.tool_to_toolgroup) == (0, 1, [], {})
    prompt = [{"role": "user", "content": "hi"}]
    assert env.init(prompt) == (prompt, {})
    assert env.get_metrics() == {}
    with pytest.raises(NotImplementedError, match="Echo does not implement step"):
        env.step("x")
    assert Echo.aggregate_metrics([{"acc": 1.0, "ok": True, "s": "x"}, {"acc": 0.0}]) == {
        "acc": 0.5,
        "ok": 1.0,
    }
    out = BaseTextEnvStepOutput(observations=[], reward=1.0, done=True, metadata={})
    assert out == {"observations": [], "reward": 1.0, "done": True, "metadata": {}}


def test_tool_groups_are_routed_by_name() -> None:
    class Group:  # SkyRL's ToolGroup duck type
        name = "calc"

        def get_tool_to_group_mapping(self) -> dict[str, str]:
            return {"add": "calc"}

        def execute_tool(self, tool: str, *args: int) -> int:
            assert tool == "add"
            return sum(args)

    env = BaseTextEnv()
    env.init_tool_groups([Group()])
    assert env.tool_to_toolgroup == {"add": "calc"}
    assert env._execute_tool("calc", "add", [2, 3]) == 5
    with pytest.raises(ValueError, match="tool group 'nope' not found"):
        env._execute_tool("nope", "add", [1])


# ---- register / make ---------------------------------------------------------------------------


def test_skyrl_registration_makes_a_gymnasium_text_env(user_module: Any) -> None:
    spec = skyrl_gym.spec("multiply")
    assert spec.entry_point == "skyrl_user_env:MultiplyEnv"  # registered the SkyRL way
    env = skyrl_gym.make("multiply", tasks=str(ROWS), max_turns=3)
    assert isinstance(env.unwrapped, SkyRLTextEnv) and isinstance(env.unwrapped, TextEnv)
    assert [t["task_id"] for t in env.unwrapped.tasks] == ["0", "1", "2", "3", "4"]
    rows = {t["task_id"]: t for t in env.unwrapped.tasks}
    messages, info = env.reset(options={"task": rows["1"]})
    assert messages == rows["1"]["prompt"] and info == {"task_id": "1"}
    assert isinstance(env.unwrapped.skyrl_env, user_module.MultiplyEnv)
    obs, reward, terminated, truncated, info = env.step("I think \\boxed{600}")
    assert obs == [{"role": "user", "content": "600 is too small. Try again."}]
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert type(reward) is float and info["metadata"] == {"guess": 600, "turn": 1}
    obs, reward, terminated, truncated, info = env.step("\\boxed{623}")
    assert (obs, reward, terminated, truncated) == ([], 1.0, True, False)
    # get_metrics() joins EpisodeGuard's summary in the last step's info["episode"].
    assert info["episode"]["solved"] is True and info["episode"]["turns_used"] == 2
    assert info["episode"]["return"] == 1.0
    assert env.unwrapped.skyrl_env is None  # closed when the episode ended
    with pytest.raises(ResetNeeded):
        env.step("\\boxed{623}")


def test_rewards_per_row_follow_the_env(user_module: Any) -> None:
    script = json.loads(SCRIPT.read_text())["actions"]
    env = skyrl_gym.make("multiply", tasks=str(ROWS), max_turns=3)
    for row in env.unwrapped.tasks:
        steps = play(env, row, script[row["task_id"]])
        assert [s[1] for s in steps] == EXPECTED_STEP_REWARDS[row["task_id"]], row["task_id"]
        assert steps[-1][2] is True  # every scripted episode ends by the env's own `done`


def test_make_with_env_config_and_extras_as_skyrl_calls_it(user_module: Any) -> None:
    env = skyrl_gym.make(
        "multiply",
        env_config={"format_reward": 0.5},
        extras={"reward_spec": {"ground_truth": 6}, "max_turns": 1},
    )
    task = {"task_id": "t", "prompt": [{"role": "user", "content": "2 * 3?"}]}
    assert [s[1] for s in play(env, task, ["\\boxed{7}"])] == [0.5]  # format reward from config
    assert [s[1] for s in play(env, task, ["\\boxed{6}"])] == [1.0]


def test_turn_limit_reaches_extras_max_turns(user_module: Any) -> None:
    seen: list[dict[str, Any]] = []

    class Recorder(BaseTextEnv):
        def __init__(self, env_config: Any, extras: dict[str, Any]):
            super().__init__()
            seen.append({"extras": extras, "config": env_config})

        def step(self, action: str) -> BaseTextEnvStepOutput:
            return BaseTextEnvStepOutput(observations=[], reward=0, done=True, metadata={})

    row = {"task_id": "a", "prompt": [{"role": "user", "content": "go"}], "env_class": "rec"}
    row["reward_spec"] = {"ground_truth": "x"}
    skyrl_gym.register("skyrl-recorder", Recorder, max_turns=4)
    try:
        play(skyrl_gym.make("skyrl-recorder"), row, ["a"])
        play(skyrl_gym.make("skyrl-recorder", max_turns=2), row, ["a"])
    finally:
        skyrl_gym.deregister("skyrl-recorder")
    # SkyRL's extras: the row without prompt/env_class (and our task_id), plus max_turns.
    assert seen[0]["extras"] == {"reward_spec": {"ground_truth": "x"}, "max_turns": 4}
    assert seen[1]["extras"]["max_turns"] == 2
    # env_config reads by key and by attribute, like SkyRL's DictConfig.
    assert isinstance(seen[0]["config"], EnvConfig) and seen[0]["config"] == {}
    config = EnvConfig.of({"db": {"path": "/x"}})
    assert config.db.path == "/x" and config.get("missing", 3) == 3
    with pytest.raises(AttributeError, match="no field 'nope'"):
        _ = config.nope


def test_one_skyrl_instance_per_episode_each_closed(user_module: Any) -> None:
    built: list[Any] = []

    class Counted(BaseTextEnv):
        def __init__(self, env_config: Any, extras: dict[str, Any]):
            super().__init__()
            self.closes = 0
            built.append(self)

        def step(self, action: str) -> BaseTextEnvStepOutput:
            self.turns += 1
            return BaseTextEnvStepOutput(
                observations=[{"role": "user", "content": "more"}],
                reward=0.5,
                done=self.turns >= 2,
                metadata={},
            )

        def close(self) -> None:
            self.closes += 1

    env = skyrl_gym.make(EnvSpec("counted", Counted))
    task = {"task_id": 1, "prompt": [{"role": "user", "content": "go"}]}
    env.reset(options={"task": task})
    env.step("a")
    env.reset(options={"task": task})  # abandons episode 1: its instance is closed
    assert [e.turns for e in built] == [1, 0] and built[0].closes == 1
    assert [s[1:4] for s in play(env, task, ["a", "b"])] == [
        (0.5, False, False),
        (0.5, True, False),
    ]
    env.close()
    env.close()
    assert len(built) == 3 and all(e.closes == 1 for e in built)


def test_a_function_entry_point_returning_a_skyrl_env_is_wrapped(user_module: Any) -> None:
    def build(env_config: Any = None, extras: Any = None) -> Any:
        return user_module.MultiplyEnv(
            env_config or {}, extras or {"reward_spec": {"ground_truth": 1}}
        )

    env = skyrl_gym.make(EnvSpec("fn-multiply", build), max_turns=2)
    assert isinstance(env.unwrapped, SkyRLTextEnv)
    task = {"task_id": "x", "prompt": [{"role": "user", "content": "1*4"}]}
    task["reward_spec"] = {"ground_truth": 4}
    assert [s[1] for s in play(env, task, ["\\boxed{3}", "\\boxed{4}"])] == [0.0, 1.0]


def test_our_own_envs_are_not_wrapped_and_skyrl_kwargs_spelling_works() -> None:
    assert type(skyrl_gym.make("math").unwrapped).__name__ == "MathEnv"

    class Mine(TextEnv):
        def __init__(self, greeting: str = "hi"):
            self.greeting = greeting

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return [{"role": "user", "content": self.greeting}], {}

        def step(self, action):
            return [], 0.0, True, False, {}

    # SkyRL spells constructor defaults as one dict, `kwargs={...}`; ours as keywords.
    skyrl_gym.register(id="mine-skyrl-kwargs", entry_point=Mine, kwargs={"greeting": "hello"})
    try:
        env = skyrl_gym.make("mine-skyrl-kwargs")
        assert type(env.unwrapped) is Mine
        assert env.reset()[0] == [{"role": "user", "content": "hello"}]
    finally:
        skyrl_gym.deregister("mine-skyrl-kwargs")


def test_skyrl_import_paths_are_ours() -> None:
    from skyrl_gym.envs import register as envs_register
    from skyrl_gym.envs.registration import make, register

    assert envs_register is register is skyrl_gym.register and make is skyrl_gym.make


# ---- the checker through the adapter ---------------------------------------------------------


def test_the_multiply_env_passes_every_check(user_module: Any) -> None:
    rows = load_tasks(ROWS)
    results = run_checks(lambda: skyrl_gym.make("multiply", tasks=rows))
    assert [r.name for r in results if not r.passed] == [], results


def test_a_broken_skyrl_env_fails_the_checker_with_its_message() -> None:
    class Fragile(BaseTextEnv):
        def __init__(self, env_config: Any, extras: dict[str, Any]):
            super().__init__()

        def step(self, action: str) -> BaseTextEnvStepOutput:
            return BaseTextEnvStepOutput(
                observations=[], reward=float(len(action) > 0) / len(action), done=True, metadata={}
            )

    rows = [{"task_id": "a", "prompt": [{"role": "user", "content": "say something"}]}]
    results = {
        r.name: r for r in run_checks(lambda: skyrl_gym.make(EnvSpec("f", Fragile), tasks=rows))
    }
    assert not results["check_hostile_actions"].passed
    assert "ZeroDivisionError" in results["check_hostile_actions"].message


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (("obs", 1.0, True), "must return a dict with observations, reward and done"),
        ({"observations": [], "reward": 1.0}, "got ['observations', 'reward']"),
        ({"observations": [], "reward": "high", "done": True}, "'reward' must be a number"),
        ({"observations": "text", "reward": 0.0, "done": True}, "must be a list of chat messages"),
    ],
)
def test_step_outputs_outside_skyrls_contract_are_named(returned: Any, message: str) -> None:
    class Odd(BaseTextEnv):
        def __init__(self, env_config: Any, extras: dict[str, Any]):
            super().__init__()

        def step(self, action: str) -> Any:
            return returned

    env = skyrl_gym.make(EnvSpec("odd", Odd))
    env.reset(options={"task": {"task_id": 0, "prompt": [{"role": "user", "content": "x"}]}})
    with pytest.raises(SkyRLStepError, match=r"Odd\.step\(\)") as e:
        env.step("a")
    assert message in str(e.value)


def test_rows_for_another_registered_env_are_refused(user_module: Any) -> None:
    env = skyrl_gym.make("multiply", max_turns=1)
    row = load_tasks(ROWS)[0]
    assert play(env, {**row, "env_class": "not-registered-anywhere"}, ["\\boxed{408}"])[0][1] == 1.0
    with pytest.raises(
        TaskError, match=r"env_class 'text2sql', registered to 'skyrl_gym\.envs\.sql"
    ):
        env.reset(options={"task": {**row, "env_class": "text2sql"}})


def test_a_skyrl_env_without_rows_says_where_rows_come_from(user_module: Any) -> None:
    env = skyrl_gym.make("multiply")
    with pytest.raises(ValueError, match=r"MultiplyEnv has no dataset.*--tasks FILE"):
        env.reset(seed=0)


# ---- SkyRL dataset rows ------------------------------------------------------------------------


def test_skyrl_rows_load_with_their_position_as_task_id() -> None:
    rows = load_tasks(ROWS)
    raw = [json.loads(line) for line in ROWS.read_text().splitlines()]
    assert [r["task_id"] for r in rows] == ["0", "1", "2", "3", "4"]
    assert [{k: v for k, v in r.items() if k != "task_id"} for r in rows] == raw
    prompt, extras = skyrl_row_parts(rows[1])
    assert prompt == raw[1]["prompt"]
    assert extras == {k: raw[1][k] for k in ("data_source", "reward_spec", "extra_info")}


def test_rows_with_their_own_task_id_keep_it(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    prompt = [{"role": "user", "content": "q"}]
    path.write_text(
        json.dumps({"task_id": "own", "prompt": prompt}) + "\n\n" + json.dumps({"prompt": prompt})
    )
    assert [r["task_id"] for r in load_tasks(path)] == ["own", "1"]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": []}, "empty 'prompt'"),
        ({"prompt": ["hello"]}, "'prompt' message 0 is not a chat message"),
        ({"prompt": [{"role": "user", "content": 3}]}, "'prompt' message 0 is not a chat message"),
        ({"prompt": [{"role": "user", "content": "q"}], "env_class": 5}, "'env_class' must be"),
        ({"reward_spec": {}}, "no usable 'task_id'"),
    ],
)
def test_malformed_skyrl_rows_name_file_line_and_field(
    tmp_path: Path, row: dict[str, Any], message: str
) -> None:
    path = tmp_path / "rows.jsonl"
    good = {"prompt": [{"role": "user", "content": "q"}]}
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(TaskError, match=rf"rows\.jsonl:2: .*{message}"):
        load_tasks(path)


def test_parquet_rows_read_like_jsonl(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow (the parquet extra) is absent")
    import pyarrow as pa

    raw = [json.loads(line) for line in ROWS.read_text().splitlines()]
    for r in raw:  # one parquet column has one type: SkyRL's datasets store strings
        r["reward_spec"]["ground_truth"] = str(r["reward_spec"]["ground_truth"])
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(raw), path)
    rows = load_tasks(path)
    assert [r["task_id"] for r in rows] == ["0", "1", "2", "3", "4"]
    assert [{k: v for k, v in r.items() if k != "task_id"} for r in rows] == raw


def test_parquet_without_pyarrow_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rows.parquet"
    path.write_bytes(b"PAR1 not really")
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # makes `import pyarrow...` fail
    with pytest.raises(
        TaskError, match=r"parquet needs pyarrow.*pip install 'skyrl-sdk\[parquet\]'"
    ):
        load_tasks(path)


def test_a_corrupt_parquet_file_is_a_task_error(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow.parquet", reason="pyarrow (the parquet extra) is absent")
    path = tmp_path / "rows.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(TaskError, match="not a readable parquet file"):
        load_tasks(path)


# ---- SkyRL tool groups -------------------------------------------------------------------------


def test_a_tool_group_env_runs_through_the_adapter() -> None:
    import re

    from skyrl_gym.tools.core import ToolGroup, tool

    class Arithmetic(ToolGroup):
        def __init__(self) -> None:
            super().__init__(name="Arithmetic")

        @tool
        def add(self, a: str, b: str) -> str:
            return str(int(a) + int(b))

    class AddEnv(BaseTextEnv):
        """`<add>A,B</add>` calls the tool; `<answer>N</answer>` ends the episode."""

        def __init__(self, env_config: Any, extras: dict[str, Any]):
            super().__init__()
            self.answer = extras["reward_spec"]["ground_truth"]
            self.init_tool_groups([Arithmetic()])

        def step(self, action: str) -> BaseTextEnvStepOutput:
            if m := re.search(r"<answer>(.*?)</answer>", action):
                ok = m.group(1).strip() == self.answer
                return BaseTextEnvStepOutput(
                    observations=[], reward=float(ok), done=True, metadata={}
                )
            call = re.search(r"<add>(-?\d{1,9}),(-?\d{1,9})</add>", action)
            result = self._execute_tool("Arithmetic", "add", call.groups()) if call else "use <add>"
            return BaseTextEnvStepOutput(
                observations=[{"role": "user", "content": result}],
                reward=0.0,
                done=False,
                metadata={"tool": "add" if call else None},
            )

    assert Arithmetic().get_tool_names() == ["add"]
    with pytest.raises(ValueError, match="tool 'sub' not found in group 'Arithmetic'"):
        Arithmetic().execute_tool("sub", 1, 2)
    rows = [
        {"prompt": [{"role": "user", "content": "19+23?"}], "reward_spec": {"ground_truth": "42"}},
        {"prompt": [{"role": "user", "content": "1+1?"}], "reward_spec": {"ground_truth": "2"}},
    ]
    make = lambda: skyrl_gym.make(EnvSpec("add-tools", AddEnv), tasks=rows, max_turns=4)  # noqa: E731
    assert [r.name for r in run_checks(make) if not r.passed] == []
    env = make()
    steps = play(env, env.unwrapped.tasks[0], ["<add>19,23</add>", "<answer>42</answer>"])
    assert [(s[0], s[1]) for s in steps] == [([{"role": "user", "content": "42"}], 0.0), ([], 1.0)]
