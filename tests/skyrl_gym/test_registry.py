"""register / make / spec, and the wrappers make() applies."""

import dataclasses
import importlib

import pytest

import skyrl_gym
from skyrl_gym import EntryPointError, RegistrationError, ResetNeeded, UnknownEnvError
from skyrl_gym.wrappers import EpisodeGuard

from .user_envs import CountdownEnv


@pytest.fixture
def temp_id():
    ids = []

    def make_id(name):
        ids.append(name)
        return name

    yield make_id
    for env_id in ids:
        skyrl_gym.deregister(env_id)


def test_builtin_ids_are_registered_with_descriptions():
    for env_id in ("math", "math-answer", "sql-basic"):
        assert skyrl_gym.spec(env_id).description


def test_unknown_id_suggests_close_matches():
    with pytest.raises(UnknownEnvError, match=r"no env registered as 'mth'.*Did you mean 'math'"):
        skyrl_gym.make("mth")


@pytest.mark.parametrize(
    ("entry_point", "message"),
    [
        ("no_colon_here", "not of the form 'module:Class'"),
        ("skyrl_gym.nonexistent_module:Env", "cannot import module 'skyrl_gym.nonexistent_module'"),
        ("skyrl_gym.core:Missing", "has no attribute 'Missing'"),
        ("skyrl_gym.core:ROLES", "is not callable"),
        ("tests.skyrl_gym.user_envs:not_an_env", "not a TextEnv"),
    ],
)
def test_broken_entry_points_fail_with_a_specific_message(temp_id, entry_point, message):
    skyrl_gym.register(temp_id("broken"), entry_point)
    with pytest.raises(EntryPointError, match=message):
        skyrl_gym.make("broken")


def test_reregistering_the_same_spec_is_a_noop_but_a_different_one_raises(temp_id):
    skyrl_gym.register(temp_id("count"), CountdownEnv, max_turns=3)
    skyrl_gym.register("count", CountdownEnv, max_turns=3)
    with pytest.raises(RegistrationError, match="already registered"):
        skyrl_gym.register("count", "tests.skyrl_gym.user_envs:CountdownEnv")
    with pytest.raises(RegistrationError, match="non-empty string"):
        skyrl_gym.register("has space", CountdownEnv)


def test_make_merges_spec_defaults_with_call_kwargs(temp_id):
    skyrl_gym.register(temp_id("count"), "tests.skyrl_gym.user_envs:CountdownEnv", length=2)
    assert skyrl_gym.make("count").unwrapped.length == 2
    assert skyrl_gym.make("count", length=7).unwrapped.length == 7


def test_make_wraps_order_turn_limit_and_stats(temp_id):
    skyrl_gym.register(temp_id("count"), CountdownEnv, max_turns=2, length=5)
    env = skyrl_gym.make("count")
    assert isinstance(env, EpisodeGuard) and isinstance(env.env, CountdownEnv)
    assert env.max_turns == 2
    with pytest.raises(ResetNeeded, match="before step"):
        env.step("x")
    env.reset(seed=0)
    assert env.step("x")[3] is False
    messages, reward, terminated, truncated, info = env.step("x")
    assert (terminated, truncated) == (False, True)
    assert info["truncated_by"] == "max_turns"
    assert info["episode"]["turns"] == 2 and info["episode"]["truncated"] is True
    with pytest.raises(ResetNeeded, match="episode has ended"):
        env.step("x")
    env.reset(seed=0)  # a reset clears the limit
    assert env.step("x")[3] is False


def test_terminated_and_truncated_stay_apart(temp_id):
    skyrl_gym.register(temp_id("count"), CountdownEnv, max_turns=3, length=3)
    env = skyrl_gym.make("count")
    env.reset(seed=0)
    env.step("x")
    env.step("x")
    _, reward, terminated, truncated, info = env.step("x")
    # the env's own end on the same turn as the limit: terminated wins, no truncation
    assert (terminated, truncated) == (True, False) and reward == 1.0
    assert info["episode"]["return"] == 1.0


