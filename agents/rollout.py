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
message naming the bad key; that turn is not recorded. `run_episodes` runs many rollouts
concurrently on one event loop.
"""

from __future__ import annotations

import asyncio
import enum
import math
import numbers
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from skyrl_gym.step_info import StepInfo, StepInfoError
from skyrl_sdk.agents.chat import ChatRenderer, RenderedPrompt, TemplateError
from skyrl_sdk.agents.policy import Completion, GenerationContext, Policy, SamplingParams
from skyrl_sdk.agents.trajectory import (
    Segment,
    SegmentStart,
    StopReason,
    Trajectory,
    TrajectoryWriter,
    Turn,
)
from skyrl_sdk.tools.messages import Message, is_message


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


@dataclass
class _Episode:
    """Mutable state of one running episode; frozen into a `Trajectory` at the end."""

    renderer: ChatRenderer | None
    prompt: RenderedPrompt | None = None
    ids: list[int] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    opening: tuple[Message, ...] = ()
    history: list[Message] = field(default_factory=list)
    success: bool | None = None

    def start(self, messages: Sequence[Message]) -> None:
        self.opening = tuple(messages)
        self.history = list(messages)
        if self.renderer is not None:
            self.prompt = self.renderer.prompt(messages)
            self.ids = list(self.prompt.token_ids)
            self.segments.append(Segment(self.prompt.token_ids, self.opening, 0))

    def fits(self, max_context: int | None, max_tokens: int) -> bool:
        return max_context is None or len(self.ids) + max_tokens <= max_context

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
                self.ids = list(ids)
                self.segments.append(
                    Segment(ids, tuple(kept), len(turns), SegmentStart.CONTEXT_COMPACTED)
                )
                return True
        return False


async def rollout(
    env: Any,
    policy: Policy,
    task: dict[str, Any],
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
    sampling = _episode_sampling(
        sampling or _DEFAULT_SAMPLING,
        limits.max_tokens,
        renderer.stop_token_ids if renderer is not None else (),
    )
    task_id = str(task.get("task_id", ""))
    episode_id = episode_id or task_id
    state = _Episode(renderer)
    started_at, t0 = time.time(), time.perf_counter()
    stop, error = StopReason.MAX_TURNS, None
    try:
        if limits.timeout is None:
            await _play(env, policy, task, state, limits, sampling, episode_id)
        else:
            async with asyncio.timeout(limits.timeout):
                await _play(env, policy, task, state, limits, sampling, episode_id)
    except _EpisodeEnd as end:
        stop, error = end.reason, end.message
    except TimeoutError:
        stop, error = StopReason.TIMEOUT, f"episode exceeded {limits.timeout} s"
    reward = sum(t.reward for t in state.turns)
    return Trajectory(
        episode_id=episode_id,
        task_id=task_id,
        env_id=env_id,
        policy=policy.name,
        stop_reason=stop,
        turns=tuple(state.turns),
        segments=tuple(state.segments),
        prompt_messages=state.opening,
        reward=reward,
        success=state.success if state.success is not None else reward > 0,
        started_at=started_at,
        duration_s=time.perf_counter() - t0,
        error=error,
    )


_DEFAULT_SAMPLING = SamplingParams()


_SAMPLINGS: dict[tuple[int, int, int], tuple[SamplingParams, tuple[int, ...], SamplingParams]] = {}


def _episode_sampling(
    sampling: SamplingParams, max_tokens: int, stop_token_ids: tuple[int, ...]
) -> SamplingParams:
    """The episode's sampling: `max_tokens` from the limits, the renderer's stop tokens
    added. Cached by identity (the same few objects recur for every episode of a run)."""
    key = (id(sampling), max_tokens, id(stop_token_ids))
    cached = _SAMPLINGS.get(key)
    if cached is not None and cached[0] is sampling and cached[1] is stop_token_ids:
        return cached[2]
    result = replace(sampling, max_tokens=max_tokens).with_stop_tokens(stop_token_ids)
    if len(_SAMPLINGS) >= 64:
        _SAMPLINGS.clear()
    _SAMPLINGS[key] = (sampling, stop_token_ids, result)  # holds both: ids are not reused
    return result


async def _play(
    env: Any,
    policy: Policy,
    task: dict[str, Any],
    state: _Episode,
    limits: RolloutLimits,
    sampling: SamplingParams,
    episode_id: str,
) -> None:
    """The loop body; ends by raising `_EpisodeEnd` (or returning after `max_turns`)."""
    try:
        messages, _ = await env.areset(options={"task": task})
    except Exception as e:
        raise _EpisodeEnd(StopReason.ENV_ERROR, f"reset: {type(e).__name__}: {e}") from e
    try:
        state.start(messages)
    except TemplateError as e:  # the renderer belongs to the policy's side
        raise _EpisodeEnd(StopReason.POLICY_ERROR, f"render: {e}") from e
    consecutive_parse_errors = 0
    for index in range(limits.max_turns):
        # 1. Make room for the turn, or stop.
        if not state.fits(limits.max_context_tokens, limits.max_tokens):
            assert limits.max_context_tokens is not None
            if limits.context_policy is ContextPolicy.STOP or not state.compact(
                limits.max_context_tokens, limits.max_tokens
            ):
                raise _EpisodeEnd(
                    StopReason.CONTEXT_OVERFLOW,
                    f"{len(state.ids)} prompt tokens + {limits.max_tokens} exceed the context "
                    f"of {limits.max_context_tokens}",
                )
        # 2. Sample a turn from the exact ids so far.
        context = GenerationContext(
            episode_id, str(task.get("task_id", "")), index, tuple(state.history)
        )
        t_llm = time.perf_counter()
        try:
            completion = await policy.generate(tuple(state.ids), sampling, context=context)
        except Exception as e:  # recorded in the trajectory, never silently dropped
            raise _EpisodeEnd(StopReason.POLICY_ERROR, f"{type(e).__name__}: {e}") from e
        llm_s = time.perf_counter() - t_llm
        # 3. Let the env act on the text of those ids.
        t_env = time.perf_counter()
        try:
            observation, reward, terminated, truncated, info = await env.astep(completion.text)
        except Exception as e:
            raise _EpisodeEnd(StopReason.ENV_ERROR, f"step: {type(e).__name__}: {e}") from e
        env_s = time.perf_counter() - t_env
        # 4. Read the step protocol; a malformed step ends the episode as an env error.
        step, terminated, truncated = _read_step(observation, reward, terminated, truncated, info)
        # 5. Append: sampled ids as they are, then the template's delta for the observation
        #    (only when another turn follows; the last turn ends at the sampled ids).
        delta: tuple[int, ...] = ()
        if (
            state.renderer is not None
            and not (terminated or truncated)
            and index + 1 < limits.max_turns
        ):
            try:
                delta = state.renderer.turn_delta(state.prompt, completion.token_ids, observation)
            except Exception as e:  # TemplateError or a template that cannot render these
                raise _EpisodeEnd(StopReason.POLICY_ERROR, f"render: {e}") from e
        state.turns.append(
            _make_turn(
                index,
                len(state.segments) - 1,
                completion,
                observation,
                delta,
                float(reward),
                step,
                llm_s,
                env_s,
            )
        )
        state.ids.extend(completion.token_ids)
        state.ids.extend(delta)
        state.history.append({"role": "assistant", "content": completion.text})
        state.history.extend(observation)
        if step.correct is not None:
            state.success = step.correct
        # 6. Decide whether the episode goes on.
        if terminated:
            raise _EpisodeEnd(StopReason.DONE)
        if truncated:
            raise _EpisodeEnd(StopReason.MAX_TURNS)
        if state.turns[-1].parse_error is not None:
            consecutive_parse_errors += 1
            if (
                limits.max_parse_errors is not None
                and consecutive_parse_errors >= limits.max_parse_errors
            ):
                raise _EpisodeEnd(
                    StopReason.PARSE_ERROR,
                    f"{consecutive_parse_errors} unparseable replies in a row",
                )
        else:
            consecutive_parse_errors = 0


def _read_step(
    observation: object, reward: object, terminated: object, truncated: object, info: object
) -> tuple[StepInfo, bool, bool]:
    """The step's typed info and end flags, after checking the rest of the 5-tuple;
    `_EpisodeEnd` with `ENV_ERROR` and a message naming what is wrong when the env broke
    the protocol."""
    if (
        type(terminated) is bool
        and type(truncated) is bool
        and type(reward) is float
        and math.isfinite(reward)
        and type(observation) is list
        and all(map(is_message, observation))
    ):  # the common, well-typed step
        try:
            return StepInfo.read(info), terminated, truncated
        except StepInfoError as e:
            raise _EpisodeEnd(StopReason.ENV_ERROR, f"step: malformed result: {e}") from None
    problem = None
    flags = []
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        try:
            flags.append(bool(flag))
        except Exception:  # e.g. a numpy array of several values
            problem = f"{name} must be a bool, got {type(flag).__name__} {flag!r:.40}"
    if problem is not None:
        pass
    elif not isinstance(observation, list | tuple):
        problem = f"observation must be a list of messages, got {type(observation).__name__}"
    elif (
        bad := next((i for i, m in enumerate(observation) if not is_message(m)), None)
    ) is not None:
        problem = f"observation message {bad} is not a chat message: {observation[bad]!r:.120}"
    elif (type(reward) is not float and not isinstance(reward, numbers.Real)) or not math.isfinite(
        reward  # type: ignore[arg-type]
    ):
        problem = f"reward must be a finite number, got {type(reward).__name__} {reward!r:.40}"
    else:
        try:
            return StepInfo.read(info), flags[0], flags[1]
        except StepInfoError as e:
            problem = str(e)
    raise _EpisodeEnd(StopReason.ENV_ERROR, f"step: malformed result: {problem}")


def _make_turn(
    index: int,
    segment: int,
    completion: Completion,
    observation: Sequence[Message],
    delta: tuple[int, ...],
    reward: float,
    step: StepInfo,
    llm_s: float,
    env_s: float,
) -> Turn:
    return Turn(
        index=index,
        segment=segment,
        action=completion.text,
        token_ids=completion.token_ids,
        logprobs=completion.logprobs,
        policy_versions=completion.versions(),
        finish_reason=completion.finish_reason,
        observation=tuple(observation),
        observation_ids=delta,
        reward=float(reward),
        tool_calls=step.tool_calls,
        parse_error=step.parse_error,
        llm_s=llm_s,
        env_s=env_s,
        text_only=completion.text_only,
    )


# -- many episodes ------------------------------------------------------------------------

EnvFactory = Callable[[], Any]
"""Builds a fresh env for one episode (e.g. `lambda: skyrl_gym.make("math")`)."""


async def run_episodes(
    make_env: EnvFactory,
    policy: Policy,
    episodes: Sequence[tuple[str, dict[str, Any]]],
    *,
    concurrency: int = 8,
    limits: RolloutLimits | None = None,
    sampling: SamplingParams | None = None,
    env_id: str = "",
    writer: TrajectoryWriter | None = None,
    on_done: Callable[[Trajectory], None] | None = None,
) -> list[Trajectory]:
    """Run `(episode_id, task)` episodes, at most `concurrency` at once, on this event loop.

    Each episode gets a fresh env, closed afterwards even on errors. Each trajectory is
    appended to `writer` as soon as it finishes, so a killed run loses only running episodes.
    Results come back in input order.
    """
    limits = limits or RolloutLimits()
    gate = asyncio.Semaphore(max(1, concurrency))
    results: list[Trajectory | None] = [None] * len(episodes)

    async def one(i: int, episode_id: str, task: dict[str, Any]) -> None:
        async with gate:
            try:
                env = make_env()
            except Exception as e:
                trajectory = _failed(
                    episode_id, task, env_id, policy, f"make: {type(e).__name__}: {e}"
                )
            else:
                try:
                    trajectory = await rollout(
                        env,
                        policy,
                        task,
                        limits=limits,
                        sampling=sampling,
                        episode_id=episode_id,
                        env_id=env_id,
                    )
                finally:
                    await _close(env)
            results[i] = trajectory
            if writer is not None:
                writer.write(trajectory)
            if on_done is not None:
                on_done(trajectory)

    await asyncio.gather(*(one(i, eid, task) for i, (eid, task) in enumerate(episodes)))
    return [r for r in results if r is not None]


async def _close(env: Any) -> None:
    try:
        result: Awaitable[None] | None = env.close()
        if asyncio.iscoroutine(result):
            await result
    except Exception:  # a failing close must not lose the finished trajectory
        pass


def _failed(
    episode_id: str, task: dict[str, Any], env_id: str, policy: Policy, error: str
) -> Trajectory:
    return Trajectory(
        episode_id=episode_id,
        task_id=str(task.get("task_id", "")),
        env_id=env_id,
        policy=policy.name,
        stop_reason=StopReason.ENV_ERROR,
        turns=(),
        segments=(),
        prompt_messages=(),
        reward=0.0,
        success=False,
        started_at=time.time(),
        error=error,
    )
