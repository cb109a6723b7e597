"""Errors of a Harbor trial's environment, shared by the runtime and its backends' helpers."""

from __future__ import annotations


class TaskEnvironmentError(RuntimeError):
    """The task's environment could not be built or started."""


class BuildTimeoutError(TaskEnvironmentError):
    """Building the task's environment (its image or root, the Dockerfile's steps) ran past
    `[environment].build_timeout_sec` (times the timeout multiplier): a `build_timeout`, never
    charged to the agent, and the agent never runs."""
