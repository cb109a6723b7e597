"""`terminal-gen`: generated shell tasks as a `TextEnv`, one `bash` tool, then `answer`.

`make("terminal-gen", split="train", families=["echo-word"], per_family=64)` plays tasks
`<family>-s<seed>` for the split's seeds (`generate.SPLITS`: `train` and `heldout` never share
a seed, hence never a task). Each episode writes its task's Harbor folder into the env's own
scratch folder (never visible from a sandbox), starts it in `HarborRuntime` exactly as
`skyrl harbor run` would, and ends when the model calls `answer`: the task's verifier then
grades the final state of /app in a fresh sandbox.

The tool format is small on purpose, so a small model can learn it (XML tags):

    <bash>ls</bash>                      run one command in /app (a fresh shell each call)
    <answer>done</answer>                finish; the verifier grades /app

Commands in a reply run in order, and an `answer` in the same reply is taken after them, so
`<bash>echo x > f.txt</bash><answer>done</answer>` solves a task in one turn. The turn limit
is the registry's (`max_turns`, 6 by default). `info["episode"]` carries `family`,
`difficulty` and `category`, and `family_success` summarises episodes per family.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, cast

from skyrl_gym.core import Messages, ResetNeeded, StepReturn
from skyrl_gym.envs.harbor.env import HarborEnv, HarborEpisodeInfo
from skyrl_gym.envs.harbor.runtime import HarborRuntime
from skyrl_gym.envs.terminal_gen.families import make_spec
from skyrl_gym.envs.terminal_gen.generate import SPLITS, resolve_families, write_task
from skyrl_gym.tasks import TaskRow
from skyrl_gym.tool_env import Tooling
from skyrl_sdk.sandboxes import Backend, Sandbox
from skyrl_sdk.tools import Tool
from skyrl_sdk.tools.bash import bash_tool

DEFAULT_PER_FAMILY = 32
"""Tasks per family when `per_family` is not given."""
BRIEF_PROMPT = "Run <bash>command</bash> in /app, then <answer>done</answer>."
"""The whole system message with `brief=True` (for tiny models with short contexts)."""
EXAMPLE = (
    "Example. Task: Write the word tulip42 into the file sketch.txt.\n"
    "Reply: <bash>echo tulip42 > sketch.txt</bash><answer>done</answer>"
)
"""Appended to the system message with `example=True` (a worked task outside every family's
word lists, so it is never a generated task)."""


def task_rows(
    split: str = "train",
    families: str | Sequence[str] | None = None,
    per_family: int = DEFAULT_PER_FAMILY,
    offset: int = 0,
) -> list[TaskRow]:
    """Rows `{task_id, family, seed, split}`: `per_family` seeds of `split` for each family."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    names = resolve_families(families)
    seeds = SPLITS[split].seeds(per_family, offset)
    return [
        {"task_id": f"{family}-s{seed}", "family": family, "seed": seed, "split": split}
        for seed in seeds
        for family in names
    ]


def family_success(episodes: Iterable[tuple[str, float]]) -> dict[str, dict[str, float]]:
    """Per family: `episodes` and `success` (mean of reward > 0) from (task_id, reward) pairs."""
    counts: dict[str, list[float]] = {}
    for task_id, reward in episodes:
        family = task_id.rsplit("-s", 1)[0]
        counts.setdefault(family, []).append(1.0 if reward > 0 else 0.0)
    return {
        f: {"episodes": float(len(v)), "success": sum(v) / len(v)}
        for f, v in sorted(counts.items())
    }


class TerminalGenEpisodeInfo(HarborEpisodeInfo, total=False):
    """`TerminalGenEnv.episode_info`: Harbor's verifier fields plus the generated task's
    family card (once the episode has a task)."""

    family: str
    """The task's generator family (`echo-word`, ...)."""
    difficulty: int
    """The task's difficulty: 1 (one obvious command) to 3 (several steps or a program)."""
    category: str
    """The kind of shell work the task exercises (a `Category` value)."""


