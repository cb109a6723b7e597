"""`ScriptedPolicy`: replays given actions (tests, oracle baselines, `env play` transcripts)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.policy import (
    Completion,
    FinishReason,
    GenerationContext,
    PolicyError,
    SamplingParams,
    TokenChunk,
)

Action = str | Sequence[int]
"""A reply as text (tokenized canonically) or as exact token ids (any segmentation)."""

Script = Sequence[Action] | Mapping[str, Sequence[Action]] | Callable[[GenerationContext], Action]
"""The same actions for every task, actions per `task_id`, or a function of the context."""


@dataclass(frozen=True)
class Mistakes:
    """Seeded mistakes: a scripted policy that errs like a sampled one. An episode sampled
    with seed `s` plays `action` on every turn instead of its script when a hash of
    (`s`, task id) falls below the task's rate, so each trial of a task (a seed of its own)
    fails or not independently, and the same seed always makes the same mistakes. Without a
    sampling seed no mistake is made."""

    rate: float
    """Chance that an episode is a mistake (every task's)."""
    action: Action
    """What a mistaken episode replies on every turn."""
    per_task: Mapping[str, float] = field(default_factory=dict)
    """Rates of single tasks, overriding `rate`."""

    def strikes(self, seed: int | None, task_id: str) -> bool:
        """Whether the episode of `task_id` sampled with `seed` is a mistake."""
        if seed is None:
            return False
        digest = hashlib.sha256(f"{seed}:{task_id}".encode()).digest()
        draw = int.from_bytes(digest[:8], "big") / 2**64
        return draw < self.per_task.get(task_id, self.rate)


class ScriptedPolicy:
    """Replays a script. With a renderer it is token-native: text actions are tokenized,
    id actions are used as given, and the end-of-turn token is appended, like a model that
    stops. Its logprobs are 0.0: a deterministic policy gives its own action probability 1.
    """

    def __init__(
        self,
        script: Script,
        *,
        renderer: ChatRenderer | None = None,
        name: str = "scripted",
        delay_s: float = 0.0,
        policy_version: int = 0,
        token_delay_s: float = 0.0,
        mistakes: Mistakes | None = None,
    ):
        self.script = script
        self.mistakes = mistakes
        """Seeded mistakes (None: the script is always played)."""
        self._renderer = renderer
        self.name = name
        self.delay_s = delay_s
        """Seconds each generate call waits (simulates model latency)."""
        self.policy_version = policy_version
        self.token_delay_s = token_delay_s
        """Seconds between two streamed tokens (`generate_stream`; simulates decoding)."""
        self.calls = 0
        """Number of generate calls served (tests read it)."""
        self.active_streams = 0
        """Streams started and not yet finished or closed (tests check cancellation)."""
        self.streamed_tokens = 0
        """Tokens handed out by `generate_stream` so far."""
        self._replies: dict[str | tuple[int, ...], tuple[tuple[int, ...], str]] = {}
        """Scripted reply -> (ids, text), filled as replies are first played (`_reply`)."""

    @property
    def renderer(self) -> ChatRenderer | None:
        return self._renderer

    @classmethod
    def from_file(cls, path: str | Path, renderer: ChatRenderer | None = None) -> ScriptedPolicy:
        """Load a script from a JSON file.

        Accepted shapes: a list of actions (replayed in order: per episode in `skyrl eval`, per
        session in `skyrl serve`); an object of lists keyed by task id (eval) or session id
        (serve); or `{"actions": <either>, "delay_s": 0.0, "token_delay_s": 0.0}`. An action
        is a text (tokenized canonically) or a list of token ids (used exactly as given).
        The object may add seeded mistakes (`Mistakes`): `"mistakes": {"rate": 0.4,
        "action": "wrong", "per_task": {"t3": 0.9}}`.
        """
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if isinstance(data, list) or (
            isinstance(data, dict)
            and "actions" not in data
            and data
            and all(isinstance(v, list) for v in data.values())
        ):
            data = {"actions": data}
        if not isinstance(data, dict) or "actions" not in data:
            raise ValueError(
                f"{path}: expected a list of actions, an object of lists keyed by task or "
                "session id, or an object with an 'actions' field"
            )
        actions = data["actions"]
        if isinstance(actions, dict):
            actions = {str(k): v for k, v in actions.items()}
        _check_actions(path, actions)
        return cls(
            actions,
            renderer=renderer,
            name=f"scripted:{Path(path).name}",
            delay_s=float(data.get("delay_s", 0.0)),
            token_delay_s=float(data.get("token_delay_s", 0.0)),
            mistakes=_mistakes(path, data.get("mistakes")),
        )

    def action_for(self, context: GenerationContext | None) -> Action:
        """The scripted action for this turn; `PolicyError` when the script has none."""
        turn = context.turn if context is not None else self.calls
        if callable(self.script):
            if context is None:
                raise PolicyError("a callable script needs the generation context")
            return self.script(context)
        actions: Sequence[Action]
        if isinstance(self.script, Mapping):
            if context is None or context.task_id not in self.script:
                task = context.task_id if context else "?"
                raise PolicyError(f"the script has no actions for task {task!r}")
            actions = self.script[context.task_id]
        else:
            actions = self.script
        if turn >= len(actions):
            raise PolicyError(f"the script has {len(actions)} action(s); turn {turn} asked for")
        return actions[turn]

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> Completion:
        mistaken = self.mistakes is not None and context is not None
        if mistaken and self.mistakes.strikes(sampling.seed, context.task_id):
            action = self.mistakes.action
        else:
            action = self.action_for(context)
        self.calls += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        renderer = self._renderer
        if renderer is None:
            if not isinstance(action, str):
                raise PolicyError("token-id actions need a renderer (a tokenizer)")
            return Completion(
                (), None, action, FinishReason.STOP, self.policy_version, text_only=True
            )
        ids, text = self._reply(action, renderer)
        finish = FinishReason.STOP
        if len(ids) > sampling.max_tokens:
            ids, finish = ids[: sampling.max_tokens], FinishReason.LENGTH
            text = renderer.content_text(ids)
        return Completion(
            token_ids=ids,
            logprobs=(0.0,) * len(ids),
            text=text,
            finish_reason=finish,
            policy_version=self.policy_version,
        )

    def _reply(
        self, action: str | list[int], renderer: ChatRenderer
    ) -> tuple[tuple[int, ...], str]:
        """The ids of a scripted reply (ending with the end-of-turn token) and their text.

        Tokenized once per distinct reply: a script is a fixed, finite list, so the memo is
        bounded by the script's size, and replaying it costs no tokenizer work per turn."""
        key = action if isinstance(action, str) else tuple(action)
        if (known := self._replies.get(key)) is not None:
            return known
        ids = list(renderer.encode(action)) if isinstance(action, str) else list(action)
        if renderer.end_of_turn_id is not None and (not ids or ids[-1] != renderer.end_of_turn_id):
            ids.append(renderer.end_of_turn_id)
        reply = (tuple(ids), renderer.content_text(ids))
        self._replies[key] = reply
        return reply

    async def generate_stream(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> AsyncIterator[TokenChunk | Completion]:
        """The same completion as `generate`, one token per chunk (`token_delay_s` apart)."""
        completion = await self.generate(prompt_token_ids, sampling, context=context)
        self.active_streams += 1
        try:
            for k, token in enumerate(completion.token_ids):
                await asyncio.sleep(self.token_delay_s)  # 0: still a turn for others
                lp = None if completion.logprobs is None else (completion.logprobs[k],)
                self.streamed_tokens += 1
                yield TokenChunk((token,), lp)
            yield completion
        finally:
            self.active_streams -= 1

    async def aclose(self) -> None:
        return None


def _mistakes(path: str | Path, data: object) -> Mistakes | None:
    if data is None:
        return None
    if not isinstance(data, dict) or "action" not in data:
        raise ValueError(f"{path}: mistakes must be an object with an 'action' and a 'rate'")
    _check_actions(path, [data["action"]])
    per_task = data.get("per_task", {})
    if not isinstance(per_task, dict):
        raise ValueError(f"{path}: mistakes.per_task must map task ids to rates")
    return Mistakes(
        float(data.get("rate", 0.0)),
        data["action"],
        {str(k): float(v) for k, v in per_task.items()},
    )


def _check_actions(path: str | Path, actions: object) -> None:
    lists = actions.values() if isinstance(actions, dict) else [actions]
    for actions_list in lists:
        if not isinstance(actions_list, list):
            raise ValueError(f"{path}: actions must be lists")
        for k, action in enumerate(actions_list):
            ok = isinstance(action, str) or (
                isinstance(action, list)
                and all(isinstance(i, int) and not isinstance(i, bool) for i in action)
            )
            if not ok:
                raise ValueError(f"{path}: action {k} must be a text or a list of token ids")
