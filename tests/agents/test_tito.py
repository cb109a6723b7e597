"""Conformance: the ids a trainer sees equal the ids the sampler produced, for every template.

Each episode is a real multi-turn `math` episode with tool calls, in the XML tag format (tool
results as user turns) and the Hermes format (tool results as `tool` messages, two calls in one
reply). The policy answers with token ids in a *non-canonical* segmentation (one token per
character), as a sampler may: exactly the case re-tokenization gets wrong.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest

import skyrl_gym
from skyrl_gym.envs.math.env import bundled_tasks
from skyrl_sdk.agents.chat import ChatRenderer, TemplateError, retokenize_conversation
from skyrl_sdk.agents.policy import Completion, FinishReason, GenerationContext, SamplingParams
from skyrl_sdk.agents.rollout import rollout
from skyrl_sdk.agents.trajectory import StopReason, Trajectory
from tests.agents.conftest import make_renderer
from tests.agents.templates import TemplateStyle


def char_ids(renderer: ChatRenderer, text: str) -> list[int]:
    """`text` as one token per character: valid, decodes to `text`, but not canonical BPE."""
    return [i for ch in text for i in renderer.encode(ch)]


class RecordingPolicy:
    """Replays token-id actions with distinct logprobs and records every prompt it sees."""

    name = "recording"

    def __init__(self, renderer: ChatRenderer, actions: Sequence[list[int]], *, stop: bool = True):
        self._renderer = renderer
        self.actions = list(actions)
        self.stop = stop
        self.prompts: list[tuple[int, ...]] = []
        self.completions: list[Completion] = []

    @property
    def renderer(self) -> ChatRenderer:
        return self._renderer

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> Completion:
        assert context is not None
        ids = list(self.actions[context.turn])
        if self.stop:
            assert self._renderer.end_of_turn_id in sampling.stop_token_ids
            ids.append(self._renderer.end_of_turn_id)
        offset = 0.01 * (len(self.completions) + 1)
        completion = Completion(
            token_ids=tuple(ids),
            logprobs=tuple(-(offset + 0.001 * i) for i in range(len(ids))),
            text=self._renderer.content_text(ids),
            finish_reason=FinishReason.STOP if self.stop else FinishReason.LENGTH,
            policy_version=len(self.completions),
        )
        self.prompts.append(tuple(prompt_token_ids))
        self.completions.append(completion)
        return completion

    async def aclose(self) -> None:
        return None


def xml_actions(task: dict) -> list[str]:
    a, b = task["expression"], task["answer"]
    return [
        f"Let me compute. <calculator>{a}</calculator>",
        f"Check it again: <calculator>({a}) * 1</calculator>",
        f"<answer>{b}</answer>",
    ]


def hermes_actions(task: dict) -> list[str]:
    a, b = task["expression"], task["answer"]

    def call(name: str, **args: str) -> str:
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"

    return [
        "Two checks at once. "
        + call("calculator", expression=a)
        + call("calculator", expression=f"{a} + 0"),
        "And once more. " + call("calculator", expression=f"({a}) * 1"),
        call("answer", answer=b),
    ]


def play(
    renderer: ChatRenderer, tool_format: str, *, stop: bool = True
) -> tuple[Trajectory, RecordingPolicy]:
    task = bundled_tasks()[3]
    texts = xml_actions(task) if tool_format == "xml" else hermes_actions(task)
    policy = RecordingPolicy(renderer, [char_ids(renderer, t) for t in texts], stop=stop)
    env = skyrl_gym.make("math", tool_format=tool_format)
    trajectory = asyncio.run(rollout(env, policy, task, max_turns=6, max_tokens=512))
    env.close()
    return trajectory, policy


def assert_conformant(
    trajectory: Trajectory, policy: RecordingPolicy, renderer: ChatRenderer
) -> None:
    """The contract: prefix, positions, mask, logprobs and template text all line up."""
    [sample] = trajectory.training_samples()
    assert len(sample.input_ids) == len(sample.loss_mask) == len(sample.logprobs)
    expected_mask_positions: list[int] = []
    for prompt, completion in zip(policy.prompts, policy.completions, strict=True):
        n, k = len(prompt), len(completion.token_ids)
        # What the sampler was conditioned on is exactly the trainer's prefix...
        assert sample.input_ids[:n] == prompt
        # ...and what it sampled sits right after it, with its logprobs and version.
        assert sample.input_ids[n : n + k] == completion.token_ids
        assert sample.logprobs[n : n + k] == completion.logprobs
        assert set(sample.policy_versions[n : n + k]) == {completion.policy_version}
        expected_mask_positions.extend(range(n, n + k))
    # The loss mask covers exactly the sampled tokens.
    assert [i for i, m in enumerate(sample.loss_mask) if m] == expected_mask_positions
    assert sum(sample.loss_mask) == trajectory.num_generated_tokens
    # And the appended deltas are faithful to the template: the ids read as the template
    # renders the whole conversation (up to the glue after the last reply).
    text = renderer.decode(sample.input_ids)
    full = renderer.render(trajectory.messages(), add_generation_prompt=False)
    assert full.startswith(text), (text, full)
    glue = full[len(text) :]  # at most the end-of-turn marker the last reply did not sample
    for special in renderer.tokenizer.all_special_tokens:
        glue = glue.replace(special, "")
    assert glue.strip() == ""


@pytest.mark.parametrize("tool_format", ["xml", "hermes"])
def test_trainer_ids_equal_sampled_ids(styled_renderer: ChatRenderer, tool_format: str) -> None:
    trajectory, policy = play(styled_renderer, tool_format)
    assert trajectory.stop_reason is StopReason.DONE
    assert trajectory.reward == 1.0
    assert len(trajectory.turns) == 3
    assert sum(len(t.tool_calls) for t in trajectory.turns) >= 3
    if tool_format == "hermes":
        assert [m["role"] for m in trajectory.turns[0].observation] == ["tool", "tool"]
    # The scripted ids really are non-canonical, so this is the hard case.
    for completion in policy.completions:
        assert list(styled_renderer.encode(completion.text)) != list(completion.token_ids)
    assert_conformant(trajectory, policy, styled_renderer)
    # The JSON round trip keeps every id.
    again = Trajectory.from_json(json.loads(json.dumps(trajectory.to_json())))
    assert again.training_samples() == trajectory.training_samples()


def test_completions_cut_by_length_get_the_end_of_turn_glue(styled_renderer: ChatRenderer) -> None:
    """Without a sampled stop token, the template's end-of-turn marker is appended (mask 0)."""
    trajectory, policy = play(styled_renderer, "xml", stop=False)
    assert all(c.finish_reason is FinishReason.LENGTH for c in policy.completions)
    assert_conformant(trajectory, policy, styled_renderer)