class TerminalGenEnv(HarborEnv):
    """Generated shell tasks in a bwrap sandbox: `<bash>` commands, then `<answer>`."""

    required_fields: ClassVar[tuple[str, ...]] = ("family", "seed")
    xml_tags: ClassVar[Mapping[str, str]] = {"bash": "command"}
    system_prompt: ClassVar[str] = (
        "You are in a Linux shell in the directory /app. Do the task by running shell "
        "commands. Write each command as <bash>command</bash>; you will see its output. When "
        "the task is done, write <answer>done</answer>."
    )
    no_action_hint: ClassVar[str] = (
        "run a command as <bash>command</bash>, or finish with <answer>done</answer>"
    )

    def __init__(
        self,
        tasks: Sequence[TaskRow] | None = None,
        *,
        split: str = "train",
        families: str | Sequence[str] | None = None,
        per_family: int = DEFAULT_PER_FAMILY,
        offset: int = 0,
        backend: str | Backend = Backend.BWRAP,
        tool_format: str = "xml",
        timeout_s: float = 10.0,
        brief: bool = False,
        example: bool = False,
    ):
        rows = list(tasks) if tasks is not None else task_rows(split, families, per_family, offset)
        super().__init__(rows, backend=backend, tool_format=tool_format, timeout_s=timeout_s)
        self.brief = brief
        """Use `BRIEF_PROMPT` as the whole system message (no tool list)."""
        self.example = example
        """Append `EXAMPLE` (one worked task) to the system message."""
        # Graded as the generated task.toml asks (and forced here for folders without it):
        # the reward counts only when test.sh exited 0 and nothing it started outlived its parent.
        self.make_runtime = functools.partial(HarborRuntime, require_exit_zero=True)
        self._scratch = Path(tempfile.mkdtemp(prefix="skyrl-terminal-gen-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._scratch, True)

    def make_tools(self, sandbox: Sandbox) -> list[Tool]:
        shell = self.runtime.shell if self.runtime is not None else "bash"
        return [bash_tool(sandbox, timeout_s=self.timeout_s, shell=shell)]

    async def _reset(
        self, seed: int | None, options: dict[str, Any] | None
    ) -> tuple[Messages, dict[str, Any]]:
        messages, info = await super()._reset(seed, options)
        if (self.brief or self.example) and self.tooling is not None:
            text = BRIEF_PROMPT if self.brief else str(self.tooling.system_message["content"])
            if self.example:
                text = f"{text}\n\n{EXAMPLE}"
            system = {"role": "system", "content": text}
            self.tooling = Tooling(self.toolset, self.tool_format, system)
            messages = self.start(self.task)
        return messages, info

    def choose_task(self, options: dict[str, Any] | None) -> TaskRow:
        row = super().choose_task(options)
        spec = make_spec(row["family"], int(row["seed"]))
        path = self._scratch / spec.task_id
        if not path.is_dir():
            write_task(spec, self._scratch)
        return {**row, "task_id": row.get("task_id", spec.task_id), "path": str(path)}

    async def _step(self, action: str) -> StepReturn:
        if self.task is None or self.sandbox is None:
            raise ResetNeeded("call reset() before step()")
        turn = self.interpret(action)
        if turn.error is not None:
            return [self.tool_format.error_message(turn.error)], 0.0, False, False, turn.info
        observations = []
        for call in turn.calls:
            if call.name == "answer":
                break
            result = await self.toolset.aexecute(call)
            observations.append(self.tool_format.render_result(result))
        if turn.answer is not None:
            reward = float(await self.ascore(self.task, turn.answer))
            turn.info["episode"] = {
                **self.episode_metrics(turn.answer, reward),
                **self.episode_info(),
            }
            return [], reward, True, False, turn.info
        return observations, 0.0, False, False, turn.info

    async def ascore(self, task: TaskRow, answer: str) -> float:
        """The verifier's reward, counted only when test.sh ran to its end (exit 0, nothing it
        started outlived its parent: `require_exit_zero`): a program that kills the verifier earns nothing."""
        assert self.runtime is not None
        result = await self.runtime.verify()
        self.verifier_result = result
        reward = result.reward  # None unless test.sh exited 0 (require_exit_zero)
        return 0.0 if reward is None else reward

    def episode_info(self) -> TerminalGenEpisodeInfo:
        # Harbor's own dict, with the task's card added (a cast, not a copy: the same object).
        info = cast(TerminalGenEpisodeInfo, super().episode_info())
        if self.task is not None:
            spec = make_spec(self.task["family"], int(self.task["seed"]))
            info.update(
                {
                    "family": spec.family,
                    "difficulty": spec.difficulty,
                    "category": spec.category.value,
                }
            )
        return info

    def close(self) -> None:
        super().close()
        shutil.rmtree(self._scratch, ignore_errors=True)  # rewritten if the env is reused
