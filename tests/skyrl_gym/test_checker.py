"""check_env: every invariant passes on good envs and catches an env built to break it."""

import random
import re
import runpy
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_gym.checker import CHECKS, EnvCheckError, run_checks

from . import user_envs as envs

ROOT = Path(__file__).resolve().parents[2]


def failed(env_factory) -> dict[str, str]:
    return {r.name: r.message for r in run_checks(env_factory) if not r.passed}


def test_a_correct_env_passes_every_check():
    assert failed(lambda: envs.CountdownEnv()) == {}
    assert failed(envs.CountdownEnv()) == {}  # an instance works too
    skyrl_gym.check_env(envs.CountdownEnv)


@pytest.mark.parametrize("env_id", sorted(skyrl_gym.registry))
def test_every_registered_env_passes(env_id):
    assert failed(lambda: skyrl_gym.make(env_id)) == {}


@pytest.mark.parametrize(
    ("bad_env", "check", "message"),
    [
        (envs.StepsBeforeReset, "check_step_before_reset", "before reset() returned normally"),
        (envs.BadSpaces, "check_spaces", "must be gymnasium Spaces"),
        (envs.BadResetType, "check_reset_return_type", "must return (messages, info)"),
        (envs.MalformedMessage, "check_reset_return_type", "message 0 is not a chat message"),
        (envs.EmptyReset, "check_reset_return_type", "returned no messages"),
        (envs.IgnoresSeed, "check_reset_seed_determinism", "gave different messages"),
        (envs.IntReward, "check_step_return_type", "reward must be a Python float, got int"),
        (envs.NumpyFlags, "check_step_return_type", "terminated must be a Python bool"),
        (envs.RandomStep, "check_step_determinism", "gave different step results"),
        (envs.ChokesOnBigActions, "check_hostile_actions", "a 1 MB action raised ValueError"),
        (envs.AsyncDisagrees, "check_async_matches_sync", "different results"),
        (envs.CloseTwiceFails, "check_close_idempotent", "second close() raised RuntimeError"),
    ],
)
def test_each_invariant_catches_an_env_that_breaks_it(bad_env, check, message):
    failures = failed(bad_env)
    assert check in failures, failures
    assert message in failures[check]
    with pytest.raises(EnvCheckError, match=re.escape(message)):
        skyrl_gym.check_env(bad_env)


def test_invalid_utf8_action_is_caught_when_the_env_encodes_it():
    class OnlyUtf8(envs.CountdownEnv):
        def step(self, action):
            action.encode("utf-8")
            return super().step(action)

    assert "invalid UTF-8" in failed(OnlyUtf8)["check_hostile_actions"]
    # make() coerces actions, so the same env passes once wrapped
    assert "check_hostile_actions" not in failed(
        lambda: skyrl_gym.wrappers.EpisodeGuard(OnlyUtf8())
    )


def test_gymnasium_checker_runs_on_the_unwrapped_env():
    class SharedInfo(envs.CountdownEnv):
        info: dict = {}  # the same dict every call: gymnasium's checker rejects this

        def reset(self, *, seed=None, options=None):
            messages, _ = super().reset(seed=seed)
            return messages, self.info

    assert "share an object" in failed(SharedInfo)["check_gymnasium"]


def test_every_check_is_listed_once_and_documented():
    names = [c.__name__ for c in CHECKS]
    assert len(names) == len(set(names)) == 11
    assert all(c.__doc__ for c in CHECKS)


def test_readme_custom_env_passes_our_checker_and_gymnasium():
    readme = (ROOT / "README.md").read_text()
    example = (ROOT / "examples" / "guess_env.py").read_text()
    assert example.strip() in readme, "README must show examples/guess_env.py verbatim"
    assert len(example.strip().splitlines()) <= 22
    skyrl_gym.deregister("guess")
    namespace = runpy.run_path(str(ROOT / "examples" / "guess_env.py"))  # runs check_env itself
    try:
        skyrl_gym.check_env(namespace["GuessEnv"]())  # the raw class passes too
        env = skyrl_gym.make("guess")
        env.reset(seed=0)
        secret = env.unwrapped.secret
        assert env.step(str(secret))[1:3] == (1.0, True)
    finally:
        skyrl_gym.deregister("guess")


def test_seeds_that_reach_nothing_warn_without_failing():
    from skyrl_gym.checker import EnvCheckWarning

    results = {r.name: r for r in run_checks(envs.CountdownEnv)}  # its seed changes nothing
    seeds = results["check_reset_seed_determinism"]
    assert seeds.passed and "seem" in seeds.warning and "same opening" in seeds.warning
    with pytest.warns(EnvCheckWarning, match="check_reset_seed_determinism: seeds 1234"):
        skyrl_gym.check_env(envs.CountdownEnv)  # warns, does not raise


def test_a_seed_that_changes_a_fixed_actions_result_does_not_warn():
    from examples.guess_env import GuessEnv  # same opening under every seed, secret differs

    assert not [r.warning for r in run_checks(lambda: skyrl_gym.make(GuessEnv)) if r.warning]


class _FlipEnv(skyrl_gym.TextEnv):
    """Call the flip: the seed picks the face, the opening is the same for every seed."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.face = ("up", "down")[int(self.np_random.integers(2))]
        prompt = "Which face landed? Reply <answer>up</answer> or <answer>down</answer>."
        return [{"role": "user", "content": prompt}], {}

    def step(self, action):
        return [], float(f"<answer>{self.face}</answer>" in action), True, False, {}


def seed_warning(env_factory) -> str:
    return {r.name: r for r in run_checks(env_factory)}["check_reset_seed_determinism"].warning


def test_a_coin_flip_drawn_from_the_seed_does_not_warn():
    # no fixed probe action names a face, but the face the seed drew differs between seeds
    assert seed_warning(_FlipEnv) == ""
    assert seed_warning(lambda: skyrl_gym.make(_FlipEnv)) == ""


def test_a_seeded_secret_the_checker_cannot_read_is_found_by_the_openings_answers():
    class SealedFlip(_FlipEnv):
        """The face is hidden in a closure, not a plain attribute: only a step reveals it."""

        def reset(self, *, seed=None, options=None):
            messages, info = super().reset(seed=seed)
            face = self.__dict__.pop("face")
            self.judge = lambda action: f"<answer>{face}</answer>" in action
            return messages, info

        def step(self, action):
            return [], float(self.judge(action)), True, False, {}

    assert seed_warning(SealedFlip) == ""


def test_a_seed_ignoring_env_still_warns_despite_counters_clocks_and_offered_answers():
    class AlwaysUp(_FlipEnv):
        """Ignores its seed (it only records it), counts resets, times steps: none reaches it."""

        resets = 0

        def reset(self, *, seed=None, options=None):
            messages, info = super().reset(seed=seed)
            self.face, self.resets, self.last_seed = "up", self.resets + 1, seed
            return messages, info

        def step(self, action):
            messages, reward, terminated, truncated, _ = super().step(action)
            return messages, reward, terminated, truncated, {"elapsed_s": random.random()}

    warning = seed_warning(AlwaysUp)
    assert "seems not to reach the env's state" in warning and "false positive" in warning
    assert "'<answer>up</answer>'" in warning  # the opening's answers were probed too
