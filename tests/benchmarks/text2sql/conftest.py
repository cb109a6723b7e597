"""The Text-to-SQL eval tests share the SQL env tests' fixtures."""

from tests.skyrl_gym.envs.sql.conftest import *  # noqa: F403
