"""Deprecated alias of `skyrl_sdk.benchmarks.perf.trainer`; removed in the next release."""

from __future__ import annotations

import sys
from typing import Any

from skyrl_sdk.benchmarks._moved import warn_moved
from skyrl_sdk.benchmarks.perf import trainer as _moved
from skyrl_sdk.benchmarks.perf.trainer import *  # noqa: F403

warn_moved("skyrl_sdk.benchmarks.trainer_bench", as_main=__name__ == "__main__")


def __getattr__(name: str) -> Any:
    """Every other name of `skyrl_sdk.benchmarks.perf.trainer`, private ones included."""
    return getattr(_moved, name)


if __name__ == "__main__":  # `python -m skyrl_sdk.benchmarks.trainer_bench` still runs it
    _moved.run().print(json_line="--json" in sys.argv)
