"""skyrl_gym: Gymnasium-faithful text environments for multi-turn, tool-using LLM agents.

import skyrl_gym
env = skyrl_gym.make("math")
messages, info = env.reset(seed=0)
messages, reward, terminated, truncated, info = env.step("<calculator>2 + 2</calculator>")
"""

from skyrl_gym import envs as _builtin_envs  # registers the built-in ids
from skyrl_gym import skyrl_compat as _skyrl_compat  # noqa: F401 (plugs SkyRL envs into make)
from skyrl_gym.checker import EnvCheckError, check_env, run_checks
from skyrl_gym.core import (
    Message,
    Messages,
    MessagesSpace,
    ResetNeeded,
    StepReturn,
    TaskEnv,
    TextEnv,
    TextSpace,
)
from skyrl_gym.registry import (
    EntryPointError,
    EnvSpec,
    RegistrationError,
    UnknownEnvError,
    deregister,
    make,
    register,
    registry,
    spec,
)
from skyrl_gym.tasks import TaskError, TaskRow, load_tasks
from skyrl_gym.tool_env import ToolEnv

__all__ = [
    "EntryPointError",
    "EnvCheckError",
    "EnvSpec",
    "Message",
    "Messages",
    "MessagesSpace",
    "RegistrationError",
    "ResetNeeded",
    "StepReturn",
    "TaskEnv",
    "TaskError",
    "TaskRow",
    "TextEnv",
    "TextSpace",
    "ToolEnv",
    "UnknownEnvError",
    "check_env",
    "deregister",
    "load_tasks",
    "make",
    "register",
    "registry",
    "run_checks",
    "spec",
]

# Last, once the package is complete: installed packages' env ids (e.g. `lookup` from
# skyrl_sdk.trainer), whose hooks may use anything above.
_builtin_envs.load_plugins()
