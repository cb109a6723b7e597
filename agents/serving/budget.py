"""Token budgets of session keys: a command agent's key opens its session for so many tokens.

`SessionKeys.issue(session, token_budget=...)` (default `ServeConfig.session_token_budget`,
200,000) gives the key a `TokenBudget`. What counts: each request's prompt tokens (once per
request, whatever its `n`) plus every token generated for it. A request is admitted only if
the tokens it could take, `prompt + n x max_tokens`, fit in what is left after the tokens used
and those reserved by the session's requests in flight; else 429 with OpenAI's error body
(`code: session_token_budget_exceeded`), so the SDK raises `RateLimitError`. When a request
ends its reservation becomes what it used; a request whose client disconnected is charged its
whole reservation (hanging up and retrying is no way around the budget). The budget never
resets for the key; issuing a new key for the session starts a new one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

DEFAULT_SESSION_TOKEN_BUDGET = 200_000
"""Tokens (prompt + generated) a session key opens by default (`--session-token-budget`)."""


class BudgetExceeded(Exception):
    """The request does not fit in what is left of its session's token budget."""

    def __init__(self, session: str, budget: int, committed: int, cost: int):
        super().__init__(
            f"session {session!r} has used or reserved {committed} of its {budget}-token budget "
            f"(prompt + generated tokens); this request could take {cost} more "
            "(prompt + n x max_tokens): ask for fewer tokens, or a new session"
        )


@dataclass
class TokenBudget:
    """One key's budget (thread-safe)."""

    limit: int
    """Tokens the key opens in all."""
    used: int = 0
    """Tokens of the session's finished requests."""
    reserved: int = 0
    """Worst-case tokens of its requests in flight."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def reserve(self, session: str, cost: int) -> Ticket:
        """Hold `cost` tokens for a request; `BudgetExceeded` if they do not fit."""
        with self._lock:
            committed = self.used + self.reserved
            if committed + cost > self.limit:
                raise BudgetExceeded(session, self.limit, committed, cost)
            self.reserved += cost
        return Ticket(self, cost)


@dataclass
class Ticket:
    """A request's reservation: `settle` once it ends (idempotent)."""

    budget: TokenBudget | None
    """Whose tokens (None: the session has no budget)."""
    cost: int
    """Tokens reserved."""
    generated: int = 0
    """Tokens generated so far (counted as they come)."""
    settled: bool = False

    def settle(self, charge: int) -> None:
        """Release the reservation and charge `charge` tokens (at most the reservation)."""
        if self.settled:
            return
        self.settled = True
        if self.budget is None:
            return
        with self.budget._lock:
            self.budget.reserved -= self.cost
            self.budget.used += min(charge, self.cost)
