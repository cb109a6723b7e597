"""The agent loop: play one episode of a text env with a policy, token-first.

`rollout` is the whole loop, top to bottom:

    reset the env -> render the prompt once
    repeat:
        check the next turn fits the context (stop, or drop old turns into a new segment)
        policy.generate(exact ids so far)        -> sampled ids, logprobs, versions
        env.astep(text of those ids)             -> observation, reward, end flags
        append sampled ids, then the template's delta for the observation
    until the env ends the episode, a limit hits, or something fails

Failures never escape as exceptions: they end the episode with a `StopReason`, and the turns
played so far are kept. That includes an env that breaks the step protocol: a step whose
observation is not a list of messages, whose reward is not a finite number, or whose `info`
does not parse as a `skyrl_gym.step_info.StepInfo` (an unknown `parse_error` kind, a
`tool_calls` entry without a name, ...) ends the episode with `StopReason.ENV_ERROR` and a
message naming the bad key; that turn is not recorded.

`LoopAgent` is this loop as an `Agent` (`skyrl_sdk.agents.agent`), and `run_episodes` is the
one runner of many episodes: it plays `(episode_id, task)` rows with any `Agent` (this one, or
a command agent) concurrently on one event loop, each on a fresh env closed one way
(`close_env`).

What keeps the loop cheap lives beside it: the policy's view of the ids (`token_view`), the
prompts and sampling parameters remembered across episodes (`prompt_cache`), and the checked
read of a step (`step_check`).
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_gym.core import Messages, TextEnv
from skyrl_gym.tasks import TaskRow, reset_kwargs, task_seed
from skyrl_gym.wrappers import EpisodeGuard
from skyrl_sdk.agents.agent import Agent, PlayableEnv, start_close
from skyrl_sdk.agents.chat import ChatRenderer, RenderedPrompt, TemplateError
from skyrl_sdk.agents.policy import Completion, GenerationContext, Policy, SamplingParams
from skyrl_sdk.agents.prompt_cache import DEFAULT_SAMPLING, cached_prompt, episode_sampling
from skyrl_sdk.agents.step_check import MalformedStep, read_step
from skyrl_sdk.agents.token_view import TokenView
from skyrl_sdk.agents.trajectory import (
    Segment,
    SegmentStart,
    StopReason,
    Trajectory,
    TrajectoryWriter,
    Turn,
    new_segment,
    new_trajectory,
    sampled_turn,
)
from skyrl_sdk.fast_frozen import fast_constructor
from skyrl_sdk.tools.messages import Message


class ContextPolicy(enum.Enum):
    """What to do when the next turn would not fit the model's context."""

    STOP = "stop"
    """End the episode with `StopReason.CONTEXT_OVERFLOW`."""
    DROP_OLDEST = "drop_oldest"
    """Drop the oldest turns (keeping the opening messages), re-render, start a new segment."""


@dataclass(frozen=True)
class RolloutLimits:
    """Per-episode limits and the context policy."""

    max_turns: int = 8
    """Assistant turns before the episode stops with `max_turns`."""
    max_tokens: int = 256
    """Tokens the policy may generate per turn."""
    timeout: float | None = None
    """Wall-clock seconds for the whole episode (None: no limit)."""
    max_context_tokens: int | None = None
    """The model's context length; a turn needs prompt + `max_tokens` to fit."""
    context_policy: ContextPolicy = ContextPolicy.STOP
    """What to do when a turn would not fit."""
    max_parse_errors: int | None = None
    """Consecutive unparseable replies before stopping with `parse_error` (None: never)."""


class _EpisodeEnd(Exception):
    """Internal: ends the loop with a stop reason (and an error message)."""

    def __init__(self, reason: StopReason, message: str | None = None):
        super().__init__(message or reason.value)
        self.reason = reason
        self.message = message


