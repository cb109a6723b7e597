"""`skyrl train` on what users bring: a Gymnasium-style env played by seeds (the README's
`GuessEnv`), a ToolEnv of their own on their rows file, and one-line errors for bad input.

The CLI runs are the installed `skyrl` script (as a user runs it); the seed stream, held-out
seeds, resume and the per-step warnings are checked in process, where they are cheap."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import skyrl_gym
from skyrl_gym import TextEnv
from skyrl_gym.registry import resolve
from skyrl_sdk.agents.trajectory import read_trajectories
from skyrl_sdk.trainer.async_trainer import AsyncTrainer
from skyrl_sdk.trainer.batch import flat_groups
from skyrl_sdk.trainer.checkpoint import ResumeConfigError
from skyrl_sdk.trainer.config import ConfigError, ModelSource, build_config
from skyrl_sdk.trainer.loop import TrainingLoop, unknown_tokens
from skyrl_sdk.trainer.run_env import SeedStream

REPO = Path(__file__).resolve().parents[2]
SKYRL = Path(sys.executable).with_name("skyrl")

SMALL = (
    "trainer.groups_per_step=2",
    "rollout.group_size=2",
    "logging.console=false",
)
"""Overrides that keep a run to a few seconds on a CPU (the default model: `tiny`)."""

USER_ENVS = textwrap.dedent(
    '''
    """A user's own envs, outside the package: a ToolEnv over rows, and broken ones."""

    import skyrl_gym
    from skyrl_gym import TextEnv, ToolEnv
    from skyrl_gym.tool_env import Tooling
    from skyrl_sdk.tools import tool


    @tool
    def double(n: int) -> str:
        """Double a number.

        Args:
            n: The number.
        """
        return str(2 * n)


    class DoubleEnv(ToolEnv):
        """Double the row's number with the tool, then answer."""

        required_fields = ("n",)
        system_prompt = "Use the double tool, then answer."

        def __init__(self, tasks=None):
            super().__init__(tasks, Tooling.build([double], "xml", self.system_prompt))

        def prompt(self, task):
            return f"What is twice {task['n']}?"

        def score(self, task, answer):
            return float(answer.strip() == str(2 * task["n"]))


    class Broken(TextEnv):
        """Its constructor fails: a bug, not bad input."""

        def __init__(self):
            raise RuntimeError("boom in the env's own code")

        def reset(self, *, seed=None, options=None):
            return [], {}

        def step(self, action):
            return [], 0.0, True, False, {}
    '''
)

ROWS = [{"task_id": f"d{i}", "n": i} for i in range(5)]


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "user_envs.py").write_text(USER_ENVS)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return tmp_path


def skyrl_train(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SKYRL), "train", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"COLUMNS": "300", "PATH": "/usr/bin:/bin", "HOME": "/tmp", "HF_HUB_OFFLINE": "1"},
    )


def assert_one_line_error(out: subprocess.CompletedProcess, *parts: str) -> None:
    """Exit 2, one line on stdout naming the field, no traceback."""
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    for part in parts:
        assert part in lines[0], lines[0]


# -- seed-driven envs ---------------------------------------------------------------------


def test_the_readme_guess_env_trains_by_seeds_through_the_cli(tmp_path: Path) -> None:
    """The issue's command, verbatim plus a small batch: exit 0, seed episodes."""
    out = skyrl_train(
        REPO,
        "-",
        "env.id=examples.guess_env:GuessEnv",
        "trainer.steps=2",
        f"out_dir={tmp_path / 'run'}",
        *SMALL,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "trained 2 steps" in out.stdout
    assert "unknown to the tokenizer" not in out.stdout  # `tiny` is byte-level
    trajectories = read_trajectories(tmp_path / "run" / "trajectories.jsonl")
    assert len(trajectories) == 2 * 2 * 2
    by_group: dict[str, set[int | None]] = defaultdict(set)
    for t in trajectories:
        assert t.seed is not None and t.task_id == f"seed-{t.seed}"
        assert 0 <= t.seed < 1_000_000  # below heldout.seed_offset
        by_group[t.episode_id.split("/")[0]].add(t.seed)
    assert all(len(seeds) == 1 for seeds in by_group.values())  # a group shares its seed
    assert len({s for seeds in by_group.values() for s in seeds}) == 4


class Secret(TextEnv):
    """Say the secret digit drawn from the seed; the opening names the seed's digit count."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.secret = str(int(self.np_random.integers(0, 10)))
        return [{"role": "user", "content": "say a digit"}], {}

    def step(self, action: str):
        return [], float(action.strip() == self.secret), True, False, {}


class Constant(TextEnv):
    """Every episode gets `reward`, whatever is said: no learning signal, ever."""

    def __init__(self, reward: float = 1.0):
        self.reward = reward

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return [{"role": "user", "content": "anything"}], {}

    def step(self, action: str):
        return [], self.reward, True, False, {}


skyrl_gym.register("test-secret", Secret, max_turns=1)
skyrl_gym.register("test-constant", Constant, max_turns=1)


def _seed_config(out: Path, *extra: str):
    return build_config(
        {},
        [
            "env.id=test-secret",
            "env.max_turns=1",
            f"out_dir={out}",
            "rollout.max_tokens=2",
            "logging.console=false",
            *SMALL,
            *extra,
        ],
    )


def _group_seeds(path: Path) -> dict[int, int]:
    seeds: dict[int, set[int | None]] = defaultdict(set)
    for t in read_trajectories(path):
        seeds[int(t.episode_id[1:].split("/")[0])].add(t.seed)
    assert all(len(s) == 1 for s in seeds.values())
    return {g: next(iter(s)) for g, s in seeds.items()}  # type: ignore[misc]


def test_seed_stream_is_a_function_of_the_run_seed_and_group_below_the_limit() -> None:
    stream = SeedStream(0, 1000)
    seeds = [stream.seed(g) for g in range(200)]
    assert seeds == [SeedStream(0, 1000).seed(g) for g in range(200)]  # replayable
    assert all(0 <= s < 1000 for s in seeds) and len(set(seeds)) > 150
    assert seeds != [SeedStream(1, 1000).seed(g) for g in range(200)]


def test_seed_episodes_stay_below_the_heldout_offset_which_heldout_plays_up_from(
    tmp_path: Path,
) -> None:
    cfg = _seed_config(
        tmp_path,
        "trainer.steps=2",
        "heldout.env_kwargs={}",
        "heldout.episodes=3",
        "heldout.seed_offset=50",
    )
    AsyncTrainer(cfg).run()
    train = _group_seeds(tmp_path / "trajectories.jsonl")
    assert sorted(train) == [0, 1, 2, 3] and all(0 <= s < 50 for s in train.values())
    held = read_trajectories(tmp_path / "heldout_trajectories.jsonl")
    # Before the first step and after the last: the same seeds 50, 51, 52 each time.
    assert [t.seed for t in held] == [50, 51, 52] * 2
    assert [t.task_id for t in held[:3]] == ["seed-50", "seed-51", "seed-52"]


def test_resume_replays_each_groups_seed_and_refuses_changed_rows(
    tmp_path: Path, user_dir: Path
) -> None:
    cfg = _seed_config(tmp_path, "trainer.steps=2", "trainer.checkpoint_every=1")
    AsyncTrainer(cfg).run()
    first = _group_seeds(tmp_path / "trajectories.jsonl")
    # Killed after step 1's checkpoint: groups 2 and 3 are played again, on the same seeds.
    (tmp_path / "checkpoints" / "latest").write_text("step_000001")
    (tmp_path / "trajectories.jsonl").unlink()
    AsyncTrainer(cfg, resume=True).run()
    again = _group_seeds(tmp_path / "trajectories.jsonl")
    assert sorted(again) == [2, 3] and again == {g: first[g] for g in (2, 3)}

    # A rows file edited between the run and its resume: the same config, other tasks.
    sys.path.insert(0, str(user_dir))
    try:
        rows_run = build_config(
            {},
            [
                "env.id=user_envs:DoubleEnv",
                f"env.tasks={user_dir / 'rows.jsonl'}",
                f"out_dir={user_dir / 'run'}",
                "trainer.steps=1",
                "model.source=tiny",
                *SMALL,
            ],
        )
        resolve("user_envs:DoubleEnv")
        TrainingLoop(rows_run)  # records the task ids
        (user_dir / "run" / "checkpoints" / "step_000001").mkdir(parents=True)
        (user_dir / "run" / "checkpoints" / "step_000001" / "state.pt").write_bytes(b"")
        TrainingLoop(rows_run, resume=True)  # same rows: fine
        (user_dir / "rows.jsonl").write_text(json.dumps({"task_id": "other", "n": 9}) + "\n")
        with pytest.raises(ResumeConfigError, match="tasks changed since its checkpoint"):
            TrainingLoop(rows_run, resume=True)
    finally:
        sys.path.remove(str(user_dir))


# -- the user's rows ------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["env.tasks", "env.kwargs.tasks"])
def test_a_users_tool_env_trains_two_steps_on_a_rows_file(user_dir: Path, field: str) -> None:
    out = skyrl_train(
        user_dir,
        "-",
        "env.id=user_envs:DoubleEnv",
        f"{field}=rows.jsonl",
        "trainer.steps=2",
        "out_dir=run",
        "rollout.max_tokens=8",
        *SMALL,
        "logging.console=true",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "trained 2 steps" in out.stdout
    played = {t.task_id for t in read_trajectories(user_dir / "run" / "trajectories.jsonl")}
    assert played and played <= {r["task_id"] for r in ROWS}


@pytest.mark.parametrize(
    ("rows", "args", "parts"),
    [
        (None, ("env.tasks=missing.jsonl",), ("env.tasks: dataset not found: missing.jsonl",)),
        ('{"task_id": "a", "n": 1}\n{oops\n', ("env.tasks=bad.jsonl",), ("env.tasks:", ":2:")),
        ('{"task_id": "a"}\n', ("env.tasks=bad.jsonl",), ("env.tasks:", "'n'")),
        ("", ("env.tasks=bad.jsonl",), ("env.tasks:", "holds no task rows")),
        ('{"n": 1}\n', ("env.kwargs.tasks=bad.jsonl",), ("env.kwargs.tasks:", "task_id")),
        (
            '{"task_id": "a", "n": 1}\n',
            ("env.tasks=bad.jsonl", "env.kwargs.tasks=bad.jsonl"),
            ("env.tasks and env.kwargs.tasks are both set",),
        ),
    ],
)
def test_bad_rows_are_one_line_naming_the_field(
    user_dir: Path, rows: str | None, args: tuple[str, ...], parts: tuple[str, ...]
) -> None:
    if rows is not None:
        (user_dir / "bad.jsonl").write_text(rows)
    out = skyrl_train(user_dir, "-", "env.id=user_envs:DoubleEnv", *args, "trainer.steps=1")
    assert_one_line_error(out, *parts)


def test_input_errors_are_one_line_and_exit_2(user_dir: Path) -> None:
    # No env.id: it has no default.
    assert_one_line_error(skyrl_train(user_dir, "-", "trainer.steps=1"), "env.id: missing")
    # Rows for an env that takes none (the README's GuessEnv is played by seeds).
    out = skyrl_train(
        REPO, "-", "env.id=examples.guess_env:GuessEnv", f"env.tasks={user_dir}/rows.jsonl"
    )
    assert_one_line_error(out, "env.tasks:", "takes no task rows")
    # A task env given no rows cannot be played by seeds.
    out = skyrl_train(user_dir, "-", "env.id=user_envs:DoubleEnv")
    assert_one_line_error(out, "env.tasks:", "has none")
    # A constructor argument the env does not take.
    out = skyrl_train(user_dir, "-", "env.id=user_envs:DoubleEnv", "env.kwargs.colour=red")
    assert_one_line_error(out, "env.kwargs:", "colour")
    # Entry points that do not exist.
    assert_one_line_error(
        skyrl_train(user_dir, "-", "env.id=nosuch_mod:Env"), "env.id:", "nosuch_mod"
    )
    assert_one_line_error(skyrl_train(user_dir, "-", "env.id=user_envs:Nope"), "env.id:", "Nope")
    # A bad config value: one line too.
    out = skyrl_train(user_dir, "-", "env.id=lookup", "trainer.steps=0", "rollout.group_size=x")
    assert_one_line_error(out, "trainer.steps", "rollout.group_size")


def test_an_env_bug_keeps_its_traceback(user_dir: Path) -> None:
    out = skyrl_train(user_dir, "-", "env.id=user_envs:Broken")
    assert out.returncode == 1
    assert "Traceback" in out.stderr and "boom in the env's own code" in out.stderr


# -- warnings -----------------------------------------------------------------------------


def test_most_prompt_tokens_unknown_to_the_tokenizer_is_a_warning(tmp_path: Path) -> None:
    out = skyrl_train(
        REPO,
        "-",
        "env.id=examples.guess_env:GuessEnv",
        "model.source=lookup-tiny",
        "model.pretrain_steps=0",
        "trainer.steps=1",
        f"out_dir={tmp_path}",
        *SMALL,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("unknown to the tokenizer of model.source=lookup-tiny") == 1


def test_unknown_tokens_counts_only_what_the_tokenizer_cannot_read() -> None:
    from skyrl_sdk.trainer.models import lookup_tokenizer

    words = lookup_tokenizer()
    assert unknown_tokens(words, [{"role": "user", "content": "find c"}]) == (0, 2)
    assert unknown_tokens(words, [{"role": "user", "content": "Guess my number c"}]) == (3, 4)

    class ByteLevel:
        unk_token_id = None

    assert unknown_tokens(ByteLevel(), [{"role": "user", "content": "anything"}]) == (0, 0)


@pytest.mark.parametrize("reward", [0.0, 1.0])
def test_a_step_without_reward_variance_says_no_learning_signal_once(
    tmp_path: Path, reward: float
) -> None:
    cfg = build_config(
        {"env": {"id": "test-constant", "kwargs": {"reward": reward}, "max_turns": 1}},
        [f"out_dir={tmp_path}", "trainer.steps=3", "rollout.max_tokens=2", *SMALL],
    )
    console = Console(record=True, width=300)
    result = AsyncTrainer(cfg, console=console).run()
    text = console.export_text()
    assert text.count("no learning signal") == 1
    assert f"in all 2 groups every episode got the same reward (2 all {reward:g})" in text
    assert [m["groups/no_variance"] for m in result.history] == [2, 2, 2]


def test_flat_groups_names_each_group_without_variance() -> None:
    from skyrl_sdk.trainer.batch import Group

    class T:
        def __init__(self, reward: float):
            self.reward = reward

    groups = [
        Group(0, "a", 0, (T(1.0), T(1.0))),  # type: ignore[arg-type]
        Group(1, "b", 0, (T(0.0), T(1.0))),  # type: ignore[arg-type]
        Group(2, "c", 0, (T(0.0), T(0.0))),  # type: ignore[arg-type]
    ]
    assert flat_groups(groups) == [1.0, 0.0]


# -- defaults -------------------------------------------------------------------------------


def test_defaults_are_a_byte_level_model_and_no_env() -> None:
    cfg = build_config({})
    assert cfg.model.source is ModelSource.TINY
    assert cfg.env.id is None and cfg.env.tasks is None
    assert cfg.heldout.seed_offset == 1_000_000
    with pytest.raises(ConfigError, match=r"env\.id: missing"):
        TrainingLoop(cfg)


def test_parquet_rows_and_a_heldout_rows_file_are_read(user_dir: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow

    pq.write_table(pyarrow.Table.from_pylist(ROWS), user_dir / "rows.parquet")
    held = [{"task_id": f"h{i}", "n": 10 + i} for i in range(2)]
    (user_dir / "held.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held))
    sys.path.insert(0, str(user_dir))
    try:
        resolve("user_envs:DoubleEnv")
        cfg = build_config(
            {"heldout": {"env_kwargs": {"tasks": str(user_dir / "held.jsonl")}, "episodes": 3}},
            [
                "env.id=user_envs:DoubleEnv",
                f"env.tasks={user_dir / 'rows.parquet'}",
                f"out_dir={user_dir / 'run'}",
            ],
        )
        loop = TrainingLoop(cfg)
    finally:
        sys.path.remove(str(user_dir))
    assert loop.tasks == ROWS and loop.seeds is None
    assert loop.env_kwargs["tasks"] == ROWS  # every env of the run gets the rows, not a path
    assert [t["task_id"] for t in loop.heldout_tasks or []] == ["h0", "h1", "h0"]
