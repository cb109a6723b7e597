"""`lookup-chat`: look a price up with a tool, then answer it (a two-turn tool-use task in
plain English, sized for a 135M instruct model).

There is no system prompt: the opening is one worked example (`EXAMPLE`: a question, the
call `lookup(salt)`, the tool's reply `lookup(salt): price 17, stock 5`, the answer
`ANSWER: 17`), then the question `What is the price of apple?`. Prices are random two-digit
numbers, so the only way to the right answer is to call the tool and read its reply; the
reply also carries a stock count, a number the model must not answer.

Per reply, the first of these found wins:
- `lookup(item)`: the tool replies `lookup(apple): price 42, stock 7` (an unknown item gets
  an error naming the known one);
- `ANSWER: n`: the episode ends. Reward 1.0 when n is the price, `tool_reward` for a wrong
  number after a lookup (credit for using the tool and answering in form), else 0;
- neither: a `user` message restating both formats (a parse error); the model may try again.

SmolLM2-135M-Instruct (temperature 1, 12 tokens a turn, 3 turns) succeeds in 44% of 32
episodes from the start. It fails by chatting instead of calling the tool, by answering in
another form, or by answering another number (the example's 17, say), so RL has a signal
from the first step and room to climb; see `trainer/demos/lookup.py`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import ClassVar

from skyrl_gym.core import Messages, ResetNeeded, StepReturn, TaskEnv, coerce_action
from skyrl_gym.step_info import StepInfo
from skyrl_gym.tasks import TaskRow
from skyrl_sdk.tools.calls import ParseError, ParseErrorKind, ToolCall
from skyrl_sdk.tools.formats import CallPattern, PatternFormat

ENV_ID = "lookup-chat"
ITEMS = (
    "apple",
    "banana",
    "bread",
    "butter",
    "cheese",
    "coffee",
    "eggs",
    "honey",
    "jam",
    "milk",
    "orange",
    "pasta",
    "rice",
    "sugar",
    "tea",
    "tomato",
)
HELDOUT_ITEMS = (
    "carrot",
    "cocoa",
    "flour",
    "garlic",
    "grapes",
    "lemon",
    "oats",
    "onion",
    "peach",
    "pear",
    "pepper",
    "potato",
    "salmon",
    "tuna",
    "walnut",
    "yogurt",
)
"""Items of the `heldout` split: none is in `ITEMS` or the worked example, so a run that
trains on the `train` split never sees them (nor their prices)."""
SPLITS = ("train", "heldout")
HELDOUT_SEED_OFFSET = 1_000_003
"""Added to the seed of the `heldout` split's prices (the `train` split's stay as they were)."""
EXAMPLE: Messages = [
    {"role": "user", "content": "What is the price of salt?"},
    {"role": "assistant", "content": "lookup(salt)"},
    {"role": "user", "content": "lookup(salt): price 17, stock 5"},
    {"role": "assistant", "content": "ANSWER: 17"},
]
"""The worked example every episode opens with (the only place the formats are shown)."""
REMINDER = "Reply with only lookup(ITEM) or ANSWER: PRICE"

# Bounded repetitions: linear time on hostile (megabyte) replies.
FORMAT = PatternFormat(
    {
        "lookup": CallPattern(
            re.compile(
                r"lookup\s{0,3}\(\s{0,3}[\"']?([A-Za-z ]{0,40}?)[\"']?\s{0,3}\)", re.IGNORECASE
            ),
            "item",
            "lookup({item})",
        ),
        "answer": CallPattern(
            re.compile(r"ANSWER\s{0,3}:\s{0,3}\$?\s{0,3}(\d{1,9})(?!\d)", re.IGNORECASE),
            "price",
            "ANSWER: {price}",
        ),
    }
)
"""The env's two calls; the earliest in a reply wins."""


def make_tasks(n: int = len(ITEMS), seed: int = 0, split: str = "train") -> list[TaskRow]:
    """`n` task rows `{task_id, item, price, stock}` of `split` (`train`: `ITEMS`,
    `heldout`: `HELDOUT_ITEMS`): items in turn, prices uniform in 10..99."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    heldout = split == "heldout"
    items = HELDOUT_ITEMS if heldout else ITEMS
    rng = random.Random(seed + HELDOUT_SEED_OFFSET if heldout else seed)
    prefix = "lookup-chat-heldout" if heldout else "lookup-chat"
    return [
        {
            "task_id": f"{prefix}-{i}",
            "item": items[i % len(items)],
            "price": rng.randint(10, 99),
            "stock": rng.randint(2, 30),
        }
        for i in range(n)
    ]


class LookupChatEnv(TaskEnv):
    """Call `lookup(item)`, read the price, reply `ANSWER: price`."""

    required_fields: ClassVar[tuple[str, ...]] = ("item", "price")
    inline_async: ClassVar[bool] = True  # pure Python, never blocks

    def __init__(
        self,
        tasks: Sequence[TaskRow] | None = None,
        *,
        num_tasks: int = len(ITEMS),
        tool_reward: float = 0.1,
        seed: int = 0,
        split: str = "train",
    ):
        """`tasks`, or `num_tasks` rows of `split` made from `seed` (`make_tasks`)."""
        super().__init__(list(tasks) if tasks is not None else make_tasks(num_tasks, seed, split))
        if not 0.0 <= tool_reward < 1.0:
            raise ValueError("tool_reward must be in [0, 1)")
        self.tool_reward = tool_reward
        self.looked_up = False

    def start(self, task: TaskRow) -> Messages:
        self.looked_up = False
        return [*EXAMPLE, {"role": "user", "content": f"What is the price of {task['item']}?"}]

    def step(self, action: str) -> StepReturn:
        if self.task is None:
            raise ResetNeeded("call reset() before step()")
        parsed = FORMAT.parse(coerce_action(action))
        call = parsed.tool_calls[0] if parsed.tool_calls else None
        if call is not None and call.name == "lookup":
            item = call.arguments["item"].strip().lower()
            # `correct` stays False until the answer: an episode cut by the turn limit failed.
            info = StepInfo((ToolCall("lookup", {"item": item}),), correct=False).write()
            if item == self.task["item"]:
                self.looked_up = True
                content = (
                    f"lookup({item}): price {self.task['price']}, stock {self.task.get('stock', 0)}"
                )
            else:
                content = f"lookup({item}): unknown item. Known: {self.task['item']}"
            return [{"role": "user", "content": content}], 0.0, False, False, info
        if call is None:
            error = ParseError(ParseErrorKind.NO_ACTION, REMINDER)
            info = StepInfo(parse_error=error, correct=False).write()
            return [{"role": "user", "content": REMINDER}], 0.0, False, False, info
        value = int(call.arguments["price"])
        correct = value == int(self.task["price"])
        reward = 1.0 if correct else (self.tool_reward if self.looked_up else 0.0)
        metrics = {"answer": value, "looked_up": self.looked_up}
        info = StepInfo(correct=correct, episode=metrics).write()
        return [], reward, True, False, info