class _Episode:
    """Mutable state of one running episode; frozen into a `Trajectory` at the end."""

    __slots__ = (
        "history",
        "opening",
        "prefix",
        "prompt",
        "renderer",
        "segments",
        "success",
        "tail",
        "turns",
    )

    def __init__(self, renderer: ChatRenderer | None):
        self.renderer = renderer
        self.prompt: RenderedPrompt | None = None
        self.prefix: tuple[int, ...] = ()
        """The current segment's prompt ids."""
        self.tail: list[int] = []
        """The ids appended after them; only ever appended to (`compact` starts anew)."""
        self.turns: list[Turn] = []
        self.segments: list[Segment] = []
        self.opening: tuple[Message, ...] = ()
        self.history: list[Message] = []
        self.success: bool | None = None

    def start(self, messages: Sequence[Message]) -> None:
        self.opening = tuple(messages)
        self.history = list(messages)
        if self.renderer is not None:
            self.prompt = cached_prompt(self.renderer, messages)
            self.prefix = self.prompt.token_ids
            self.segments.append(new_segment(self.prompt.token_ids, self.opening, 0))

    def num_ids(self) -> int:
        """How many ids the policy sees next."""
        return len(self.prefix) + len(self.tail)

    def compact(self, max_context: int, max_tokens: int) -> bool:
        """Drop the oldest turns until the rest fits; start a new segment. False if even
        the opening messages alone do not fit."""
        assert self.renderer is not None
        turns = self.turns
        for first in range(1, len(turns) + 1):
            kept: list[Message] = list(self.opening)
            for t in turns[first:]:
                kept.append({"role": "assistant", "content": t.action})
                kept.extend(t.observation)
            ids = self.renderer.encode(self.renderer.render(kept, add_generation_prompt=True))
            if len(ids) + max_tokens <= max_context:
                self.prefix, self.tail = ids, []
                self.segments.append(
                    Segment(ids, tuple(kept), len(turns), SegmentStart.CONTEXT_COMPACTED)
                )
                return True
        return False


async def rollout(
    env: PlayableEnv,
    policy: Policy,
    task: TaskRow,
    *,
    max_turns: int = 8,
    max_tokens: int = 256,
    timeout: float | None = None,
    limits: RolloutLimits | None = None,
    sampling: SamplingParams | None = None,
    episode_id: str | None = None,
    env_id: str = "",
) -> Trajectory:
    """Play one episode of `env` on `task` with `policy`; never raises for episode failures.

    `limits` (when given) overrides `max_turns`, `max_tokens` and `timeout`. The env is not
    closed here: whoever made it closes it.
    """
    limits = limits or RolloutLimits(max_turns=max_turns, max_tokens=max_tokens, timeout=timeout)
    renderer = policy.renderer
    sampling = episode_sampling(
        sampling or DEFAULT_SAMPLING,
        limits.max_tokens,
        renderer.stop_token_ids if renderer is not None else (),
    )
    task_id = str(task.get("task_id", ""))
    episode_id = episode_id or task_id
    state = _Episode(renderer)
    started_at, t0 = time.time(), _now()
    try:
        if limits.timeout is None:
            stop = await _play(env, policy, task, state, limits, sampling, episode_id, task_id)
        else:
            async with asyncio.timeout(limits.timeout):
                stop = await _play(env, policy, task, state, limits, sampling, episode_id, task_id)
        error = None
    except _EpisodeEnd as end:
        stop, error = end.reason, end.message
    except TimeoutError:
        stop, error = StopReason.TIMEOUT, f"episode exceeded {limits.timeout} s"
    reward = 0.0
    for turn in state.turns:
        reward += turn.reward
    return new_trajectory(
        episode_id,
        task_id,
        env_id,
        policy.name,
        stop,
        tuple(state.turns),
        tuple(state.segments),
        state.opening,
        reward,
        state.success if state.success is not None else reward > 0,
        started_at,
        _now() - t0,
        error,
        task_seed(task),
    )


_now = time.perf_counter
_new_context = fast_constructor(GenerationContext)


