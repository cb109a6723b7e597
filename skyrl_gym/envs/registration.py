"""SkyRL's `skyrl_gym.envs.registration` import path, for envs and scripts written for SkyRL.

The names are ours (`skyrl_gym.registry`), which accept SkyRL's calls: `register(id=...,
entry_point=..., kwargs={...})` and `make(id, env_config=..., extras=...)`.
"""

from skyrl_gym.registry import (
    EnvSpec,
    RegistrationError,
    deregister,
    make,
    register,
    registry,
    spec,
)

__all__ = ["EnvSpec", "RegistrationError", "deregister", "make", "register", "registry", "spec"]
