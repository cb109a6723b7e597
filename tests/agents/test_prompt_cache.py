"""The prompt memo: a remembered prompt is the one the renderer would give, copies what it
keeps, keeps only all-string openings, is bounded, and is off for a verifying renderer."""

from __future__ import annotations

from skyrl_sdk.agents import prompt_cache
from skyrl_sdk.agents.chat import ChatRenderer


def test_remembered_prompts_do_not_follow_mutations_of_the_messages(
    chatml_renderer: ChatRenderer,
) -> None:
    def opening() -> list[dict]:
        return [{"role": "system", "content": "s"}, {"role": "user", "content": "memo test"}]

    first_messages = opening()
    first = prompt_cache.cached_prompt(chatml_renderer, first_messages)
    first_messages[1]["content"] = "changed by the env after reset"
    again = prompt_cache.cached_prompt(chatml_renderer, opening())
    assert again.messages == tuple(opening())
    assert again.token_ids == first.token_ids == chatml_renderer.prompt(opening()).token_ids
    changed = prompt_cache.cached_prompt(chatml_renderer, first_messages)
    assert changed.token_ids == chatml_renderer.prompt(first_messages).token_ids != first.token_ids


def test_prompt_memo_keeps_only_all_string_openings(chatml_renderer: ChatRenderer) -> None:
    memo = prompt_cache.PromptMemo()
    for value in (1, True, ["a"]):
        messages = [{"role": "user", "content": "c", "extra": value}]
        memo.get(chatml_renderer, messages)
    assert memo._entries == {}
    memo.get(chatml_renderer, [{"role": "user", "content": "c"}])
    assert len(memo._entries) == 1


def test_prompt_memo_is_bounded_and_off_when_verifying(chatml_renderer: ChatRenderer) -> None:
    memo = prompt_cache.PromptMemo(max_ids=2000)
    for i in range(200):
        messages = [{"role": "user", "content": f"question number {i}"}]
        assert memo.get(chatml_renderer, messages) == chatml_renderer.prompt(messages)
        assert memo._ids <= 2000
    assert 0 < len(memo._entries) < 200
    verifying = ChatRenderer(chatml_renderer.tokenizer, verify_incremental=True)
    messages = [{"role": "user", "content": "x"}]
    assert prompt_cache.cached_prompt(verifying, messages) is not prompt_cache.cached_prompt(
        verifying, messages
    )
    assert verifying not in prompt_cache._PROMPTS


def test_prompt_memo_keys_role_content_pairs_apart_from_other_messages(
    chatml_renderer: ChatRenderer,
) -> None:
    memo = prompt_cache.PromptMemo()
    plain = [{"role": "user", "content": "c"}]
    named = [{"role": "user", "content": "c", "name": "n"}]
    reordered = [{"content": "c", "role": "user"}]
    assert memo.get(chatml_renderer, plain) == chatml_renderer.prompt(plain)
    assert memo.get(chatml_renderer, named).messages == tuple(named)
    assert memo.get(chatml_renderer, reordered).messages == tuple(reordered)
    assert len(memo._entries) == 3  # key order is part of the key (a template may iterate it)
    again = memo.get(chatml_renderer, [{"role": "user", "content": "c"}])
    assert again is memo._entries[(("user", "c"),)]
