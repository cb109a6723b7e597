"""Generated terminal tasks: parameterised families of shell work written as Harbor task
folders (`skyrl terminal gen`), checked in the sandbox, and the `terminal-gen` env over them."""

from skyrl_gym.envs.terminal_gen.families import FAMILIES, Category, TaskSpec, make_spec
from skyrl_gym.envs.terminal_gen.generate import SPLITS, Split, plan, write_task, write_tasks

__all__ = [
    "FAMILIES",
    "SPLITS",
    "Category",
    "Split",
    "TaskSpec",
    "make_spec",
    "plan",
    "write_task",
    "write_tasks",
]
