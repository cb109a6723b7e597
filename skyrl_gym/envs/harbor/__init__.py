"""Harbor task folders (Terminal-Bench style) as environments: parser, runtime, `harbor` env."""

from skyrl_gym.envs.harbor.task import (
    HarborTask,
    NetworkMode,
    TaskFormatError,
    find_task_dirs,
    load_task,
)

__all__ = ["HarborTask", "NetworkMode", "TaskFormatError", "find_task_dirs", "load_task"]
