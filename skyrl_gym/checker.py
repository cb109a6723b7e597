"""`check_env`: one small function per invariant of the text-env contract.

Each `check_*` function takes a fresh env (or the same env again, when given an instance) and
raises `EnvCheckError` naming what broke. `run_checks` runs them all and reports each;
`check_env` raises on the first failure. The last check runs Gymnasium's own `check_env`.

A check may also warn (`EnvCheckWarning`) about something that is legal but likely a bug: an
env whose seeds change neither its opening, nor its attributes after reset, nor the result of
a probe action would play the same episode under every seed (`skyrl eval --num N` on an env
without tasks). A warning never fails a check; `check_env` re-issues it with `warnings.warn`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import numbers
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env as gymnasium_check_env

from skyrl_gym.step_info import StepInfo, StepInfoError
from skyrl_sdk.tools.messages import is_message

EnvSource = gym.Env | Callable[[], gym.Env]
CHECK_SEED = 1234
PROBE_ACTION = "hello"
SEED_PROBE_ACTIONS = (PROBE_ACTION, "50", "1", "yes", "A")
"""Fixed actions played under several seeds when the openings coincide: a seed that reaches
the env's state (GuessEnv's secret) changes the result of at least one of them."""
SEED_PROBES = 4
"""Seeds compared by `check_reset_seed_determinism`."""
OPENING_PROBES = 8
"""At most this many answers taken from the opening (`<answer>heads</answer>`) are probed too."""
PLAIN_DATA_LIMIT = 10_000
"""Items copied per env attribute or step-result field when comparing seeds; a bigger value
(a whole dataset) is left out of the comparison."""
_TAGGED = re.compile(r"<(\w{1,32})>([^<>]{1,64})</\1>")
"""A short tagged answer in an opening, as `<answer>heads</answer>`."""
_MISSING = object()
"""Stands for a key one snapshot lacks (no env value is identical to it)."""


class EnvCheckWarning(UserWarning):
    """Legal but suspicious behaviour (the check still passes)."""


class EnvCheckError(AssertionError):
    """An env breaks an invariant of the text-env contract."""

    def __init__(self, message: str, check: str = ""):
        super().__init__(f"{check}: {message}" if check else message)
        self.check = check
        self.message = message


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one invariant check."""

    name: str
    """The check function's name, e.g. `check_reset_seed_determinism`."""
    passed: bool
    """Whether the env satisfied it."""
    message: str
    """Why it failed (empty when it passed)."""
    duration_s: float
    """Wall time the check took."""
    warning: str = ""
    """What the check warned about (`EnvCheckWarning`), empty if nothing; never a failure."""


def _fail(message: str) -> None:
    raise EnvCheckError(message)


def _check_messages(messages: object, where: str) -> None:
    if not isinstance(messages, list):
        _fail(f"{where} must return a list of messages, got {type(messages).__name__}")
    for i, m in enumerate(messages):  # type: ignore[union-attr]
        if not is_message(m):
            _fail(
                f"{where} message {i} is not a chat message "
                "(a dict with role in system/user/assistant/tool and str content, all values str): "
                f"{m!r:.200}"
            )
    try:
        json.dumps(messages)
    except (TypeError, ValueError) as e:
        _fail(f"{where} messages are not JSON-serializable: {e}")


def _reset(env: gym.Env, seed: int | None = CHECK_SEED) -> tuple[Any, Any]:
    result = env.reset(seed=seed)
    if not isinstance(result, tuple) or len(result) != 2:
        _fail(f"reset() must return (messages, info), got {type(result).__name__}")
    return result


def _step(env: gym.Env, action: str) -> tuple[Any, ...]:
    result = env.step(action)
    if not isinstance(result, tuple) or len(result) != 5:
        _fail("step() must return the 5-tuple (messages, reward, terminated, truncated, info)")
    return result


# ---- the invariants -----------------------------------------------------------------------------


def check_step_before_reset(env: gym.Env) -> None:
    """Stepping an env that was never reset must raise, not return made-up data."""
    try:
        env.step(PROBE_ACTION)
    except Exception:
        return
    _fail("step() before reset() returned normally; it must raise (make() adds EpisodeGuard)")


def check_spaces(env: gym.Env) -> None:
    """Spaces exist; the action space accepts text, the observation space accepts messages."""
    if not isinstance(env.action_space, gym.Space) or not isinstance(
        env.observation_space, gym.Space
    ):
        _fail("action_space and observation_space must be gymnasium Spaces")
    if not env.action_space.contains(PROBE_ACTION):
        _fail(f"action_space {env.action_space} does not contain a plain string")
    if not env.observation_space.contains([{"role": "user", "content": "hi"}]):
        _fail(f"observation_space {env.observation_space} does not contain a list of messages")


