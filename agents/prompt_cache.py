"""What the agent loop remembers across episodes, so a repeated one costs less.

- `cached_prompt`: the opening prompt of an episode, rendered and tokenized once per renderer
  and opening (`PromptMemo`): GRPO groups play a task several times, evaluations repeat tasks.
- `episode_sampling`: an episode's `SamplingParams` (the limits' `max_tokens`, the renderer's
  stop tokens added), built once per combination of the few objects a run reuses.

Both give exactly what the uncached call would; they only skip repeating it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from skyrl_sdk.agents.chat import ChatRenderer, RenderedPrompt
from skyrl_sdk.agents.policy import SamplingParams
from skyrl_sdk.tools.messages import Message


class PromptMemo:
    """Recently rendered prompts of one renderer, by the opening messages' contents.

    A GRPO group plays the same task several times, and evaluations repeat tasks, so the
    same opening is rendered again and again; this keeps the `RenderedPrompt` (holding
    copies of the messages, so an env that mutates what it returned changes nothing here).
    Only openings whose fields are all strings are kept (`1`, `1.0` and `True` are equal
    keys but may render differently). Bounded by `max_ids` prompt ids in all (oldest
    first out); thread-safe. Not used when the renderer verifies every render
    (`verify_incremental`)."""

    __slots__ = ("_entries", "_ids", "_lock", "max_ids")

    def __init__(self, max_ids: int = 1_000_000):
        self.max_ids = max_ids
        self._entries: dict[tuple[Any, ...], RenderedPrompt] = {}
        self._ids = 0
        self._lock = threading.Lock()

    def get(self, renderer: ChatRenderer, messages: Sequence[Message]) -> RenderedPrompt:
        key = _string_items(messages)
        if key is None:
            return renderer.prompt(messages)
        prompt = self._entries.get(key)
        if prompt is not None:
            return prompt
        prompt = renderer.prompt(messages)
        n = len(prompt.token_ids)
        if n <= self.max_ids // 16:
            kept = RenderedPrompt(
                tuple([dict(m) for m in messages]), prompt.text, prompt.token_ids, prompt.shape
            )
            with self._lock:
                if key not in self._entries:
                    self._entries[key] = kept
                    self._ids += n
                    while self._ids > self.max_ids:
                        oldest = next(iter(self._entries))
                        self._ids -= len(self._entries.pop(oldest).token_ids)
        return prompt


def _string_items(
    messages: Sequence[Message],
) -> tuple[tuple[str, str] | tuple[tuple[str, str], ...], ...] | None:
    """The messages' fields as a hashable key, or None unless every field is a string.

    The usual `{"role": ..., "content": ...}` message (those two keys, in that order) is
    keyed by the pair `(role, content)` (two strings; cheaper to build and hash); any other
    by its `(name, value)` items in order, which are pairs themselves, so the two kinds of
    key never collide."""
    key: list[tuple[str, str] | tuple[tuple[str, str], ...]] = []
    for m in messages:
        if type(m) is not dict:
            return None
        if len(m) == 2:
            (first, role), (second, content) = m.items()
            if (
                first == "role"
                and second == "content"
                and type(role) is str
                and type(content) is str
            ):
                key.append((role, content))
                continue
        items = tuple(m.items())
        for name, value in items:
            if type(value) is not str or type(name) is not str:
                return None
        key.append(items)
    return tuple(key)


_PROMPTS: weakref.WeakKeyDictionary[ChatRenderer, PromptMemo] = weakref.WeakKeyDictionary()


def cached_prompt(renderer: ChatRenderer, messages: Sequence[Message]) -> RenderedPrompt:
    """`renderer.prompt(messages)`, remembered per renderer (see `PromptMemo`)."""
    if renderer.verify_incremental:
        return renderer.prompt(messages)
    last = _last
    if last is not None and last[0]() is renderer:
        return last[1].get(renderer, messages)
    return _memo_of(renderer).get(renderer, messages)


_last: tuple[weakref.ReferenceType[ChatRenderer], PromptMemo] | None = None
"""The memo of the renderer `cached_prompt` served last: a run uses one renderer, and
calling a weak reference is cheaper than `WeakKeyDictionary.get` (Python code that builds a
new weak reference per call). Cleared when that renderer is collected."""


def _memo_of(renderer: ChatRenderer) -> PromptMemo:
    global _last
    memo = _PROMPTS.get(renderer)
    if memo is None:
        memo = _PROMPTS.setdefault(renderer, PromptMemo())
    _last = (weakref.ref(renderer, _forget), memo)
    return memo


def _forget(ref: weakref.ReferenceType[ChatRenderer]) -> None:
    global _last
    last = _last
    if last is not None and last[0] is ref:
        _last = None


DEFAULT_SAMPLING = SamplingParams()
"""The sampling of an episode given none (`rollout`'s default)."""


_SAMPLINGS: dict[tuple[int, int, int], tuple[SamplingParams, tuple[int, ...], SamplingParams]] = {}


def episode_sampling(
    sampling: SamplingParams, max_tokens: int, stop_token_ids: tuple[int, ...]
) -> SamplingParams:
    """The episode's sampling: `max_tokens` from the limits, the renderer's stop tokens
    added. Cached by identity (the same few objects recur for every episode of a run)."""
    key = (id(sampling), max_tokens, id(stop_token_ids))
    cached = _SAMPLINGS.get(key)
    if cached is not None and cached[0] is sampling and cached[1] is stop_token_ids:
        return cached[2]
    result = replace(sampling, max_tokens=max_tokens).with_stop_tokens(stop_token_ids)
    if len(_SAMPLINGS) >= 64:
        _SAMPLINGS.clear()
    _SAMPLINGS[key] = (sampling, stop_token_ids, result)  # holds both: ids are not reused
    return result
