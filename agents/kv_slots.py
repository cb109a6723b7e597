"""Deprecated alias of `skyrl_sdk.agents.engine.kv_slots`; removed in the next release."""

from __future__ import annotations

from typing import Any

from skyrl_sdk.agents._moved import moved_attr, warn_moved
from skyrl_sdk.agents.engine.kv_slots import *  # noqa: F403

warn_moved("skyrl_sdk.agents.kv_slots")


def __getattr__(name: str) -> Any:
    """Every other name the old module had, private ones included."""
    return moved_attr("skyrl_sdk.agents.kv_slots", name)
