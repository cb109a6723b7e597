import skyrl_gym
from skyrl_gym import TextEnv


class GuessEnv(TextEnv):
    """Guess a secret number from 1 to 100; the env answers higher or lower."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.secret = int(self.np_random.integers(1, 101))
        return [{"role": "user", "content": "Guess my number (1-100)."}], {}

    def step(self, action):
        guess = int(action) if action.strip().isdigit() and len(action) < 10 else 0
        if guess == self.secret:
            return [], 1.0, True, False, {}
        hint = "higher" if guess < self.secret else "lower"
        return [{"role": "user", "content": hint}], 0.0, False, False, {}


skyrl_gym.register("guess", GuessEnv, description="Guess a number in 8 turns.", max_turns=8)
skyrl_gym.check_env(lambda: skyrl_gym.make("guess"))  # raises EnvCheckError naming what broke
