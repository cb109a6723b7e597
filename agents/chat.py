"""Chat rendering with append-only tokenization (token in, token out).

A multi-turn episode is one growing token sequence. The prompt is rendered once with the chat
template; after that, the sequence only ever grows by appending:

1. the ids the policy sampled, exactly as sampled (never decoded and re-encoded), then
2. the chat template's *delta* for what follows: the end-of-assistant glue the model did not
   produce itself, the observation messages, and the next generation prompt.

The delta is found by rendering a small probe conversation - the episode's opening messages,
an assistant placeholder, then the observation - and cutting the text after the placeholder.
Its size does not depend on how many turns came before, so appending stays O(observation)
per turn, and the trainer's ids equal the sampler's ids by construction. Neither the delta
nor the prompt is rendered with Jinja or tokenized whole in the common case: templates are
cached per conversation shape and ids per piece between special tokens, each checked
against the real render and tokenizer (`skyrl_sdk.agents.incremental`).

Why not re-render the whole conversation each turn: BPE is not a bijection (the same text has
many tokenizations; a model may sample a non-canonical one) and templates rewrite assistant
text (trimming whitespace, dropping reasoning), so re-tokenizing silently changes the tokens
the trainer computes log-probabilities for. `retokenize_conversation` is that broken path,
kept to demonstrate the failure in tests and as the cost baseline in benchmarks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from skyrl_sdk.agents.incremental import SegmentEncoder, Shape, TemplateCache, shape_of
from skyrl_sdk.tools.messages import Message

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# Rendered in the assistant slot of probe conversations. Plain letters: templates may trim
# or escape content, and this survives every template we know.
_PLACEHOLDER = "SKYRLASSISTANTPLACEHOLDER"


class TemplateError(ValueError):
    """The chat template cannot be rendered append-only for this conversation."""


@dataclass(frozen=True)
class RenderedPrompt:
    """The opening of an episode, rendered and tokenized once."""

    messages: tuple[Message, ...]
    """The messages that were rendered (the anchor of every later delta)."""
    text: str
    """The template's text, ending with the generation prompt."""
    token_ids: tuple[int, ...]
    """`text` tokenized; the first ids the policy sees."""
    shape: Shape | None = field(default=None, compare=False)
    """`shape_of(messages)`, kept so each turn's delta need not compute it again."""