def test_sampled_stop_token_is_not_duplicated(chatml_renderer: ChatRenderer) -> None:
    trajectory, _ = play(chatml_renderer, "xml")
    [sample] = trajectory.training_samples()
    text = chatml_renderer.decode(sample.input_ids)
    assert "<|im_end|><|im_end|>" not in text
    assert text.count("<|im_end|>") == text.count("<|im_start|>")


@pytest.mark.parametrize("tool_format", ["xml", "hermes"])
def test_retokenizing_path_fails_conformance(
    styled_renderer: ChatRenderer, tool_format: str
) -> None:
    """Re-rendering the conversation and tokenizing it does not give the sampled ids."""
    trajectory, policy = play(styled_renderer, tool_format)
    [sample] = trajectory.training_samples()
    retokenized = retokenize_conversation(styled_renderer, trajectory.messages())
    assert retokenized != list(sample.input_ids)
    # The sampled replies cannot even be found in the re-tokenized sequence, so a trainer
    # using it would compute log-probabilities for tokens the sampler never produced.
    joined = ",".join(map(str, retokenized))
    assert not any(",".join(map(str, c.token_ids[:-1])) in joined for c in policy.completions)


def test_template_trimming_breaks_retokenization_even_for_canonical_ids(bpe_core) -> None:
    """Llama 3 trims message content: a reply starting with whitespace changes when
    re-rendered, although its ids were canonical. The append-only path keeps it exact."""
    from tests.agents.templates import STYLES

    renderer = make_renderer(bpe_core, next(s for s in STYLES if s.name == "llama3"))
    task = bundled_tasks()[0]
    texts = [
        f"  <calculator>{task['expression']}</calculator>",
        f"<answer>{task['answer']}</answer>",
    ]
    policy = RecordingPolicy(renderer, [list(renderer.encode(t)) for t in texts])
    env = skyrl_gym.make("math")
    trajectory = asyncio.run(rollout(env, policy, task, max_turns=4))
    [sample] = trajectory.training_samples()
    n, k = len(policy.prompts[0]), len(policy.completions[0].token_ids)
    assert sample.input_ids[n : n + k] == policy.completions[0].token_ids
    retokenized = retokenize_conversation(renderer, trajectory.messages())
    assert retokenized[n : n + k] != list(policy.completions[0].token_ids)


def test_non_append_only_template_is_reported(bpe_core) -> None:
    """A template that moves the system prompt next to the *last* user message cannot be
    appended to; the episode ends with a clear error instead of drifting silently."""
    from tests.agents.templates import STYLES

    moving_system = (
        "{% for m in messages %}{% if m['role'] == 'user' and loop.last %}"
        "<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n{% endif %}"
        "{% if m['role'] != 'system' %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    style = STYLES[0]
    renderer = make_renderer(bpe_core, TemplateStyle("moving", moving_system, *_rest(style)))
    task = bundled_tasks()[0]
    policy = RecordingPolicy(
        renderer, [char_ids(renderer, f"<calculator>{task['expression']}</calculator>")]
    )
    env = skyrl_gym.make("math")
    trajectory = asyncio.run(rollout(env, policy, task, max_turns=4))
    assert trajectory.stop_reason is StopReason.POLICY_ERROR
    assert "append-only" in (trajectory.error or "")
    with pytest.raises(TemplateError):
        renderer.turn_delta(
            renderer.prompt(trajectory.prompt_messages), (), [{"role": "user", "content": "x"}]
        )


def _rest(style: TemplateStyle) -> tuple:
    return (style.special_tokens, style.eos_token, style.bos_token, style.pad_token)
