"""Deprecated alias of `skyrl_sdk.benchmarks.perf.env`; removed in the next release."""

from __future__ import annotations

from typing import Any

from skyrl_sdk.benchmarks._moved import warn_moved
from skyrl_sdk.benchmarks.perf import env as _moved
from skyrl_sdk.benchmarks.perf.env import *  # noqa: F403

warn_moved("skyrl_sdk.benchmarks.env_step", as_main=__name__ == "__main__")


def __getattr__(name: str) -> Any:
    """Every other name of `skyrl_sdk.benchmarks.perf.env`, private ones included."""
    return getattr(_moved, name)
