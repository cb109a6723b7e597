"""`check_env`: one small function per invariant of the text-env contract.

Each `check_*` function takes a fresh env (or the same env again, when given an instance) and
raises `EnvCheckError` naming what broke. `run_checks` runs them all and reports each;
`check_env` raises on the first failure. The last check runs Gymnasium's own `check_env`.

A check may also warn (`EnvCheckWarning`) about something that is legal but likely a bug: an
env whose seeds change neither its opening nor the result of a fixed action would play the
same episode under every seed (`skyrl eval --num N` on an env without tasks). A warning never
fails a check; `check_env` re-issues it with `warnings.warn`.
"""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
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


def check_reset_seed_determinism(env: gym.Env) -> None:
    """The same seed gives the same opening messages, even after steps in between.

    Where different seeds give the same opening (an env whose state is drawn from the seed,
    like the README's GuessEnv, or tasks that share a prompt), a few fixed actions are played
    under each seed: when every result is identical too, the seed seems not to reach the env,
    and the check warns (`EnvCheckWarning`) without failing.
    """
    first, _ = _reset(env)
    env.step(PROBE_ACTION)
    second, _ = _reset(env)
    if first != second:
        _fail("reset(seed=s) twice gave different messages")
    seeds = [CHECK_SEED + k for k in range(SEED_PROBES)]
    if all(_reset(env, s)[0] == first for s in seeds[1:]) and not _seeds_change_steps(env, seeds):
        tasks = len(getattr(env.unwrapped, "tasks", ()))
        what = f"although the env has {tasks} tasks" if tasks > 1 else "(an env played by seeds)"
        warnings.warn(
            EnvCheckWarning(
                f"seeds {seeds[0]}..{seeds[-1]} gave the same opening and the same results for "
                f"the fixed actions {list(SEED_PROBE_ACTIONS)} {what}: reset(seed=...) seems "
                "not to reach the env's state (seed it from self.np_random after "
                "super().reset(seed=seed)), so every seed would play the same episode"
            ),
            stacklevel=2,
        )
    _reset(env)


def _seeds_change_steps(env: gym.Env, seeds: list[int]) -> bool:
    """Whether some fixed action's first step differs between `seeds`."""
    for action in SEED_PROBE_ACTIONS:
        outcomes = []
        for seed in seeds:
            _reset(env, seed)
            messages, reward, terminated, truncated, _ = _step(env, action)
            outcomes.append((messages, reward, terminated, truncated))
        if any(o != outcomes[0] for o in outcomes[1:]):
            return True
    return False


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