def check_reset_return_type(env: gym.Env) -> None:
    """`reset` returns (non-empty list of well-formed messages, dict)."""
    messages, info = _reset(env)
    _check_messages(messages, "reset()")
    if not messages:
        _fail("reset() returned no messages: an episode must open with its task")
    if not isinstance(info, dict):
        _fail(f"reset() info must be a dict, got {type(info).__name__}")


class SeedReach(enum.Enum):
    """Where `check_reset_seed_determinism` saw different seeds lead to different episodes."""

    OPENING = "opening"
    """The opening messages differ."""
    ENV_STATE = "env state"
    """The env's plain-data attributes after reset differ (GuessEnv's `secret`, a coin side)."""
    STEP_RESULT = "step result"
    """Some probe action's first step (messages, reward, flags, info) differs."""
    NOWHERE = "nowhere"
    """No probe told the seeds apart: they seem not to reach the env (a warning)."""


def check_reset_seed_determinism(env: gym.Env) -> None:
    """The same seed gives the same opening messages, even after steps in between.

    Where different seeds give the same opening (an env whose state is drawn from the seed,
    like the README's GuessEnv, or tasks that share a prompt), the env's plain-data attributes
    after each reset are compared, then a few probe actions (fixed ones and the `<tag>...</tag>`
    answers its opening offers) are played under each seed. When all of it is identical, the
    seed seems not to reach the env, and the check warns (`EnvCheckWarning`) without failing.
    """
    first, _ = _reset(env)
    env.step(PROBE_ACTION)
    second, _ = _reset(env)
    if first != second:
        _fail("reset(seed=s) twice gave different messages")
    seeds = [CHECK_SEED + k for k in range(SEED_PROBES)]
    actions = (*SEED_PROBE_ACTIONS, *_opening_actions(first))
    if _seed_reach(env, seeds, first, actions) is SeedReach.NOWHERE:
        tasks = len(getattr(env.unwrapped, "tasks", ()))
        what = f"although the env has {tasks} tasks" if tasks > 1 else "(an env played by seeds)"
        warnings.warn(
            EnvCheckWarning(
                f"seeds {seeds[0]}..{seeds[-1]} gave the same opening, the same env attributes "
                f"and the same results for the actions {list(actions)} {what}: "
                "reset(seed=...) seems not to reach the env's state (seed it from "
                "self.np_random after super().reset(seed=seed)), so every seed would play the "
                "same episode. This may be a false positive: only attributes that are plain data "
                "and these actions were compared, so a seed that reaches other state, or shows "
                "only in what other actions return, goes unseen"
            ),
            stacklevel=2,
        )
    _reset(env)


def _seed_reach(
    env: gym.Env, seeds: list[int], opening: Any, actions: tuple[str, ...]
) -> SeedReach:
    """The first place where `seeds` lead to different episodes, `NOWHERE` if none."""
    played = (*seeds, seeds[0])  # seeds[0] again: what differs then is noise, not the seed
    states = []
    for seed in played:
        messages, _ = _reset(env, seed)
        if messages != opening:
            return SeedReach.OPENING
        states.append(_plain_attributes(env.unwrapped))
    # an attribute that only records the seed (`self.seed = seed`) differs but reaches nothing
    records = [
        k for k in states[0] if all(st.get(k) == sd for st, sd in zip(states, played, strict=True))
    ]
    states = [{k: v for k, v in st.items() if k not in records} for st in states]
    if _differs_by_seed(states[:-1], states[-1]):
        return SeedReach.ENV_STATE
    for action in actions:
        outcomes = []
        for seed in played:
            _reset(env, seed)
            messages, reward, terminated, truncated, info = _step(env, action)
            outcome = {"messages": messages, "reward": reward, "flags": (terminated, truncated)}
            if isinstance(info, dict):
                outcome.update({("info", k): v for k, v in info.items()})
            outcomes.append(_plain_dict(outcome))
        if _differs_by_seed(outcomes[:-1], outcomes[-1]):
            return SeedReach.STEP_RESULT
    return SeedReach.NOWHERE


