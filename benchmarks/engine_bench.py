"""Deprecated alias of `skyrl_sdk.benchmarks.perf.engine`; removed in the next release."""

from __future__ import annotations

from typing import Any

from skyrl_sdk.benchmarks._moved import warn_moved
from skyrl_sdk.benchmarks.perf import engine as _moved
from skyrl_sdk.benchmarks.perf.engine import *  # noqa: F403

warn_moved("skyrl_sdk.benchmarks.engine_bench", as_main=__name__ == "__main__")


def __getattr__(name: str) -> Any:
    """Every other name of `skyrl_sdk.benchmarks.perf.engine`, private ones included."""
    return getattr(_moved, name)
