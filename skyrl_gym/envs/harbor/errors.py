"""Errors of a Harbor trial's environment, shared by the runtime and its backends' helpers."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skyrl_gym.envs.harbor.runtime import HarborRuntime


class TaskEnvironmentError(RuntimeError):
    """The task's environment could not be built or started."""


class BuildTimeoutError(TaskEnvironmentError):
    """Building the task's environment (its image or root, the Dockerfile's steps) ran past
    `[environment].build_timeout_sec` (times the timeout multiplier): a `build_timeout`, never
    charged to the agent, and the agent never runs."""


@contextlib.contextmanager
def building(rt: HarborRuntime) -> Iterator[None]:
    """A part of `rt`'s environment build: its seconds count in `rt.build_s` (the trial's
    `build` stage, apart from opening the sandbox), and an error out of it sets
    `rt.build_failed` (the `build` stage failed, not `start`)."""
    started = time.monotonic()
    try:
        yield
    except BaseException:
        rt.build_failed = True
        raise
    finally:
        rt.build_s += time.monotonic() - started
