"""Errors of a Harbor trial's environment, shared by the runtime and its backends' helpers."""

from __future__ import annotations


class TaskEnvironmentError(RuntimeError):
    """The task's environment could not be built or started."""
