"""Token budgets of session keys: a command agent's key opens its session for so many tokens.

`SessionKeys.issue(session, token_budget=...)` (default `ServeConfig.session_token_budget`,
200,000) gives the key a `TokenBudget`. What counts: the prompt tokens a request adds to the
conversation (those after the longest prefix it shares with the session's previous request's
prompt and reply, so a multi-turn episode that sends its history back pays for each token
once, and 200k bounds the whole episode's length; once per request, whatever its `n`), plus
every token generated for it (all `n` choices). A request is admitted only if the tokens it
could take, `new prompt tokens + n x max_tokens`, fit in what is left after the tokens used
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
    last: tuple[int, ...] = ()
    """The previous request's prompt and reply (choice 0): what a new prompt may repeat."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def new_tokens(self, prompt: tuple[int, ...]) -> int:
        """Tokens of `prompt` after its longest common prefix with `last`."""
        last = self.last
        shared = 0
        for a, b in zip(prompt, last, strict=False):
            if a != b:
                break
            shared += 1
        return len(prompt) - shared

    def reserve(self, session: str, prompt: tuple[int, ...], n: int, max_tokens: int) -> Ticket:
        """Hold the request's worst case (its new prompt tokens and `n x max_tokens`);
        `BudgetExceeded` if it does not fit."""
        with self._lock:
            fresh = self.new_tokens(prompt)
            cost = fresh + n * max_tokens
            committed = self.used + self.reserved
            if committed + cost > self.limit:
                raise BudgetExceeded(session, self.limit, committed, cost)
            self.reserved += cost
        return Ticket(self, cost, fresh, prompt)


@dataclass
class Ticket:
    """A request's reservation: `settle` once it ends (idempotent)."""

    budget: TokenBudget | None
    """Whose tokens (None: the session has no budget)."""
    cost: int
    """Tokens reserved."""
    prompt_tokens: int = 0
    """The prompt tokens it is charged for (those new to the session)."""
    prompt: tuple[int, ...] = ()
    """Its prompt ids."""
    generated: int = 0
    """Tokens generated so far, all choices (counted as they come)."""
    reply: tuple[int, ...] = ()
    """Choice 0's ids once known: with `prompt`, what the session's next request may repeat."""
    settled: bool = False
    """Whether `settle` ran."""

    def settle(self, *, whole: bool = False) -> None:
        """Release the reservation and charge what the request used (`whole`: the whole
        reservation, for a client that hung up); idempotent."""
        if self.settled:
            return
        self.settled = True
        if self.budget is None:
            return
        charge = self.cost if whole else min(self.cost, self.prompt_tokens + self.generated)
        with self.budget._lock:
            self.budget.reserved -= self.cost
            self.budget.used += charge
            if not whole:
                self.budget.last = (*self.prompt, *self.reply)
