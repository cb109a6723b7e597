"""Deprecated alias of `skyrl_sdk.trainer.demos.lookup`; removed in the next release."""

from __future__ import annotations

from typing import Any

from skyrl_sdk.trainer._moved import warn_moved
from skyrl_sdk.trainer.demos import lookup as _moved
from skyrl_sdk.trainer.demos.lookup import *  # noqa: F403

warn_moved("skyrl_sdk.trainer.demo", as_main=__name__ == "__main__")


def __getattr__(name: str) -> Any:
    """Every other name of `skyrl_sdk.trainer.demos.lookup`, private ones included."""
    return getattr(_moved, name)
