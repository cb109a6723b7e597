"""The Harbor job runner's tests share the Harbor env tests' fixtures."""

from tests.skyrl_gym.envs.harbor.conftest import *  # noqa: F403