async def _play(
    env: PlayableEnv,
    policy: Policy,
    task: TaskRow,
    state: _Episode,
    limits: RolloutLimits,
    sampling: SamplingParams,
    episode_id: str,
    task_id: str,
) -> StopReason:
    """The loop body: how the episode ended, or `_EpisodeEnd` (failures, limits)."""
    inline = _steps_inline(env)
    # An inline reset runs on this thread anyway: no coroutine for it.
    _begin(state, _reset(env, task) if inline else await _areset(env, task))
    renderer, turns, history = state.renderer, state.turns, state.history
    max_turns = limits.max_turns
    parse_errors = 0  # consecutive unparseable replies
    for index in range(max_turns):
        # 1. Make room for the turn, or stop.
        if limits.max_context_tokens is not None:
            _make_room(state, limits)
        # 2. Sample a turn from the exact ids so far (a view: nothing is copied).
        prefix, tail = state.prefix, state.tail
        view = TokenView(prefix, tail, len(prefix) + len(tail))
        context = _new_context(episode_id, task_id, index, tuple(history))
        t_llm = _now()
        try:
            completion = await policy.generate(view, sampling, context=context)
        except Exception as e:  # recorded in the trajectory, never silently dropped
            raise _EpisodeEnd(StopReason.POLICY_ERROR, f"{type(e).__name__}: {e}") from e
        t_env = _now()
        # 3. Let the env act on the text of those ids.
        try:
            if inline:
                observation, reward, terminated, truncated, info = env.step(completion.text)  # type: ignore[attr-defined]
            else:
                observation, reward, terminated, truncated, info = await env.astep(completion.text)
        except Exception as e:
            raise _EpisodeEnd(StopReason.ENV_ERROR, f"step: {type(e).__name__}: {e}") from e
        env_s = _now() - t_env
        # 4. Read the step protocol; a malformed step ends the episode as an env error.
        try:
            step, terminated, truncated = read_step(
                observation, reward, terminated, truncated, info
            )
        except MalformedStep as e:
            raise _EpisodeEnd(StopReason.ENV_ERROR, f"step: malformed result: {e}") from None
        # 5. Append: sampled ids as they are, then the template's delta for the observation
        #    (only when another turn follows; the last turn ends at the sampled ids).
        goes_on = not (terminated or truncated) and index + 1 < max_turns
        delta = _delta(state, completion, observation) if goes_on and renderer is not None else ()
        turns.append(
            sampled_turn(
                index,
                len(state.segments) - 1,
                completion.text,
                completion,
                tuple(observation),
                delta,
                float(reward),  # type: ignore[arg-type]
                step.tool_calls,
                step.parse_error,
                t_env - t_llm,
                env_s,
            )
        )
        if step.correct is not None:
            state.success = step.correct
        # 6. Decide whether the episode goes on.
        if terminated:
            return StopReason.DONE
        if truncated:
            return StopReason.MAX_TURNS
        if goes_on:  # the ids and messages the next turn sees
            tail.extend(completion.token_ids)
            tail.extend(delta)
            history.append({"role": "assistant", "content": completion.text})
            history.extend(observation)
        parse_errors = 0 if step.parse_error is None else _parse_error(parse_errors, limits)
    return StopReason.MAX_TURNS


def _reset(env: PlayableEnv, task: TaskRow) -> Messages:
    """Reset the env on the task, calling its `reset` here (`_EpisodeEnd` on failure)."""
    try:
        # A seed row (`skyrl_gym.tasks.seed_task`) resets with its seed, any other row
        # is handed to the env as the task.
        messages, _ = env.reset(**reset_kwargs(task))  # type: ignore[attr-defined]
    except Exception as e:
        raise _EpisodeEnd(StopReason.ENV_ERROR, f"reset: {type(e).__name__}: {e}") from e
    return messages


async def _areset(env: PlayableEnv, task: TaskRow) -> Messages:
    """`_reset` through the env's `areset`."""
    try:
        messages, _ = await env.areset(**reset_kwargs(task))
    except Exception as e:
        raise _EpisodeEnd(StopReason.ENV_ERROR, f"reset: {type(e).__name__}: {e}") from e
    return messages


def _begin(state: _Episode, messages: Messages) -> None:
    """Render the opening prompt (`_EpisodeEnd` when the template cannot)."""
    try:
        state.start(messages)
    except TemplateError as e:  # the renderer belongs to the policy's side
        raise _EpisodeEnd(StopReason.POLICY_ERROR, f"render: {e}") from e


def _parse_error(before: int, limits: RolloutLimits) -> int:
    """Count one more unparseable reply in a row; `_EpisodeEnd` with `PARSE_ERROR` when that
    reaches `limits.max_parse_errors`."""
    count = before + 1
    if limits.max_parse_errors is not None and count >= limits.max_parse_errors:
        raise _EpisodeEnd(StopReason.PARSE_ERROR, f"{count} unparseable replies in a row")
    return count


