"""Constrained decoding in `LocalEngine` on the tiny random model: JSON schemas, tool-call
grammars, the masked logprobs, and constraints that cannot be enforced."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

from skyrl_sdk.agents.engine import LocalEngine  # noqa: E402
from skyrl_sdk.agents.engine.constraints import (  # noqa: E402
    Constraint,
    ConstraintError,
    GrammarMatcher,
    ToolCallSyntax,
    ToolFunction,
)
from skyrl_sdk.agents.policy import Completion, FinishReason, SamplingParams  # noqa: E402
from skyrl_sdk.agents.trajectory import Segment, StopReason, Trajectory, sampled_turn  # noqa: E402
from skyrl_sdk.tools.formats import HermesFormat, Llama3JSONFormat, MistralFormat  # noqa: E402
from skyrl_sdk.trainer.losses import truncated_is_weights  # noqa: E402

PET = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["cat", "dog", "bird"]},
        "age": {"type": "integer", "minimum": 0, "maximum": 99},
        "owner": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 8}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 3},
    },
    "required": ["kind", "age", "owner", "tags"],
    "additionalProperties": False,
}
"""A nested object, an enum, an integer and a bounded array."""

WEATHER = ToolFunction(
    "get_weather",
    {
        "type": "object",
        "properties": {
            "city": {"enum": ["Paris", "Rome"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
        },
        "required": ["city", "days"],
        "additionalProperties": False,
    },
)
CLOCK = ToolFunction(
    "get_time", {"type": "object", "properties": {}, "additionalProperties": False}
)


@pytest.fixture(scope="module")
def engine(tiny_dir):
    eng = LocalEngine.from_pretrained(tiny_dir, num_threads=1)
    yield eng
    asyncio.run(eng.aclose())


def prompt(engine: LocalEngine) -> tuple[int, ...]:
    return engine.renderer.prompt([{"role": "user", "content": "Describe a pet."}]).token_ids


def sample(engine: LocalEngine, constraint: Constraint, n: int, **kw) -> list[Completion]:
    stops = engine.renderer.stop_token_ids
    base = SamplingParams(max_tokens=256, stop_token_ids=stops, constraint=constraint, **kw)

    async def go():
        p = prompt(engine)
        return await asyncio.gather(*(engine.generate(p, replace(base, seed=i)) for i in range(n)))

    return asyncio.run(go())


def replay(engine: LocalEngine, constraint: Constraint, prompt_ids, ids):
    """Per sampled position: the unmasked and the masked logprob of the token, and whether
    the unconstrained argmax was masked out (one full forward pass, a fresh matcher)."""
    with torch.no_grad():
        logits = engine.model(torch.tensor([[*prompt_ids, *ids]])).logits[0].float()
    matcher = GrammarMatcher(constraint, engine.renderer.tokenizer, engine.renderer.stop_token_ids)
    rows = []
    for k, token in enumerate(ids):
        line = logits[len(prompt_ids) - 1 + k]
        allowed = matcher.allowed(line.shape[-1])
        masked = torch.log_softmax(line.masked_fill(~allowed, float("-inf")), -1)
        rows.append(
            (
                float(torch.log_softmax(line, -1)[token]),
                float(masked[token]),
                not bool(allowed[int(line.argmax())]),
                bool(allowed[token]),
            )
        )
        matcher.advance(token)
    return rows


def test_json_schema_replies_validate_and_report_the_masked_distribution(engine) -> None:
    constraint = Constraint.json_schema(PET)
    completions = sample(engine, constraint, 50)
    stop_ids = engine.renderer.stop_token_ids
    overridden = 0
    for c in completions:
        assert c.finish_reason is FinishReason.STOP and c.token_ids[-1] in stop_ids
        assert c.constrained
        jsonschema.validate(json.loads(c.text), PET)
        assert engine.renderer.tokenizer.decode(c.token_ids[:-1]) == c.text
    for c in completions[:8]:  # the logprobs, against a full forward pass
        rows = replay(engine, constraint, prompt(engine), c.token_ids)
        assert all(ok for *_, ok in rows)
        for (plain, masked, _, _), got in zip(rows, c.logprobs, strict=True):
            assert got == pytest.approx(masked, abs=1e-4)
            assert masked >= plain - 1e-6  # renormalised over fewer tokens
        overridden += sum(hit for _, _, hit, _ in rows)
    assert overridden > 0  # the mask did change what the model would have picked


def test_a_constrained_turn_is_marked_and_keeps_its_masked_logprobs(engine) -> None:
    """The turn says `constrained`, survives JSON, and the trainer's truncated importance
    weights (learner's unmasked over the sampler's masked logprobs) come out at most 1."""
    (c,) = sample(engine, Constraint.json_schema(PET), 1)
    p = prompt(engine)
    turn = sampled_turn(0, 0, c.text, c, (), (), 0.0, (), None, 0.0)
    assert turn.constrained and turn.logprobs == c.logprobs
    traj = Trajectory(
        episode_id="e",
        task_id="t",
        env_id="env",
        policy="tiny",
        stop_reason=StopReason.DONE,
        turns=(turn,),
        segments=(Segment(p, (), 0),),
        prompt_messages=(),
        reward=0.0,
        success=False,
    )
    data = traj.to_json()
    assert data["turns"][0]["constrained"] is True
    again = Trajectory.from_json(json.loads(json.dumps(data)))
    assert again.turns[0].constrained
    (flat,) = again.training_samples()
    sampler = torch.tensor([lp for lp, m in zip(flat.logprobs, flat.loss_mask, strict=True) if m])
    rows = replay(engine, Constraint.json_schema(PET), p, c.token_ids)
    learner = torch.tensor([plain for plain, *_ in rows])
    weights, _ = truncated_is_weights(learner, sampler)
    assert bool((weights <= 1 + 1e-4).all()) and bool((weights < 0.999).any())


@pytest.mark.parametrize(
    ("syntax", "parser"),
    [
        (ToolCallSyntax.HERMES, HermesFormat()),
        (ToolCallSyntax.MISTRAL, MistralFormat()),
        (ToolCallSyntax.LLAMA3, Llama3JSONFormat()),
    ],
)
def test_tool_call_grammars_make_calls_the_formats_parse(engine, syntax, parser) -> None:
    constraint = Constraint.tool_calls([WEATHER, CLOCK], syntax=syntax, parallel=False)
    for c in sample(engine, constraint, 6, temperature=1.0):
        assert c.finish_reason is FinishReason.STOP and c.constrained
        action = parser.parse(c.text)
        assert action.error is None and len(action.tool_calls) == 1, c.text
        call = action.tool_calls[0]
        schema = {"get_weather": WEATHER, "get_time": CLOCK}[call.name].parameters
        jsonschema.validate(call.arguments, schema)


def test_a_named_function_is_the_only_call(engine) -> None:
    constraint = Constraint.tool_calls([WEATHER, CLOCK], name="get_time")
    for c in sample(engine, constraint, 4, temperature=0.0):
        calls = HermesFormat().parse(c.text).tool_calls
        assert [call.name for call in calls] == ["get_time"], c.text


def test_greedy_and_top_logprobs_stay_inside_the_mask(engine) -> None:
    (c,) = sample(engine, Constraint.json_schema(PET), 1, temperature=0.0, top_logprobs=5)
    jsonschema.validate(json.loads(c.text), PET)
    assert c.top_logprobs is not None
    for per in c.top_logprobs:
        assert per and all(lp > float("-inf") for _, lp in per)


def test_json_object_replies_are_objects(engine) -> None:
    """Any JSON object (the random model may run out of tokens inside one: those are cut)."""
    done = [
        c for c in sample(engine, Constraint.json_object(), 8) if c.finish_reason.value == "stop"
    ]
    assert done
    assert all(isinstance(json.loads(c.text), dict) for c in done)


def test_constraints_that_cannot_be_enforced_name_the_problem(engine) -> None:
    tokenizer = engine.renderer.tokenizer
    bad = Constraint.json_schema({"type": "object", "dependentSchemas": {"a": {}}})
    with pytest.raises(ConstraintError, match="dependentSchemas"):
        bad.check(tokenizer)
    with pytest.raises(ConstraintError, match="dependentSchemas"):
        GrammarMatcher(bad, tokenizer, engine.renderer.stop_token_ids)
    with pytest.raises(ConstraintError):
        Constraint.lark("start: (").check(tokenizer)
    with pytest.raises(ConstraintError, match="no function named 'nope'"):
        Constraint.tool_calls([WEATHER], name="nope")


def test_without_the_library_the_error_names_the_extra(engine, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "llguidance", None)
    with pytest.raises(ConstraintError, match=r"skyrl-sdk\[grammar\]"):
        Constraint.json_object().check(engine.renderer.tokenizer)
