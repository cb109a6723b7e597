"""Deprecated alias: the `lookup` env is `skyrl_gym.envs.lookup` (a built-in env now), its
tokenizer `skyrl_sdk.trainer.models.lookup_tokenizer`; removed in the next release."""

from __future__ import annotations

from typing import Any


# Defined before the imports below: an install whose metadata still lists the old
# `skyrl_gym.envs` entry point calls this while `import skyrl_gym` is importing this module.
def register_lookup() -> None:
    """Kept for old callers: `lookup` is a built-in id, registered by `import skyrl_gym`."""
    import skyrl_gym  # noqa: F401


from skyrl_gym.envs import lookup as _moved  # noqa: E402
from skyrl_gym.envs.lookup import *  # noqa: E402, F403
from skyrl_sdk.trainer._moved import warn_moved  # noqa: E402
from skyrl_sdk.trainer.models import lookup_tokenizer  # noqa: E402, F401 - re-exported

warn_moved("skyrl_sdk.trainer.lookup_env")


def __getattr__(name: str) -> Any:
    """Every other name of `skyrl_gym.envs.lookup`."""
    return getattr(_moved, name)
