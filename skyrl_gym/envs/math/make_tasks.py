"""Regenerate `tasks.jsonl`: multi-step arithmetic word problems with exact integer answers.

Run `python -m skyrl_gym.envs.math.make_tasks`. Deterministic (fixed seed), so the committed
file is reproducible. Each row keeps the `expression` that solves it, for oracle policies.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # run as a script: the SDK is not imported to run it
    from skyrl_gym.tasks import TaskRow

TEMPLATES = [
    (
        "A farmer plants {a} rows of {b} apple trees and later sells {c} trees. How many trees does he have left?",
        "{a} * {b} - {c}",
    ),
    (
        "A library has {a} shelves with {b} books each. It receives {c} more books. How many books does it have now?",
        "{a} * {b} + {c}",
    ),
    (
        "{a} students share {b} boxes of {c} pencils equally. How many pencils does each student get?",
        "{b} * {c} // {a}",
    ),
    (
        "A train travels {a} km per hour for {b} hours, then {c} km more. How far does it travel in total?",
        "{a} * {b} + {c}",
    ),
    (
        "A baker makes {a} trays of {b} cookies and packs them into bags of {c}. How many full bags does she fill?",
        "{a} * {b} // {c}",
    ),
    (
        "A shop sells {a} shirts at {b} dollars and {c} hats at {d} dollars. How many dollars does it take in?",
        "{a} * {b} + {c} * {d}",
    ),
    (
        "A tank holds {a} liters. {b} liters leak out each day for {c} days. How many liters remain?",
        "{a} - {b} * {c}",
    ),
    (
        "A club of {a} members each pays {b} dollars; the party costs {c} dollars. How many dollars are left over?",
        "{a} * {b} - {c}",
    ),
]


def make_tasks(count: int = 64, seed: int = 7) -> list[TaskRow]:
    """`count` math rows `{task_id, question, answer, expression}` drawn from `seed`."""
    rng = random.Random(seed)
    rows: list[TaskRow] = []
    for i in range(count):
        question, expression = TEMPLATES[i % len(TEMPLATES)]
        while True:
            values = {k: rng.randint(2, 60) for k in "abcd"}
            values["c"] = rng.randint(2, 12) if "//" in expression else values["c"]
            if "- {b} * {c}" in expression:
                values["a"] = rng.randint(400, 900)
            expr = expression.format(**values)
            result = eval(expr)  # trusted: our own template, not model output
            exact = eval(expr.replace("//", "/"))  # divisions must come out even
            if result > 0 and exact == result:
                break
        rows.append(
            {
                "task_id": f"math-{i:03d}",
                "question": question.format(**values),
                "answer": str(result),
                "expression": expr,
            }
        )
    return rows


if __name__ == "__main__":
    out = Path(__file__).with_name("tasks.jsonl")
    with out.open("w") as f:
        for row in make_tasks():
            f.write(json.dumps(row) + "\n")
    print(f"wrote {out}")