class ChatRenderer:
    """Renders conversations for one tokenizer and chat template, append-only.

    Stateless apart from the tokenizer and its caches (thread-safe), so one renderer serves
    all concurrent episodes. `verify_incremental=True` also renders every prompt and delta
    with Jinja and tokenizes it whole, raising `TemplateError` on any difference from the
    cached path (for tests and for checking a new model's template).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        chat_template: str | None = None,
        *,
        extra_stop_token_ids: Sequence[int] = (),
        verify_incremental: bool = False,
    ):
        self.tokenizer = tokenizer
        self._backend = getattr(tokenizer, "backend_tokenizer", None) if tokenizer.is_fast else None
        self.verify_incremental = verify_incremental
        """Check every cached render and piecewise tokenization against the full one."""
        self.segments = SegmentEncoder(self._encode_whole, tokenizer.get_added_vocab())
        """Piecewise tokenization with a cache (see `skyrl_sdk.agents.incremental`)."""
        self.templates = TemplateCache()
        """Rendered templates per conversation shape (see `skyrl_sdk.agents.incremental`)."""
        self.chat_template = chat_template or getattr(tokenizer, "chat_template", None)
        if not self.chat_template:
            raise TemplateError(
                f"tokenizer {type(tokenizer).__name__} has no chat template; pass chat_template="
            )
        self.stop_token_ids: tuple[int, ...] = self._find_stop_tokens(extra_stop_token_ids)
        """Ids that end an assistant turn: EOS plus the template's end-of-turn token."""
        self._stop_texts = {i: tokenizer.decode([i]) for i in self.stop_token_ids}
        self.end_of_turn_id: int | None = self.stop_token_ids[-1] if self.stop_token_ids else None
        """The id a model writes to end its turn (the template's marker, else EOS)."""

    # -- rendering ------------------------------------------------------------------------

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
        """The template's text for `messages`."""
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            chat_template=self.chat_template,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
        )

    def encode(self, text: str) -> tuple[int, ...]:
        """Tokenize template text; special tokens are in the text, so none are added."""
        ids = self.segments.encode(text)
        if self.verify_incremental and ids != self._encode_whole(text):
            raise TemplateError(
                f"piecewise tokenization differs from the tokenizer on {text!r:.200}"
            )
        return ids

    def _encode_whole(self, text: str) -> tuple[int, ...]:
        if self._backend is not None:
            # The Rust tokenizer directly: same ids, without transformers' per-call overhead
            # (most of the agent loop's own cost per turn).
            return tuple(self._backend.encode(text, add_special_tokens=False).ids)
        return tuple(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of ids, special tokens kept (the viewer and stop-string checks need them)."""
        if self._backend is not None and not self.tokenizer.clean_up_tokenization_spaces:
            # The Rust tokenizer directly: transformers' decode adds only that clean-up.
            return self._backend.decode(list(token_ids), skip_special_tokens=False)
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def prompt(self, messages: Sequence[Message]) -> RenderedPrompt:
        """Render and tokenize an episode's opening messages plus the generation prompt."""
        shape = shape_of(messages)
        text = self.templates.render(("prompt", shape), messages, self._render_prompt)
        if self.verify_incremental and text != self._render_prompt(messages):
            raise TemplateError("the cached template renders the prompt differently from Jinja")
        return RenderedPrompt(tuple(messages), text, self.encode(text), shape)

    def _render_prompt(self, messages: Sequence[Message]) -> str:
        return self.render(messages, add_generation_prompt=True)

    def content_text(self, token_ids: Sequence[int]) -> str:
        """The assistant message content for sampled ids: their text without a final stop
        token (the template writes its own end-of-turn marker)."""
        if token_ids and token_ids[-1] in self._stop_texts:
            token_ids = token_ids[:-1]
        return self.decode(token_ids)

    def turn_delta(
        self,
        prompt: RenderedPrompt,
        generated: Sequence[int],
        observation: Sequence[Message],
    ) -> tuple[int, ...]:
        """Ids to append after an assistant turn of `generated` ids so the sequence reads as
        the template renders `[... assistant, *observation]` plus the generation prompt.

        Only template text is tokenized here; `generated` is never touched.
        """
        anchor = prompt.messages
        assistant: Message = {"role": "assistant", "content": _PLACEHOLDER}
        messages = [*anchor, assistant, *observation]
        anchor_shape = prompt.shape if prompt.shape is not None else shape_of(anchor)
        key = ("delta", anchor_shape, shape_of(observation))
        template = None if self.verify_incremental else self.templates.get(key)
        if template is not None:  # the common case, without building the fallbacks
            delta = template.fill(messages)
        else:
            n = len(anchor)

            def region(ms: Sequence[Message]) -> str:
                return self._delta_text(self._render_prompt(ms[:n]), ms)

            def real() -> str:
                return self._delta_text(prompt.text, messages)

            delta = self.templates.render(key, messages, region, fixed=frozenset({n}), real=real)
            if self.verify_incremental and delta != real():
                raise TemplateError("the cached template renders the delta differently from Jinja")
        # The model may already have produced the template's end-of-turn token; do not add it
        # twice (the sampled one stays, with loss mask 1).
        if generated:
            stop_text = self._stop_texts.get(generated[-1])
            if stop_text and delta.startswith(stop_text):
                delta = delta[len(stop_text) :]
        return self.encode(delta)

    def _delta_text(self, prompt_text: str, messages: Sequence[Message]) -> str:
        """The text after the assistant placeholder when `messages` (the prompt's messages,
        the placeholder, the observation) are rendered with a generation prompt."""
        after = self.render(messages, add_generation_prompt=True)
        head = prompt_text + _PLACEHOLDER
        if not after.startswith(head):
            # The template renders earlier messages differently once more follow (e.g. it
            # moves the system prompt next to the last user message): not append-only.
            raise TemplateError(
                "the chat template is not append-only: rendering an observation after an "
                "assistant turn changes the text before it"
            )
        return after[len(head) :]

    # -- set-up ---------------------------------------------------------------------------

    def _find_stop_tokens(self, extra: Sequence[int]) -> tuple[int, ...]:
        """EOS, plus the first special token the template writes after assistant content.

        Found by rendering a probe: the token right after the placeholder is the end-of-turn
        marker (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, `</s>`) when it is special.
        """
        ids: list[int] = [*extra]
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            ids.append(eos)
        probe: list[Message] = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": _PLACEHOLDER},
        ]
        try:
            text = self.render(probe, add_generation_prompt=False)
        except Exception as e:  # jinja raise_exception: the template needs other roles
            raise TemplateError(f"cannot render a probe conversation: {e}") from e
        tail = text[text.index(_PLACEHOLDER) + len(_PLACEHOLDER) :]
        special = set(getattr(self.tokenizer, "all_special_ids", ()))
        tail_ids = self.encode(tail)
        if tail_ids and tail_ids[0] in special:
            ids.append(tail_ids[0])
        return tuple(dict.fromkeys(ids))


def retokenize_conversation(renderer: ChatRenderer, messages: Sequence[Message]) -> list[int]:
    """The re-tokenizing path: render the whole conversation as text and tokenize it.

    This is what drifts. It exists so tests can show it failing the conformance check and
    benchmarks can measure its O(turns) cost per turn. Do not build trainers on it.
    """
    return list(renderer.encode(renderer.render(messages, add_generation_prompt=False)))
