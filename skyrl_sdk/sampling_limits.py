"""Caps on what one sampling request may ask for, shared by `skyrl serve` and the Tinker server.

Every stop string is looked for, and every stop token id compared, at every sampled token of
every row, so a request's stop lists cost its whole batch: 3.5M `stop_token_ids` slowed a
serve batch 6.5x, and the Tinker server took 200k stop strings (issue 23). Both servers
validate sampling parameters in one place per server (`skyrl serve`: the request models'
validators and `Server.sampling`, which every route's sampling goes through; Tinker: the
`SamplingParamsIn` / `SampleRequest` wire models every sampling route parses), with the
functions here, so an endpoint added later gets the same limits.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_STOP_STRINGS = 16
"""Most stop strings in one request (`skyrl serve` keeps OpenAI's 4)."""
MAX_STOP_STRING_CHARS = 256
"""Longest stop string (each sampled token decodes a window this long)."""
MAX_STOP_TOKEN_IDS = 256
"""Most stop token ids in one request."""
MAX_SAMPLED_TOKENS = 65_536
"""Most tokens one Tinker sampling request may ask for: `num_samples x max_tokens`."""


def stop_problem(
    strings: Sequence[str], token_ids: Sequence[int], *, max_strings: int = MAX_STOP_STRINGS
) -> str | None:
    """Why these stop lists are refused (one line), or None when they are within the caps."""
    if len(strings) > max_strings:
        return f"at most {max_strings} stop strings, got {len(strings)}"
    longest = max((len(s) for s in strings), default=0)
    if longest > MAX_STOP_STRING_CHARS:
        return f"stop strings may be at most {MAX_STOP_STRING_CHARS} characters, got {longest}"
    if len(token_ids) > MAX_STOP_TOKEN_IDS:
        return f"at most {MAX_STOP_TOKEN_IDS} stop token ids, got {len(token_ids)}"
    return None


def sampled_tokens_problem(num_samples: int, max_tokens: int) -> str | None:
    """Why `num_samples x max_tokens` is refused, or None when it is within the cap."""
    total = num_samples * max_tokens
    if total > MAX_SAMPLED_TOKENS:
        return (
            f"num_samples x max_tokens = {num_samples} x {max_tokens} = {total} is over the "
            f"server's cap of {MAX_SAMPLED_TOKENS} tokens per request; split it into "
            "several requests"
        )
    return None