def _differs_by_seed(snapshots: list[dict[Any, Any]], repeat: dict[Any, Any]) -> bool:
    """Whether a key's value differs between the snapshots (one per seed). Keys whose value
    changed when the first seed was replayed (`repeat`) are noise (counters, clocks): skipped."""
    base = snapshots[0]
    stable = [k for k, v in base.items() if k in repeat and repeat[k] == v]
    return any(s.get(k, _MISSING) != base[k] for k in stable for s in snapshots[1:])


def _opening_actions(opening: Any) -> tuple[str, ...]:
    """Answers the opening offers, as a coin flip's `<answer>heads</answer>`: each tagged span
    and its bare text, at most `OPENING_PROBES`, none of `SEED_PROBE_ACTIONS`."""
    found: dict[str, None] = {}
    for message in opening if isinstance(opening, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for match in _TAGGED.finditer(content if isinstance(content, str) else ""):
            found.setdefault(match.group(0))
            found.setdefault(match.group(2).strip())
    candidates = [a for a in found if a and a not in SEED_PROBE_ACTIONS]
    return tuple(candidates[:OPENING_PROBES])


class _NotPlain(Exception):
    """A value `_plain` does not copy: not plain data, or over `PLAIN_DATA_LIMIT` items."""


def _plain_attributes(env: gym.Env) -> dict[Any, Any]:
    """A copy of the env's plain-data attributes. Gymnasium's own seed bookkeeping
    (`_np_random*`) is left out: it differs by seed whether or not the seed reaches anything."""
    return _plain_dict({k: v for k, v in vars(env).items() if not k.startswith("_np_random")})


def _plain_dict(values: dict[Any, Any]) -> dict[Any, Any]:
    """`values` with each value copied as plain data; the ones that are not are dropped."""
    copied = {}
    for key, value in values.items():
        try:
            copied[key] = _plain(value, [PLAIN_DATA_LIMIT])
        except _NotPlain:
            continue
    return copied


def _plain(value: Any, budget: list[int]) -> Any:
    """A comparable copy of `value` made of str, numbers, None, bytes and containers of them
    (dataclasses by their fields); a copy, so that a later reset that mutates the original in
    place does not change it. Raises `_NotPlain` otherwise (objects compare by identity)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _NotPlain
    if value is None or isinstance(value, str | bytes | bool | numbers.Number):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and value.size <= budget[0]:
        budget[0] -= value.size
        return (value.dtype.str, value.shape, value.tolist())
    if isinstance(value, list | tuple):
        return tuple(_plain(v, budget) for v in value)
    if isinstance(value, dict):
        copied = {}
        for k, v in value.items():
            key = _plain(k, budget)
            try:
                hash(key)
            except TypeError:
                raise _NotPlain from None
            copied[key] = _plain(v, budget)
        return copied
    if isinstance(value, set | frozenset):
        try:
            return frozenset(_plain(v, budget) for v in value)
        except TypeError:
            raise _NotPlain from None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return (type(value).__qualname__, _plain(fields, budget))
    raise _NotPlain


def check_step_return_type(env: gym.Env) -> None:
    """`step` returns (messages, float reward, bool terminated, bool truncated, dict info)."""
    _reset(env)
    messages, reward, terminated, truncated, info = _step(env, PROBE_ACTION)
    _check_messages(messages, "step()")
    if type(reward) is not float:
        _fail(f"reward must be a Python float, got {type(reward).__name__} ({reward!r})")
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if type(flag) is not bool:
            _fail(f"{name} must be a Python bool, got {type(flag).__name__}")
    if not isinstance(info, dict):
        _fail(f"step() info must be a dict, got {type(info).__name__}")


def check_step_info(env: gym.Env) -> None:
    """Every step's `info` follows the step protocol (`skyrl_gym.step_info`): `tool_calls`,
    `parse_error`, `truncated_by` and `episode.correct` parse into a `StepInfo`. Plays the
    probe action until the episode ends (at most 16 steps)."""
    _reset(env)
    for turn in range(16):
        _, _, terminated, truncated, info = _step(env, PROBE_ACTION if turn else "")
        try:
            StepInfo.read(info)
        except StepInfoError as e:
            _fail(f"step {turn + 1}: {e} (see skyrl_gym.step_info for the protocol)")
        if terminated or truncated:
            return


def check_step_determinism(env: gym.Env) -> None:
    """The same seed and action give the same step result."""
    outcomes = []
    for _ in range(2):
        _reset(env)
        messages, reward, terminated, truncated, _ = _step(env, PROBE_ACTION)
        outcomes.append((messages, reward, terminated, truncated))
    if outcomes[0] != outcomes[1]:
        _fail("the same seed and action gave different step results")


def check_hostile_actions(env: gym.Env) -> None:
    """A 1 MB action and one with invalid UTF-8 get an answer (an observation), not a crash."""
    for label, action in (
        ("a 1 MB action", "x" * (1 << 20)),
        ("an action with invalid UTF-8", "bad \udcff\udcfe bytes <answer>\udc80</answer>"),
        ("an empty action", ""),
    ):
        _reset(env)
        started = time.perf_counter()
        try:
            messages, *_ = _step(env, action)
        except EnvCheckError:
            raise
        except Exception as e:
            _fail(f"{label} raised {type(e).__name__}: {e}")
        if time.perf_counter() - started > 10:
            _fail(f"{label} took over 10 s")
        _check_messages(messages, f"step() on {label}")


def check_async_matches_sync(env: gym.Env) -> None:
    """`areset`/`astep` exist and agree with `reset`/`step`."""
    if not hasattr(env, "areset") or not hasattr(env, "astep"):
        _fail("the env has no areset/astep (subclass TextEnv)")
    sync_reset = _reset(env)[0]
    sync_step = _step(env, PROBE_ACTION)[:4]

    async def run() -> tuple[Any, Any]:
        messages, _ = await env.areset(seed=CHECK_SEED)  # type: ignore[attr-defined]
        step = await env.astep(PROBE_ACTION)  # type: ignore[attr-defined]
        return messages, step[:4]

    async_reset, async_step = asyncio.run(run())
    if async_reset != sync_reset or async_step != sync_step:
        _fail("areset/astep gave different results from reset/step for the same seed and action")


def check_gymnasium(env: gym.Env) -> None:
    """Gymnasium's own `check_env` passes on the unwrapped env."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            gymnasium_check_env(env.unwrapped, skip_render_check=True, skip_close_check=True)
        except Exception as e:
            _fail(f"gymnasium.utils.env_checker.check_env failed: {type(e).__name__}: {e}")


def check_close_idempotent(env: gym.Env) -> None:
    """`close()` may be called twice."""
    env.close()
    try:
        env.close()
    except Exception as e:
        _fail(f"a second close() raised {type(e).__name__}: {e}")


CHECKS: tuple[Callable[[gym.Env], None], ...] = (
    check_step_before_reset,  # first: it needs an env that was never reset
    check_spaces,
    check_reset_return_type,
    check_reset_seed_determinism,
    check_step_return_type,
    check_step_info,
    check_step_determinism,
    check_hostile_actions,
    check_async_matches_sync,
    check_gymnasium,
    check_close_idempotent,  # last: it closes the env
)


def run_checks(env: EnvSource) -> list[CheckResult]:
    """Run every check; `env` is an env instance (never reset yet) or a zero-argument factory,
    which gives each check a fresh env."""
    factory: Callable[[], gym.Env] = (
        env if callable(env) and not isinstance(env, gym.Env) else (lambda: env)
    )  # type: ignore[assignment,return-value]
    results = []
    for check in CHECKS:
        started = time.perf_counter()
        instance = None
        try:
            instance = factory()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", EnvCheckWarning)
                check(instance)
            warned = []
            for w in caught:
                if issubclass(w.category, EnvCheckWarning):
                    warned.append(str(w.message))
                else:  # the env's own warnings are not ours to swallow
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            results.append(
                CheckResult(
                    check.__name__, True, "", time.perf_counter() - started, "; ".join(warned)
                )
            )
        except EnvCheckError as e:
            results.append(
                CheckResult(check.__name__, False, e.message, time.perf_counter() - started)
            )
        except Exception as e:
            message = f"raised {type(e).__name__}: {e}"
            results.append(
                CheckResult(check.__name__, False, message, time.perf_counter() - started)
            )
        finally:
            if instance is not None and instance is not env and check is not check_close_idempotent:
                instance.close()
    return results


def check_env(env: EnvSource) -> None:
    """Raise `EnvCheckError` listing every broken invariant; return None if the env passes.

    Warnings (`EnvCheckWarning`) are issued with `warnings.warn`, naming their check."""
    results = run_checks(env)
    for r in results:
        if r.warning:
            warnings.warn(EnvCheckWarning(f"{r.name}: {r.warning}"), stacklevel=2)
    failures = [r for r in results if not r.passed]
    if failures:
        first = failures[0]
        detail = "; ".join(f"{r.name}: {r.message}" for r in failures)
        raise EnvCheckError(detail if len(failures) > 1 else first.message, first.name)
