"""`SandboxToolEnv`: a `ToolEnv` whose tools run in a fresh sandbox each episode.

`reset` closes the previous episode's sandbox and starts a new one, so nothing an agent did
survives into the next episode. The sandboxes live on the process-wide background loop
(`sandboxes.background_loop()`): the async `areset`/`astep` await it without blocking the
caller's event loop, and the sync `reset`/`step` wait for it, so both paths share one sandbox.

When an episode ends with an answer, `info["episode"]` holds `episode_metrics` (`answer`,
`correct`) and then `episode_info`: the env's own end-of-episode record, typed as an
`EpisodeInfo` subclass per env (`TerminalEpisodeInfo`, `HarborEpisodeInfo`, ...).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypedDict

import gymnasium as gym

from skyrl_gym.core import Messages, ResetNeeded, StepReturn
from skyrl_gym.step_info import StepInfo
from skyrl_gym.tasks import TaskRow
from skyrl_gym.tool_env import ToolEnv, Tooling, answer, resolve_format
from skyrl_sdk.sandboxes import Backend, Sandbox, SandboxSpec, background_loop, create_sandbox
from skyrl_sdk.tools import Tool, ToolFormat, Toolset, XMLTagFormat


class EpisodeInfo(TypedDict, total=False):
    """`SandboxToolEnv.episode_info`: what a sandboxed env adds to `info["episode"]` when an
    episode ends (merged after `episode_metrics`' `answer` and `correct`, so a key here wins).

    Each env declares its own fields in a subclass (`TerminalEpisodeInfo`,
    `HarborEpisodeInfo`, `TerminalGenEpisodeInfo`, `SWEEpisodeInfo`). Readers outside the env
    treat the record as free-form JSON (`StepInfo.episode`; the agent loop reads only
    `correct`); a `TypedDict` is a plain dict at runtime, so it is written as it is.
    """

    notes: list[str]
    """Caveats about how the episode was graded, for whoever reads the record (terminal: the
    `single_uid` note when the grading sandbox had no second uid)."""


class SandboxToolEnv(ToolEnv):
    """Tool env with a per-episode sandbox. Subclasses implement `make_tools` (and `prompt`,
    `score` or `ascore`)."""

    xml_tags: ClassVar[Mapping[str, str]] = {}
    """Tag -> argument name for the XML format (all tools must take one argument)."""

    def __init__(
        self,
        tasks: Sequence[TaskRow] | None,
        *,
        spec: SandboxSpec | None = None,
        backend: str | Backend = Backend.BWRAP,
        tool_format: str | ToolFormat = "xml",
        max_output_chars: int = 16_000,
    ):
        # ToolEnv.__init__ needs tool instances; ours exist only once a sandbox does, so the
        # `Tooling` is built per episode in `_reset`.
        super(ToolEnv, self).__init__(tasks)
        self.tooling: Tooling | None = None  # type: ignore[assignment]
        self.sandbox_template = spec or SandboxSpec()
        self.backend = backend
        self.max_output_chars = max_output_chars
        self.toolset = Toolset([answer], max_output_chars=max_output_chars)
        if tool_format == "xml":
            if not self.xml_tags:
                raise ValueError(
                    f"{type(self).__name__} has multi-argument tools; use 'hermes' or 'openai'"
                )
            tool_format = XMLTagFormat({**self.xml_tags, "answer": "answer"})
        self.tool_format = resolve_format(tool_format, [])
        self.sandbox: Sandbox | None = None
        self._loop = background_loop()

    @abc.abstractmethod
    def make_tools(self, sandbox: Sandbox) -> list[Tool]:
        """The episode's tools, bound to its sandbox."""

    def sandbox_spec(self, task: TaskRow) -> SandboxSpec:
        """The spec of the sandbox for `task` (default: the env's spec)."""
        return self.sandbox_template

    async def ascore(self, task: TaskRow, answer: str) -> float:
        """The reward for a final answer; may use the sandbox (default: `score`)."""
        return self.score(task, answer)

    def score(self, task: TaskRow, answer: str) -> float:
        raise NotImplementedError(f"{type(self).__name__} must implement score() or ascore()")

    # ---- sync and async entry points, all run on the background loop -----------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Messages, dict[str, Any]]:
        return self._loop.run(self._reset(seed, options))

    def step(self, action: str) -> StepReturn:
        return self._loop.run(self._step(action))

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Messages, dict[str, Any]]:
        return await self._loop.arun(self._reset(seed, options))

    async def astep(self, action: str) -> StepReturn:
        return await self._loop.arun(self._step(action))

    def close(self) -> None:
        if self.sandbox is not None:
            self._loop.run(self._close_sandbox())

    # ---- the episode --------------------------------------------------------------------------

    async def _close_sandbox(self) -> None:
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None:
            await sandbox.close()

    async def _reset(
        self, seed: int | None, options: dict[str, Any] | None
    ) -> tuple[Messages, dict[str, Any]]:
        gym.Env.reset(self, seed=seed)
        task = self.choose_task(options)
        await self._close_sandbox()
        self.task = task
        self.sandbox = await create_sandbox(self.sandbox_spec(task), self.backend)
        self.toolset = Toolset(
            [*self.make_tools(self.sandbox), answer], max_output_chars=self.max_output_chars
        )
        # The tools are new objects each episode but their schemas, hence the system message,
        # are the same, so a seed still gives the same opening messages.
        instructions = self.tool_format.instructions(list(self.toolset))
        self.tooling = Tooling(
            self.toolset,
            self.tool_format,
            {"role": "system", "content": f"{self.system_prompt}\n\n{instructions}"},
        )
        return self.start(task), {"task_id": task["task_id"]}

    async def _step(self, action: str) -> StepReturn:
        if self.task is None or self.sandbox is None:
            raise ResetNeeded("call reset() before step()")
        turn = self.interpret(action)
        if turn.error is not None:
            return [self.tool_format.error_message(turn.error)], 0.0, False, False, turn.info
        if turn.answer is not None:
            reward = float(await self.ascore(self.task, turn.answer))
            metrics = {**self.episode_metrics(turn.answer, reward), **self.episode_info()}
            StepInfo(tuple(turn.calls), episode=metrics).write(turn.info)
            return [], reward, True, False, turn.info
        observations = []
        for call in turn.calls:
            result = await self.toolset.aexecute(call)
            observations.append(self.tool_format.render_result(result))
        return observations, 0.0, False, False, turn.info

    def episode_info(self) -> EpisodeInfo:
        """Extra fields for `info["episode"]` at the end of an episode (none by default)."""
        return {}
