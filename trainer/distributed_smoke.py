"""Deprecated alias of `skyrl_sdk.trainer.selfcheck.distributed`; removed in the next release."""

from __future__ import annotations

from typing import Any

from skyrl_sdk.trainer._moved import warn_moved
from skyrl_sdk.trainer.selfcheck import distributed as _moved
from skyrl_sdk.trainer.selfcheck.distributed import *  # noqa: F403

warn_moved("skyrl_sdk.trainer.distributed_smoke", as_main=__name__ == "__main__")


def __getattr__(name: str) -> Any:
    """Every other name of `skyrl_sdk.trainer.selfcheck.distributed`, private ones included."""
    return getattr(_moved, name)


if __name__ == "__main__":  # `python -m skyrl_sdk.trainer.distributed_smoke` still runs the check
    raise SystemExit(_moved.main())
