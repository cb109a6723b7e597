"""Incremental rendering: cached templates and piecewise tokenization equal Jinja and the
tokenizer exactly, fall back when they cannot, and stay bounded."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import skyrl_gym
from skyrl_gym.envs.math.env import bundled_tasks
from skyrl_sdk.agents.chat import ChatRenderer, TemplateError
from skyrl_sdk.agents.incremental import FULL_RENDER, SegmentEncoder, TemplateCache, shape_of
from skyrl_sdk.agents.rollout import rollout
from skyrl_sdk.agents.scripted import ScriptedPolicy
from skyrl_sdk.agents.trajectory import StopReason
from tests.agents.conftest import make_renderer
from tests.agents.templates import STYLES, TemplateStyle


def verifying(renderer: ChatRenderer) -> ChatRenderer:
    """A renderer on the same tokenizer that checks every cached render against Jinja."""
    return ChatRenderer(renderer.tokenizer, verify_incremental=True)


@pytest.mark.parametrize("tool_format", ["xml", "hermes"])
def test_episodes_use_the_cache_and_match_jinja_in_every_style(
    styled_renderer: ChatRenderer, tool_format: str
) -> None:
    renderer = verifying(styled_renderer)
    assert renderer.segments.enabled
    for task in bundled_tasks()[:6]:
        actions = [
            f"<calculator>{task['expression']}</calculator>",
            f"<answer>{task['answer']}</answer>",
        ]
        if tool_format == "hermes":
            calls = [("calculator", "expression", task["expression"])]
            calls.append(("answer", "answer", task["answer"]))
            actions = [
                f'<tool_call>{{"name": "{n}", "arguments": {{"{a}": "{v}"}}}}</tool_call>'
                for n, a, v in calls
            ]
        env = skyrl_gym.make("math", tool_format=tool_format)
        t = asyncio.run(rollout(env, ScriptedPolicy(actions, renderer=renderer), task))
        env.close()
        assert t.stop_reason is StopReason.DONE, t.error
    # One Jinja render per shape (the prompt's and the delta's), cached after that.
    assert renderer.templates.misses == 2 and renderer.templates.hits == 10


contents = st.lists(
    st.sampled_from([*"ab <>/{}%#'\"\n\t é", "<think>", "<tool_call>", "  "]), max_size=20
).map("".join)


@given(system=contents, user=contents, observations=st.lists(contents, min_size=1, max_size=3))
@settings(max_examples=60, deadline=None)
def test_cached_renders_equal_jinja_for_any_content(bpe_core, system, user, observations):
    for style in STYLES:
        renderer = _renderer(bpe_core, style)  # verify_incremental raises on any difference
        opening = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        prompt = renderer.prompt(opening)
        tool = [{"role": "tool", "name": "calc", "content": c} for c in observations]
        user_obs = [{"role": "user", "content": c} for c in observations[:1]]
        for observation in (tool, user_obs, tool):
            ids = renderer.turn_delta(prompt, (), observation)
            assert ids == renderer._encode_whole(
                renderer._delta_text(prompt.text, [*opening, _assistant(), *observation])
            )


_RENDERERS: dict[str, ChatRenderer] = {}


def _renderer(core, style: TemplateStyle) -> ChatRenderer:
    if style.name not in _RENDERERS:
        _RENDERERS[style.name] = verifying(make_renderer(core, style))
    return _RENDERERS[style.name]


def _assistant() -> dict:
    from skyrl_sdk.agents.chat import _PLACEHOLDER

    return {"role": "assistant", "content": _PLACEHOLDER}


def test_a_template_that_transforms_content_is_rendered_with_jinja(bpe_core) -> None:
    shouting = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | upper }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    base = STYLES[0]
    style = TemplateStyle("upper", shouting, *_rest(base))
    renderer = verifying(make_renderer(bpe_core, style))
    opening = [{"role": "user", "content": "hello"}]
    prompt = renderer.prompt(opening)
    assert prompt.text == "<|im_start|>user\nHELLO<|im_end|>\n<|im_start|>assistant\n"
    assert renderer.templates._entries[("prompt", shape_of(opening))] is FULL_RENDER
    delta = renderer.decode(renderer.turn_delta(prompt, (), [{"role": "user", "content": "x"}]))
    assert "X" in delta and renderer.templates.hits == 0


def test_a_template_that_branches_on_content_falls_back(bpe_core) -> None:
    """Content the probes cover (a `<think>` block) changes the text: no cached template."""
    branching = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% if '<think>' in m['content'] %}(thinking){% endif %}{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    style = TemplateStyle("branching", branching, *_rest(STYLES[0]))
    renderer = verifying(make_renderer(bpe_core, style))
    opening = [{"role": "user", "content": "a <think>b</think>"}]
    assert "(thinking)" in renderer.prompt(opening).text
    assert renderer.templates._entries[("prompt", shape_of(opening))] is FULL_RENDER


def test_non_append_only_templates_still_raise(bpe_core) -> None:
    moving_system = (
        "{% for m in messages %}{% if m['role'] == 'user' and loop.last %}"
        "<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n{% endif %}"
        "{% if m['role'] != 'system' %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    renderer = make_renderer(bpe_core, TemplateStyle("moving", moving_system, *_rest(STYLES[0])))
    prompt = renderer.prompt([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    for _ in range(2):  # also once the shape has been seen
        with pytest.raises(TemplateError, match="append-only"):
            renderer.turn_delta(prompt, (), [{"role": "user", "content": "x"}])


def _rest(style: TemplateStyle) -> tuple:
    return (style.special_tokens, style.eos_token, style.bos_token, style.pad_token)


def plain(text: str) -> list[int]:
    """A character-level tokenizer with one added token, `<s>` = 1000."""
    out: list[int] = []
    for k, part in enumerate(text.split("<s>")):
        if k:
            out.append(1000)
        out.extend(map(ord, part))
    return out


def test_piecewise_encoding_is_refused_when_the_tokenizer_strips_around_specials() -> None:
    specials = {"<s>": 1000}

    def stripping(text: str) -> list[int]:  # like an added token with lstrip=True
        return plain(text.replace(" <s>", "<s>"))

    assert SegmentEncoder(plain, specials).enabled
    refused = SegmentEncoder(stripping, specials)
    assert not refused.enabled and refused.encode("a <s>") == tuple(stripping("a <s>"))


def test_piece_cache_is_bounded_by_characters() -> None:
    encoder = SegmentEncoder(plain, {"<s>": 1000}, max_chars=100, max_piece_chars=30)
    assert encoder.enabled
    for i in range(50):
        text = f"<s>piece number {i:04d}<s>"
        assert encoder.encode(text) == tuple(plain(text))
    assert encoder._chars <= 100 and len(encoder._cache) <= 100 // len("piece number 0000")
    assert encoder.encode("<s>" + "x" * 40) == (1000, *[ord("x")] * 40)
    assert "x" * 40 not in encoder._cache


def test_template_cache_is_bounded_by_shapes() -> None:
    cache = TemplateCache(max_shapes=3)
    for n in range(1, 6):
        messages = [{"role": "user", "content": "c"}] * n
        cache.render(n, messages, lambda ms: "".join(m["content"] for m in ms))
    assert list(cache._entries) == [3, 4, 5]