def _make_room(state: _Episode, limits: RolloutLimits) -> None:
    """Make sure the next turn fits the context: drop old turns into a new segment when the
    context policy allows, else `_EpisodeEnd` with `CONTEXT_OVERFLOW`."""
    max_context, max_tokens = limits.max_context_tokens, limits.max_tokens
    if (
        max_context is not None
        and state.num_ids() + max_tokens > max_context
        and (
            limits.context_policy is ContextPolicy.STOP
            or not state.compact(max_context, max_tokens)
        )
    ):
        raise _EpisodeEnd(
            StopReason.CONTEXT_OVERFLOW,
            f"{state.num_ids()} prompt tokens + {max_tokens} exceed the context of {max_context}",
        )


def _delta(
    state: _Episode, completion: Completion, observation: Sequence[Message]
) -> tuple[int, ...]:
    """The chat template's ids after the sampled ids for the observation (`_EpisodeEnd`
    with `POLICY_ERROR` when the template cannot render them)."""
    try:
        return state.renderer.turn_delta(state.prompt, completion.token_ids, observation)  # type: ignore[arg-type, union-attr]
    except Exception as e:  # TemplateError or a template that cannot render these
        raise _EpisodeEnd(StopReason.POLICY_ERROR, f"render: {e}") from e


def _steps_inline(env: PlayableEnv) -> bool:
    """True when `env.areset`/`env.astep` would only call `reset`/`step` on this thread: a
    plain `EpisodeGuard` (what `make` returns) around a `TextEnv` that declares its steps
    cheap (`inline_async`) and keeps the default async methods. The loop then calls the
    sync methods itself: the same code runs, without two coroutines per call."""
    if type(env) is not EpisodeGuard:
        return False
    inner = env.env
    return (
        isinstance(inner, TextEnv)
        and inner.inline_async is True
        and type(inner).astep is TextEnv.astep
        and type(inner).areset is TextEnv.areset
    )


# -- the loop agent and many episodes -----------------------------------------------------

EnvFactory = Callable[[], PlayableEnv]
"""Builds a fresh env for one episode (e.g. `lambda: skyrl_gym.make("math")`)."""


@dataclass(frozen=True)
class LoopAgent:
    """The loop agent (an `Agent`): `policy` plays each episode through our chat loop,
    `rollout`, with these limits and sampling."""

    policy: Policy
    """What samples every turn."""
    limits: RolloutLimits = RolloutLimits()
    """Per-episode limits and the context policy."""
    sampling: SamplingParams | None = None
    """Sampling parameters (None: the defaults); `limits.max_tokens` caps each turn."""

    @property
    def name(self) -> str:
        """The policy's name (each trajectory's `policy`)."""
        return self.policy.name

    def play(
        self,
        env: PlayableEnv,
        task: TaskRow,
        *,
        episode_id: str | None = None,
        env_id: str = "",
    ) -> Coroutine[Any, Any, Trajectory]:
        """`rollout(env, policy, task, ...)`; never raises for episode failures. (Awaited
        like an `async def`: it returns `rollout`'s coroutine itself, no frame per episode.)"""
        return rollout(
            env,
            self.policy,
            task,
            limits=self.limits,
            sampling=self.sampling,
            episode_id=episode_id,
            env_id=env_id,
        )


async def play_episode(
    make_env: EnvFactory, agent: Agent, task: TaskRow, *, episode_id: str, env_id: str = ""
) -> Trajectory:
    """One episode of `agent` on a fresh env from `make_env`, closed afterwards even on
    errors (`close_env`, through `start_close`); an env that cannot be built is an `ENV_ERROR` trajectory."""
    try:
        env = make_env()
    except Exception as e:
        return _failed(episode_id, task, env_id, agent.name, f"make: {type(e).__name__}: {e}")
    try:
        return await agent.play(env, task, episode_id=episode_id, env_id=env_id)
    finally:
        rest = start_close(env)  # `close_env`; a cheap env closes right here, no coroutine
        if rest is not None:
            await rest