def test_guard_false_returns_the_bare_env(temp_id):
    skyrl_gym.register(temp_id("bare"), CountdownEnv, guard=False)
    assert type(skyrl_gym.make("bare")) is CountdownEnv


def test_async_path_is_guarded_too(temp_id):
    import asyncio

    skyrl_gym.register(temp_id("count"), CountdownEnv, max_turns=1, length=5)
    env = skyrl_gym.make("count")

    async def run():
        with pytest.raises(ResetNeeded):
            await env.astep("x")
        await env.areset(seed=0)
        return await env.astep(b"bytes \xff")

    *_, truncated, info = asyncio.run(run())
    assert truncated and info["episode"]["turns"] == 1


def test_max_turns_must_be_positive(temp_id):
    skyrl_gym.register(temp_id("count"), CountdownEnv)
    with pytest.raises(ValueError, match="max_turns must be at least 1"):
        skyrl_gym.make("count", max_turns=0)


def test_episode_stats_count_parse_errors_and_tool_calls():
    env = skyrl_gym.make("math")
    env.reset(seed=0)
    env.step("no tool call here")
    env.step("<calculator>2+2</calculator>")
    *_, info = env.step("<answer>4</answer>")
    assert info["episode"]["parse_errors"] == 1
    assert info["episode"]["tool_calls"] == 2
    assert info["episode"]["turns"] == 3


class LimitAwareEnv(CountdownEnv):
    def __init__(self, length: int = 9, max_turns: int = 4):
        super().__init__(length)
        self.max_turns = max_turns


def test_make_passes_max_turns_to_envs_that_take_it(temp_id):
    skyrl_gym.register(temp_id("aware"), LimitAwareEnv, max_turns=3)
    assert skyrl_gym.make("aware").unwrapped.max_turns == 4  # the env's own default stays
    env = skyrl_gym.make("aware", max_turns=2)
    assert env.unwrapped.max_turns == 2 and env.max_turns == 2
    skyrl_gym.register(temp_id("plain"), CountdownEnv)
    assert skyrl_gym.make("plain", max_turns=2).max_turns == 2  # only the guard knows


class _Foreign:
    """An env of a contract `make` does not know (not a `TextEnv`)."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs


@dataclasses.dataclass(frozen=True)
class _ForeignAdapter:
    """Builds a `CountdownEnv` for `_Foreign`, recording the keyword arguments it got."""

    seen: list = dataclasses.field(default_factory=list, compare=False)

    def adapt(self, factory):
        if factory is not _Foreign:
            return None

        def build(max_turns=None, **kwargs):
            self.seen.append({"max_turns": max_turns, **kwargs})
            return CountdownEnv(**kwargs)

        return build

    def adapt_built(self, env, factory):
        return None


def test_a_foreign_contract_plugs_into_make_through_an_adapter(temp_id, monkeypatch):
    """`make` knows no foreign contract (skyrl_compat plugs SkyRL's in the same way): without
    the adapter the entry point is refused, with it the adapted factory builds the env and
    receives the spec's turn limit, and the guard still applies."""
    reg = importlib.import_module("skyrl_gym.registry")  # the package's `registry` is the map

    skyrl_gym.register(temp_id("foreign-env"), _Foreign, max_turns=2, length=5)
    with pytest.raises(EntryPointError, match="returned _Foreign, not a TextEnv"):
        skyrl_gym.make("foreign-env")
    monkeypatch.setattr(reg, "_adapters", list(reg._adapters))
    adapter = _ForeignAdapter()
    reg.add_env_adapter(adapter)
    reg.add_env_adapter(_ForeignAdapter())  # an equal adapter again: a no-op
    assert reg._adapters.count(adapter) == 1
    try:
        env = skyrl_gym.make("foreign-env")
        assert isinstance(env, EpisodeGuard) and isinstance(env.unwrapped, CountdownEnv)
        assert adapter.seen == [{"max_turns": 2, "length": 5}]
        env.reset(seed=0)
        env.step("a")
        *_, truncated, _ = env.step("b")
        assert truncated  # the spec's limit of 2 turns, enforced by the guard
    finally:
        reg._factories.clear()  # the adapted factory must not outlive the adapter
