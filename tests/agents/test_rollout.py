"""The agent loop: stop reasons, context policy and segments, concurrency, JSONL."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest

import skyrl_gym
from skyrl_gym.core import TaskEnv
from skyrl_gym.envs.math.env import bundled_tasks
from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.policy import SamplingParams
from skyrl_sdk.agents.rollout import ContextPolicy, RolloutLimits, rollout, run_episodes
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.agents.trajectory import (
    SegmentStart,
    StopReason,
    Trajectory,
    TrajectoryWriter,
    read_trajectories,
)

TASKS = bundled_tasks()


def oracle(task: dict) -> list[str]:
    return [f"<calculator>{task['expression']}</calculator>", f"<answer>{task['answer']}</answer>"]


def play(policy, task=TASKS[0], env=None, **kwargs) -> Trajectory:
    env = env or skyrl_gym.make("math")
    try:
        return asyncio.run(rollout(env, policy, task, **kwargs))
    finally:
        env.close()


def test_done_with_reward_and_per_turn_records(chatml_renderer: ChatRenderer) -> None:
    t = play(ScriptedPolicy(oracle(TASKS[0]), renderer=chatml_renderer))
    assert t.stop_reason is StopReason.DONE and t.success and t.reward == 1.0
    assert [turn.reward for turn in t.turns] == [0.0, 1.0]
    assert t.turns[0].tool_calls[0].name == "calculator"
    assert t.turns[0].observation[0]["content"].strip().endswith("</observation>")
    assert t.turns[1].observation_ids == ()  # nothing is appended after the last turn
    assert all(turn.llm_s >= 0 and turn.env_s >= 0 for turn in t.turns)
    assert t.trainable and t.turns[0].policy_versions == (0,) * len(t.turns[0].token_ids)


def test_max_turns_from_rollout_and_from_env(chatml_renderer: ChatRenderer) -> None:
    chatter = ScriptedPolicy(["<calculator>1 + 1</calculator>"] * 10, renderer=chatml_renderer)
    t = play(chatter, max_turns=3)
    assert t.stop_reason is StopReason.MAX_TURNS and len(t.turns) == 3
    t = play(chatter, env=skyrl_gym.make("math", max_turns=2), max_turns=8)
    assert t.stop_reason is StopReason.MAX_TURNS and len(t.turns) == 2


def test_parse_errors_are_observations_until_the_limit(chatml_renderer: ChatRenderer) -> None:
    babble = ScriptedPolicy(["I think it is big."] * 10, renderer=chatml_renderer)
    t = play(babble, env=skyrl_gym.make("math", max_turns=20), max_turns=8)
    assert t.stop_reason is StopReason.MAX_TURNS and t.parse_errors == 8
    assert "could not be parsed" in t.turns[0].observation[0]["content"]
    t = play(babble, limits=RolloutLimits(max_turns=8, max_parse_errors=3))
    assert t.stop_reason is StopReason.PARSE_ERROR and len(t.turns) == 3


def test_timeout_keeps_finished_turns(chatml_renderer: ChatRenderer) -> None:
    slow = ScriptedPolicy(oracle(TASKS[0]), renderer=chatml_renderer, delay_s=0.3)
    t = play(slow, timeout=0.45)
    assert t.stop_reason is StopReason.TIMEOUT and len(t.turns) == 1
    assert t.duration_s < 1.0 and "0.45" in (t.error or "")


class BrokenEnv(TaskEnv):
    """Fails on the second step."""

    inline_async = True

    def start(self, task):
        self.steps = 0
        return [{"role": "user", "content": "go"}]

    def step(self, action):
        self.steps += 1
        if self.steps == 2:
            raise RuntimeError("database went away")
        return [{"role": "user", "content": "more"}], 0.5, False, False, {}


def test_env_and_policy_errors_end_the_episode_without_raising(
    chatml_renderer: ChatRenderer,
) -> None:
    t = play(
        ScriptedPolicy(["a", "b", "c"], renderer=chatml_renderer),
        env=BrokenEnv(),
        task={"task_id": "x"},
    )
    assert t.stop_reason is StopReason.ENV_ERROR and "database went away" in (t.error or "")
    assert len(t.turns) == 1 and t.reward == 0.5 and t.stop_reason.is_error
    t = play(ScriptedPolicy(["<calculator>2</calculator>"], renderer=chatml_renderer))
    assert t.stop_reason is StopReason.POLICY_ERROR and "turn 1" in (t.error or "")
    assert len(t.turns) == 1


class MalformedOnSecondStep(TaskEnv):
    """A well-formed first step, then the given malformed 5-tuple."""

    inline_async = True

    def __init__(self, bad):
        super().__init__()
        self.bad = bad

    def start(self, task):
        self.steps = 0
        return [{"role": "user", "content": "go"}]

    def step(self, action):
        self.steps += 1
        if self.steps == 2:
            return self.bad
        ok = {"tool_calls": [{"name": "look", "arguments": {}}], "parse_error": None}
        return [{"role": "user", "content": "more"}], 0.5, False, False, ok


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (
            ([], 1.0, True, False, {"parse_error": {"kind": "made_up", "message": "?"}}),
            "info['parse_error']: unknown \"kind\" 'made_up'",
        ),
        (([], 0.0, False, False, {"tool_calls": "sql"}), "info['tool_calls']: must be a list"),
        (
            ([], 0.0, False, False, {"tool_calls": [{"arguments": {}}]}),
            "info['tool_calls[0]']: \"name\"",
        ),
        (([], 1.0, True, False, {"episode": {"correct": "no"}}), "info['episode.correct']"),
        (([], 1.0, True, False, {"truncated_by": 3}), "info['truncated_by']: unknown value 3"),
        (([], 1.0, True, False, None), "info must be a dict, got NoneType"),
        (([], float("nan"), True, False, {}), "reward must be a finite number"),
        (([], "1", True, False, {}), "reward must be a finite number, got str"),
        (("hi", 0.0, False, False, {}), "observation must be a list of messages, got str"),
        (([{"role": "narrator", "content": "x"}], 0.0, False, False, {}), "message 0 is not"),
        (([], 0.0, np.array([True, False]), False, {}), "terminated must be a bool, got ndarray"),
        (([], 0.0, False, False), "step: ValueError"),  # a 4-tuple
    ],
)
def test_malformed_step_results_end_the_episode_as_env_errors(
    chatml_renderer: ChatRenderer, bad, words
) -> None:
    """Whatever an env returns, rollout returns a trajectory (never raises), the turns before
    the bad step are kept, and the error names what was wrong."""
    t = play(
        ScriptedPolicy(["a", "b", "c"], renderer=chatml_renderer),
        env=MalformedOnSecondStep(bad),
        task={"task_id": "x"},
    )
    assert t.stop_reason is StopReason.ENV_ERROR and words in (t.error or ""), t.error
    assert len(t.turns) == 1 and t.turns[0].tool_calls[0].name == "look" and t.reward == 0.5


def test_numpy_flags_and_rewards_are_accepted(chatml_renderer: ChatRenderer) -> None:
    bad = ([], np.float32(1.0), np.bool_(True), np.bool_(False), {"episode": {"correct": True}})
    t = play(
        ScriptedPolicy(["a", "b"], renderer=chatml_renderer),
        env=MalformedOnSecondStep(bad),
        task={"task_id": "x"},
    )
    assert t.stop_reason is StopReason.DONE and t.reward == 1.5 and t.success is True


def test_context_overflow_stops(chatml_renderer: ChatRenderer) -> None:
    chatter = ScriptedPolicy(
        ["<calculator>12345 * 678</calculator>"] * 50, renderer=chatml_renderer
    )
    env = skyrl_gym.make("math", max_turns=100)
    prompt_len = len(
        chatml_renderer.prompt(
            skyrl_gym.make("math").reset(options={"task": TASKS[0]})[0]
        ).token_ids
    )
    limits = RolloutLimits(max_turns=50, max_tokens=32, max_context_tokens=prompt_len + 150)
    t = play(chatter, env=env, limits=limits)
    assert t.stop_reason is StopReason.CONTEXT_OVERFLOW
    [sample] = t.training_samples()
    assert (
        len(sample.input_ids) + 32
        > prompt_len + 150
        >= len(sample.input_ids) - len(t.turns[-1].observation_ids)
    )


def test_drop_oldest_starts_exact_new_segments(chatml_renderer: ChatRenderer) -> None:
    """Long horizon: old turns are dropped, each segment is still exactly what was sampled."""
    seen: list[tuple[int, ...]] = []

    class Recording(ScriptedPolicy):
        async def generate(self, prompt_token_ids, sampling, *, context=None):
            seen.append(tuple(prompt_token_ids))
            return await super().generate(prompt_token_ids, sampling, context=context)

    chatter = Recording(["<calculator>12345 * 678</calculator>"] * 40, renderer=chatml_renderer)
    env = skyrl_gym.make("math", max_turns=100)
    prompt_len = len(chatml_renderer.prompt(env.reset(options={"task": TASKS[0]})[0]).token_ids)
    limit = prompt_len + 200
    limits = RolloutLimits(
        max_turns=40,
        max_tokens=32,
        max_context_tokens=limit,
        context_policy=ContextPolicy.DROP_OLDEST,
    )
    t = play(chatter, env=env, limits=limits)
    assert t.stop_reason is StopReason.MAX_TURNS and len(t.turns) == 40
    assert len(t.segments) > 2
    assert all(s.start is SegmentStart.CONTEXT_COMPACTED for s in t.segments[1:])
    assert all(s.prompt_messages[:2] == t.prompt_messages for s in t.segments)
    samples = t.training_samples()
    for turn, prompt in zip(t.turns, seen, strict=True):
        sample = samples[turn.segment]
        assert len(prompt) + 32 <= limit
        assert sample.input_ids[: len(prompt)] == prompt
        assert sample.input_ids[len(prompt) : len(prompt) + len(turn.token_ids)] == turn.token_ids
    assert sum(sum(s.loss_mask) for s in samples) == t.num_generated_tokens


def test_many_episodes_run_concurrently_and_stream_to_jsonl(
    tmp_path, chatml_renderer: ChatRenderer
) -> None:
    script = {t["task_id"]: oracle(t) for t in TASKS}
    policy = ScriptedPolicy(script, renderer=chatml_renderer, delay_s=0.05)
    episodes = [(t["task_id"], t) for t in TASKS[:48]]
    out = tmp_path / "t.jsonl"
    finished: list[str] = []

    async def go():
        with TrajectoryWriter(out) as writer:
            return await run_episodes(
                lambda: skyrl_gym.make("math"),
                policy,
                episodes,
                concurrency=48,
                writer=writer,
                env_id="math",
                on_done=lambda tr: finished.append(tr.episode_id),
            )

    start = time.perf_counter()
    results = asyncio.run(go())
    elapsed = time.perf_counter() - start
    # 48 episodes x 2 turns x 50 ms would take 4.8 s one at a time.
    assert elapsed < 1.5
    assert [r.episode_id for r in results] == [e for e, _ in episodes]
    assert all(r.stop_reason is StopReason.DONE and r.success for r in results)
    on_disk = read_trajectories(out)
    assert (
        sorted(t.episode_id for t in on_disk) == sorted(finished) == sorted(e for e, _ in episodes)
    )
    assert (
        on_disk[0].training_samples()
        == next(r for r in results if r.episode_id == on_disk[0].episode_id).training_samples()
    )


def test_writer_trims_a_partial_line_left_by_a_kill(
    tmp_path, chatml_renderer: ChatRenderer
) -> None:
    t = play(ScriptedPolicy(oracle(TASKS[0]), renderer=chatml_renderer))
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        w.write(t)
    with path.open("a") as f:
        f.write(json.dumps(t.to_json())[:100])  # killed mid-line
    assert len(read_trajectories(path)) == 1
    with TrajectoryWriter(path) as w:
        w.write(t)
    assert len(read_trajectories(path)) == 2


def test_text_only_policy_records_text_but_is_not_trainable() -> None:
    t = play(ScriptedPolicy(oracle(TASKS[0])))
    assert t.stop_reason is StopReason.DONE and t.success
    assert t.text_only and not t.trainable and t.segments == ()
    with pytest.raises(ValueError, match="text-only"):
        t.training_samples()
    assert t.messages()[2] == {"role": "assistant", "content": oracle(TASKS[0])[0]}


def test_sampling_gets_the_templates_stop_tokens(chatml_renderer: ChatRenderer) -> None:
    seen: list[SamplingParams] = []

    class Spy(ScriptedPolicy):
        async def generate(self, prompt_token_ids, sampling, *, context=None):
            seen.append(sampling)
            return await super().generate(prompt_token_ids, sampling, context=context)

    play(
        Spy(oracle(TASKS[0]), renderer=chatml_renderer),
        max_tokens=77,
        sampling=SamplingParams(stop=("</calculator>",)),
    )
    assert seen[0].max_tokens == 77 and seen[0].stop == ("</calculator>",)
    assert chatml_renderer.end_of_turn_id in seen[0].stop_token_ids
