"""SkyRL's `skyrl_gym.tools` import path: `ToolGroup` and the `@tool` decorator (in `core`).

SkyRL's bundled groups (a Python executor that runs code as a host subprocess, SQL, search)
are not provided: use our sandboxed envs and `skyrl_sdk.tools` instead.
"""

from skyrl_gym.tools.core import ToolGroup, tool

__all__ = ["ToolGroup", "tool"]
