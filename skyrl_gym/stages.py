"""The stages of an agent episode in a sandboxed task and why one stopped at its limit.

Harbor trials, SWE-bench episodes and terminal tasks run in up to four stages: `build` (the
environment's image or root), `start` (its sandbox), `agent` (the agent phase) and `verifier`
(grading). Each limited stage has its own limit and its own stop reason here, so a slow
build is never charged to the agent, and a summary says which limit ended a run.
"""

from __future__ import annotations

import enum


class StageStop(enum.StrEnum):
    """Which stage's limit ended an episode (the same words as Harbor's error kinds in a
    trial's `error`)."""

    BUILD_TIMEOUT = "build_timeout"
    """Building the environment ran past its limit (`[environment].build_timeout_sec`); the
    agent never ran."""
    AGENT_TIMEOUT = "agent_timeout"
    """The agent phase ran past its limit (`[agent].timeout_sec`, `skyrl swebench run
    --timeout`); Harbor still grades what it left."""
    VERIFIER_TIMEOUT = "verifier_timeout"
    """Grading ran past its limit (`[verifier].timeout_sec`, `--eval-timeout`); no reward."""


__all__ = ["StageStop"]
