"""SkyRL's environment API, at the import path SkyRL's `skyrl-gym` uses for it.

An env written for SkyRL (`from skyrl_gym.envs.base_text_env import BaseTextEnv,
BaseTextEnvStepOutput`) imports this module unchanged. Its contract is SkyRL's, not
Gymnasium's: one instance per episode, built as `Cls(env_config=..., extras=row_extras)`;
`init(prompt)` returns the opening conversation; `step(action)` returns a dict with
`observations`, `reward`, `done` and `metadata`. `skyrl_gym.make` recognises subclasses of
`Env` and wraps them in `skyrl_gym.skyrl_compat.SkyRLTextEnv`, a Gymnasium-faithful
`TextEnv`, so such envs run in `skyrl env check`, `skyrl eval` and `skyrl train` as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, NotRequired, SupportsFloat, TypedDict, TypeVar

__all__ = [
    "BaseTextEnv",
    "BaseTextEnvStepOutput",
    "ConversationType",
    "Env",
    "EnvStepOutput",
    "MessageType",
    "default_aggregate_metrics",
]

ObsType = TypeVar("ObsType")
ActType = TypeVar("ActType")

MessageType = dict[str, str]
"""One chat message, `{"role": ..., "content": ...}`."""
ConversationType = list[MessageType]
"""A list of chat messages (OpenAI's format)."""


class EnvStepOutput(TypedDict):
    """What SkyRL's generic `Env.step` returns."""

    observations: Any
    """The new observations."""
    reward: SupportsFloat
    """The reward for this step."""
    done: bool
    """Whether the episode is over."""
    metadata: NotRequired[dict[str, Any] | None]
    """Anything else the env wants to report."""


class BaseTextEnvStepOutput(TypedDict):
    """What `BaseTextEnv.step` returns: a plain dict with these keys."""

    observations: ConversationType
    """Messages the env adds to the conversation (usually one user message, or none)."""
    reward: float
    """The reward for this step (SkyRL places it on the step's last token)."""
    done: bool
    """Whether the episode is over (answered, or out of the env's own turn budget)."""
    metadata: dict[str, Any]
    """Anything else the env wants to report; the adapter puts it in `info["metadata"]`."""
    postprocessed_action: NotRequired[str | None]
    """A rewritten action; the adapter reports it in `info["postprocessed_action"]` (our
    agent loop keeps the sampled tokens, so the history is not rewritten)."""


class Env(Generic[ObsType, ActType]):
    """SkyRL's base environment: `init`, then `step` until `done`, then `close`.

    There is no `reset`: an instance plays one episode. `skyrl_gym.make` wraps any subclass
    in a Gymnasium `TextEnv` that builds a fresh instance per episode.
    """

    spec: Any = None
    """Set by `skyrl_gym.make` to the spec the env was built from."""

    def step(self, action: ActType) -> EnvStepOutput:
        """Apply one action; return observations, reward, done and metadata."""
        raise NotImplementedError

    def init(self, *args: Any) -> tuple[ObsType, dict[str, Any]]:
        """Start the episode; return the first observation and metadata."""
        raise NotImplementedError

    def close(self) -> None:
        """Release resources; safe to call more than once."""

    def __str__(self) -> str:
        return f"Env({type(self).__name__})"

    def __enter__(self) -> Env[ObsType, ActType]:
        return self

    def __exit__(self, *args: Any) -> bool:
        self.close()
        return False


class BaseTextEnv(Env[ConversationType, str]):
    """SkyRL's text env: chat messages in, the assistant's text out.

    Subclasses take `(env_config, extras)` in their constructor (SkyRL's convention), call
    `super().__init__()`, and implement `step`; `init(prompt)` returns the prompt unchanged
    unless overridden. `turns` and `max_turns` are bookkeeping the subclass maintains itself.
    """

    def __init__(self) -> None:
        super().__init__()
        self.turns = 0
        self.max_turns = 1
        self.tool_groups: list[Any] = []
        self.tool_to_toolgroup: dict[str, str] = {}

    def init_tool_groups(self, tool_groups: Sequence[Any] = ()) -> None:
        """Remember the env's tool groups and map each tool name to its group's name.

        A tool group is any object with `name`, `get_tool_to_group_mapping()` and
        `execute_tool(tool_name, *args)` (SkyRL's `ToolGroup` has them).
        """
        self.tool_groups = list(tool_groups)
        self.tool_to_toolgroup = {}
        for group in self.tool_groups:
            self.tool_to_toolgroup.update(group.get_tool_to_group_mapping())

    def _execute_tool(self, tool_group_name: str, tool_name: str, tool_input: Any) -> Any:
        """Run `tool_name` of the named group with `tool_input` as positional arguments."""
        for group in self.tool_groups:
            if group.name == tool_group_name:
                return group.execute_tool(tool_name, *tool_input)
        raise ValueError(f"tool group {tool_group_name!r} not found")

    def step(self, action: str) -> BaseTextEnvStepOutput:  # type: ignore[override]
        """Apply the assistant's reply. Subclasses implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement step()")

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:  # type: ignore[override]
        """The conversation the model sees first (by default the dataset row's prompt)."""
        return prompt, {}

    def close(self) -> None:
        """Nothing to release by default."""

    def get_metrics(self) -> dict[str, Any]:
        """Episode metrics, reported in the last step's `info["episode"]`."""
        return {}

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
        """Combine many episodes' metrics (default: the mean of each numeric field)."""
        return default_aggregate_metrics(metrics)


def default_aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, float]:
    """The mean of every numeric (or bool) field over the episodes that have it."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for episode in metrics:
        for key, value in episode.items():
            if isinstance(value, bool | int | float):
                sums[key] = sums.get(key, 0.0) + float(value)
                counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}
