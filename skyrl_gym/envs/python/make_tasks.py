"""Regenerate `tasks.jsonl`: each task's answer is what its reference solution prints.

Run `python -m skyrl_gym.envs.python.make_tasks`. The test suite runs every solution again,
in a sandbox, and checks it prints the stored answer.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

TASKS: list[tuple[str, str]] = [
    (
        "What is the sum of all primes below 10000?",
        "print(sum(n for n in range(2, 10000) if all(n % d for d in range(2, int(n**0.5) + 1))))",
    ),
    (
        "How many trailing zeros does 1000! have?",
        "import math\ns = str(math.factorial(1000))\nprint(len(s) - len(s.rstrip('0')))",
    ),
    (
        "What is the 50th Fibonacci number, with F(1) = F(2) = 1?",
        "a, b = 0, 1\nfor _ in range(50):\n    a, b = b, a + b\nprint(a)",
    ),
    ("What is the sum of the digits of 2**1000?", "print(sum(map(int, str(2**1000))))"),
    (
        "How many integers from 1 to 100000 are divisible by 3 or 5 but not by 15?",
        "print(sum(1 for n in range(1, 100001) if (n % 3 == 0 or n % 5 == 0) and n % 15))",
    ),
    (
        "What is the largest prime factor of 600851475143?",
        "n, f = 600851475143, 2\nwhile f * f <= n:\n    if n % f:\n        f += 1\n    else:\n        n //= f\nprint(n)",
    ),
    (
        "How many distinct values does a**b take for 2 <= a <= 30 and 2 <= b <= 30?",
        "print(len({a**b for a in range(2, 31) for b in range(2, 31)}))",
    ),
    (
        "What is the greatest common divisor of 1234567890 and 9876543210?",
        "import math\nprint(math.gcd(1234567890, 9876543210))",
    ),
    (
        "What is the smallest positive number evenly divisible by every integer from 1 to 25?",
        "import math\nfrom functools import reduce\nprint(reduce(lambda a, b: a * b // math.gcd(a, b), range(1, 26)))",
    ),
    (
        "How many palindromic numbers are there between 1 and 1000000 inclusive?",
        "print(sum(1 for n in range(1, 1000001) if str(n) == str(n)[::-1]))",
    ),
    (
        "What is the sum of the squares of the integers from 1 to 1000?",
        "print(sum(n * n for n in range(1, 1001)))",
    ),
    (
        "How many ways can you make 100 cents from coins of 1, 5, 10, 25 and 50 cents?",
        "ways = [1] + [0] * 100\nfor c in (1, 5, 10, 25, 50):\n    for v in range(c, 101):\n        ways[v] += ways[v - c]\nprint(ways[100])",
    ),
    (
        "How many letters 's' are in the word 'mississippi' repeated 37 times?",
        "print(('mississippi' * 37).count('s'))",
    ),
    ("What is 7 to the power 222, modulo 1000007?", "print(pow(7, 222, 1000007))"),
    (
        "How many Collatz steps does 27 take to reach 1?",
        "n, steps = 27, 0\nwhile n != 1:\n    n = n // 2 if n % 2 == 0 else 3 * n + 1\n    steps += 1\nprint(steps)",
    ),
    (
        "What is the number of divisors of 720720?",
        "print(sum(1 for d in range(1, 720721) if 720720 % d == 0))",
    ),
    (
        "How many 4-digit numbers have digits that are strictly increasing from left to right?",
        "print(sum(1 for n in range(1000, 10000) if list(str(n)) == sorted(set(str(n)))))",
    ),
    ("What is the binomial coefficient C(40, 20)?", "import math\nprint(math.comb(40, 20))"),
    (
        "What is the sum of all amicable numbers below 10000?",
        "N = 30000\nd = [0] * N\nfor i in range(1, N // 2):\n    for j in range(2 * i, N, i):\n        d[j] += i\nprint(sum(a for a in range(2, 10000) if d[a] != a and d[a] < N and d[d[a]] == a))",
    ),
    (
        "How many primes are there below one million?",
        "N = 10**6\ns = bytearray([1]) * N\ns[0] = s[1] = 0\nfor i in range(2, int(N**0.5) + 1):\n    if s[i]:\n        s[i*i::i] = bytearray(len(range(i*i, N, i)))\nprint(sum(s))",
    ),
]


def answer_of(solution: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(solution, {"__name__": "__main__"})
    return out.getvalue().strip()


def main() -> None:
    path = Path(__file__).with_name("tasks.jsonl")
    with path.open("w") as f:
        for i, (question, solution) in enumerate(TASKS):
            row = {
                "task_id": f"python-{i:03d}",
                "question": question,
                "answer": answer_of(solution),
                "solution": solution,
            }
            f.write(json.dumps(row) + "\n")
    print(f"wrote {len(TASKS)} tasks to {path}")


if __name__ == "__main__":
    main()