async def run_episodes(
    make_env: EnvFactory,
    agent: Agent | Policy,
    episodes: Sequence[tuple[str, TaskRow]],
    *,
    concurrency: int = 8,
    limits: RolloutLimits | None = None,
    sampling: SamplingParams | None = None,
    env_id: str = "",
    writer: TrajectoryWriter | None = None,
    on_done: Callable[[Trajectory], None] | None = None,
) -> list[Trajectory]:
    """Run `(episode_id, task)` episodes with `agent`, at most `concurrency` at once, on this
    event loop: the one runner of many episodes (eval, held-out evaluation, benchmarks).

    `agent` is an `Agent` (`LoopAgent`, `CommandAgentRunner`), or a `Policy`, which plays as
    `LoopAgent(policy, limits, sampling)`; `limits` and `sampling` are only for the latter
    (a `TypeError` with an `Agent`: they would be silently unused). Each episode gets a fresh
    env, closed afterwards even on errors (`play_episode`). Each trajectory is appended to
    `writer` as soon as it finishes, so a killed run loses only running episodes. Results
    come back in input order. A failing `writer` or `on_done` ends the run at once.
    """
    player = _as_agent(agent, limits, sampling)
    n = len(episodes)
    if n == 0:
        return []
    results: list[Trajectory | None] = [None] * n

    def done(i: int, trajectory: Trajectory) -> None:
        results[i] = trajectory
        if writer is not None:
            writer.write(trajectory)
        if on_done is not None:
            on_done(trajectory)

    await _worker_pool(make_env, player, episodes, concurrency, env_id, done)
    return [r for r in results if r is not None]


def _as_agent(
    agent: Agent | Policy, limits: RolloutLimits | None, sampling: SamplingParams | None
) -> Agent:
    if isinstance(agent, Agent):
        if limits is not None or sampling is not None:
            raise TypeError(
                "run_episodes: limits and sampling are the loop agent's; give them to "
                "LoopAgent(policy, limits, sampling), or pass the policy itself"
            )
        return agent
    return LoopAgent(agent, limits or RolloutLimits(), sampling)


async def _worker_pool(
    make_env: EnvFactory,
    agent: Agent,
    episodes: Sequence[tuple[str, TaskRow]],
    concurrency: int,
    env_id: str,
    done: Callable[[int, Trajectory], None],
) -> None:
    """Play every episode (`play_episode`), at most `concurrency` at once, started in input
    order; `done(i, trajectory)` as each one finishes.

    Each worker plays one episode after another: no task or semaphore per episode. The first
    `done` that raises ends the run at once (the other workers are cancelled), like `gather`.
    """
    n = len(episodes)
    limit = min(max(1, concurrency), n)
    next_index = 0
    workers: list[asyncio.Task[None]] = []
    loop = asyncio.get_running_loop()
    stopped = False
    finished: asyncio.Future[None] = loop.create_future()
    running = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < n and not stopped:
            i = next_index
            next_index += 1
            episode_id, task = episodes[i]
            done(i, await play_episode(make_env, agent, task, episode_id=episode_id, env_id=env_id))

    def spawn() -> None:
        # One more worker per pass of the event loop, up to `concurrency`, while episodes
        # remain: the others are then waiting on something (the env, the policy). Episodes
        # that never wait (an instant env and policy) all run in the first worker.
        nonlocal running
        if stopped or len(workers) >= limit or next_index >= n:
            return
        running += 1
        task = loop.create_task(worker())
        task.add_done_callback(worker_done)
        workers.append(task)
        loop.call_soon(spawn)

    def worker_done(task: asyncio.Task[None]) -> None:
        nonlocal running
        running -= 1
        error = None if task.cancelled() else task.exception()
        if finished.done():
            return
        if error is not None:
            finished.set_exception(error)
        elif running == 0:  # workers end only when no episode is left (or on a failure)
            finished.set_result(None)

    spawn()
    try:
        await finished
    except BaseException:  # a failing writer or on_done, or we were cancelled
        stopped = True
        for w in workers:
            w.cancel()
        raise


def _failed(episode_id: str, task: TaskRow, env_id: str, agent: str, error: str) -> Trajectory:
    return Trajectory(
        episode_id=episode_id,
        task_id=str(task.get("task_id", "")),
        env_id=env_id,
        policy=agent,
        stop_reason=StopReason.ENV_ERROR,
        turns=(),
        segments=(),
        prompt_messages=(),
        reward=0.0,
        success=False,
        started_at=time.time(),
        error=error,
        seed=task_seed(task),
    )
