"""Reading one env step as the agent loop does: the step protocol, checked.

`read_step(observation, reward, terminated, truncated, info)` returns the step's typed
`skyrl_gym.step_info.StepInfo` and its two end flags, or raises `MalformedStep` naming what
broke the protocol: an observation that is not a list of chat messages, a reward that is not
a finite number, a flag that is not a bool, or an `info` whose protocol keys do not parse.
The well-typed step every env returns takes one short path of exact type checks.
"""

from __future__ import annotations

import math
import numbers

from skyrl_gym.step_info import StepInfo, StepInfoError
from skyrl_sdk.tools.messages import ROLES, is_message


class MalformedStep(ValueError):
    """An env step broke the step protocol (the message names the key or value)."""


def read_step(
    observation: object, reward: object, terminated: object, truncated: object, info: object
) -> tuple[StepInfo, bool, bool]:
    """The step's typed info and end flags, after checking the rest of the 5-tuple;
    `MalformedStep` with a message naming what is wrong when the env broke the protocol."""
    if (
        type(terminated) is bool
        and type(truncated) is bool
        and type(reward) is float
        and math.isfinite(reward)
        and type(observation) is list
        and _all_messages(observation)
    ):  # the common, well-typed step
        try:
            return _read_info(info), terminated, truncated
        except StepInfoError as e:
            raise MalformedStep(str(e)) from None
    problem = None
    flags = []
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        try:
            flags.append(bool(flag))
        except Exception:  # e.g. a numpy array of several values
            problem = f"{name} must be a bool, got {type(flag).__name__} {flag!r:.40}"
    if problem is not None:
        pass
    elif not isinstance(observation, list | tuple):
        problem = f"observation must be a list of messages, got {type(observation).__name__}"
    elif (
        bad := next((i for i, m in enumerate(observation) if not is_message(m)), None)
    ) is not None:
        problem = f"observation message {bad} is not a chat message: {observation[bad]!r:.120}"
    elif (type(reward) is not float and not isinstance(reward, numbers.Real)) or not math.isfinite(
        reward  # type: ignore[arg-type]
    ):
        problem = f"reward must be a finite number, got {type(reward).__name__} {reward!r:.40}"
    else:
        try:
            return StepInfo.read(info), flags[0], flags[1]
        except StepInfoError as e:
            problem = str(e)
    raise MalformedStep(problem)


_read_info = StepInfo.read
"""`StepInfo.read`, bound once (not a new bound method per step)."""


def _all_messages(observation: list[object]) -> bool:
    """Whether every item is a chat message; the usual `{"role", "content"}` dict is checked
    here, without a call per message."""
    for m in observation:
        if type(m) is dict and len(m) == 2:
            content = m.get("content")
            if type(content) is str and m.get("role") in ROLES:
                continue  # both keys and values are strings
        if not is_message(m):
            return False
    return True
