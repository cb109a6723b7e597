"""`lookup`: a small multi-turn tool-use env that a tiny model can learn on CPU in minutes.

The user asks for the value stored under a key (`find c`). The model must first call the
`lookup` tool (a reply containing the word `lookup`); the tool answers `value 3`; then the model
must answer with that digit. Answering before looking up ends the episode with no reward.

Rewards come at the answer: 1.0 for the right digit after a lookup, `tool_reward` for a wrong
digit after a lookup (credit for using the tool and answering in form), 0 for answering
without a lookup or never answering. Replies with neither a lookup nor a digit get an `error`
observation (and count as parse errors), so the model can recover on its next turn.

Everything here is word-level on purpose: the trainer's `lookup_tokenizer`
(`skyrl_sdk.trainer.models`, built from `SPECIAL`, `WORDS` and `WORD_CHAT_TEMPLATE`) gives every
word of the env one token, so a randomly initialised model sometimes succeeds by chance and RL
has a signal from the first step (`skyrl demo --model tiny`). The same env works with any real
tokenizer.

A built-in env (registered in `skyrl_gym.envs`); it lived in `skyrl_sdk.trainer.lookup_env`
until issue 26, which stays as a deprecated alias for one release.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar

from skyrl_gym.core import Messages, ResetNeeded, StepReturn, TaskEnv, coerce_action
from skyrl_gym.tasks import TaskRow

ENV_ID = "lookup"
KEYS = ("a", "b", "c", "d")
DIGITS = ("0", "1", "2", "3")
TOOL_WORD = "lookup"
# The tokenizer's vocabulary: its special tokens, then every word the env or its tasks use.
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>")
WORDS = ("user", "assistant", "tool", "find", TOOL_WORD, "value", "error", *KEYS, *DIGITS)

WORD_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)
"""ChatML without newlines: every piece is a whitespace-separated word or a special token."""


def make_tasks(n: int = 16, seed: int = 0) -> list[TaskRow]:
    """`n` task rows `{task_id, key, value}`.

    Every digit is the value equally often and no key determines its value, so guessing one
    digit scores a quarter at best: only reading the tool's answer gets to the maximum.
    """
    rng = random.Random(seed)
    values = [DIGITS[i % len(DIGITS)] for i in range(n)]
    rng.shuffle(values)
    return [
        {"task_id": f"lookup-{i}", "key": KEYS[i % len(KEYS)], "value": values[i]} for i in range(n)
    ]


class LookupEnv(TaskEnv):
    """Call `lookup`, read the value it returns, answer it."""

    required_fields: ClassVar[tuple[str, ...]] = ("key", "value")
    inline_async: ClassVar[bool] = True  # pure Python, never blocks

    def __init__(
        self,
        tasks: Sequence[TaskRow] | None = None,
        *,
        num_tasks: int = 16,
        tool_reward: float = 0.2,
        repeat: int = 1,
        seed: int = 0,
    ):
        super().__init__(list(tasks) if tasks is not None else make_tasks(num_tasks, seed))
        if not 0.0 <= tool_reward < 1.0:
            raise ValueError("tool_reward must be in [0, 1)")
        self.tool_reward = tool_reward
        self.repeat = repeat
        self.looked_up = False

    def start(self, task: TaskRow) -> Messages:
        self.looked_up = False
        return [{"role": "user", "content": f"find {task['key']}"}]

    def step(self, action: str) -> StepReturn:
        if self.task is None:
            raise ResetNeeded("call reset() before step()")
        words = coerce_action(action).split()
        # `correct` is False until the answer: an episode cut by the turn limit is a failure.
        info: dict[str, Any] = {
            "tool_calls": [],
            "parse_error": None,
            "episode": {"correct": False},
        }
        if TOOL_WORD in words:
            info["tool_calls"] = [{"name": TOOL_WORD, "arguments": {"key": self.task["key"]}}]
            self.looked_up = True
            # `repeat` > 1 makes the value dominate what an untrained model attends to.
            content = " ".join(["value", *[str(self.task["value"])] * self.repeat])
            return [{"role": "tool", "content": content}], 0.0, False, False, info
        answer = next((w for w in words if w in DIGITS), None)
        if answer is None:
            info["parse_error"] = {"kind": "no_action", "message": "reply with lookup or a digit"}
            return [{"role": "user", "content": "error"}], 0.0, False, False, info
        correct = self.looked_up and answer == str(self.task["value"])
        reward = 1.0 if correct else (self.tool_reward if self.looked_up else 0.0)
        info["episode"] = {"answer": answer, "correct": correct}
        return [], reward, True, False, info
