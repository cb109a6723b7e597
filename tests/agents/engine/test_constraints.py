"""Constrained decoding in `LocalEngine` on the tiny random model: JSON schemas, tool-call
grammars, the masked logprobs, and constraints that cannot be enforced."""

from __future__ import annotations

import asyncio
import json
import re
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


# -- grammar-typed custom tools (Codex's apply_patch shape) ---------------------------------------

PATCH = r"""start: begin hunk{1,2} "*** End Patch" LF?
begin: "*** Begin Patch" LF
hunk: "*** Add File: " PATH LF add_line{1,3}
add_line: "+" /[a-z "\\]{0,12}/ LF -> line
PATH: /[a-z]{1,8}\.txt/
%import common.LF
"""
"""A small grammar of the shape of Codex's `apply_patch` (rules, an alias, a repeat, an
import, regexes whose characters need escaping in JSON: `"` and a backslash)."""

PATCH_RE = r'\*\*\* Begin Patch\n(\*\*\* Add File: [a-z]{1,8}\.txt\n(\+[a-z "\\]{0,12}\n){1,3}){1,2}\*\*\* End Patch\n?'
"""The same language as a Python regex (the check the sampled inputs are held to)."""

APPLY_PATCH = ToolFunction("apply_patch", grammar=PATCH)


def feed(engine: LocalEngine, constraint: Constraint, text: str) -> tuple[bool, bool]:
    """Whether the grammar accepts every token of `text` (tokenized as the model would), and
    whether it accepts `text` as a whole."""
    matcher = GrammarMatcher(constraint, engine.renderer.tokenizer, engine.renderer.stop_token_ids)
    vocab = len(engine.renderer.tokenizer)
    for token in engine.renderer.tokenizer.encode(text, add_special_tokens=False):
        if not bool(matcher.allowed(vocab)[token]):
            return False, False
        matcher.advance(token)
    return True, matcher.accepting


def hermes(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


GOOD = '*** Begin Patch\n*** Add File: a.txt\n+a "b" \\ c\n*** End Patch\n'
BAD = "*** Begin Patch\n*** Add File: a.txt\nno plus\n*** End Patch\n"


def test_a_custom_tools_grammar_applies_to_its_input_inside_the_json_string(engine) -> None:
    """The input is JSON-escaped in the call (`\\n`, `\\"`, `\\\\`), and the grammar holds
    for the text it decodes to: a valid patch passes, an invalid one is masked out."""
    assert re.fullmatch(PATCH_RE, GOOD) and not re.fullmatch(PATCH_RE, BAD)
    forced = Constraint.tool_calls([WEATHER, APPLY_PATCH], name="apply_patch")
    assert feed(engine, forced, hermes("apply_patch", {"input": GOOD})) == (True, True)
    assert feed(engine, forced, hermes("apply_patch", {"input": BAD}))[0] is False
    assert feed(engine, forced, hermes("get_weather", {"city": "Paris", "days": 2}))[0] is False


def test_under_auto_text_is_free_and_an_opened_call_is_enforced(engine) -> None:
    """`optional` (tool_choice auto): any text, or text then calls; once a call is opened it
    must be a valid call of an offered tool, a custom tool's input under its grammar."""
    auto = Constraint.tool_calls([WEATHER, APPLY_PATCH], optional=True)
    patch = hermes("apply_patch", {"input": GOOD})
    weather = hermes("get_weather", {"city": "Rome", "days": 3})
    for text in ("Just text, <b>no</b> call.", "Patching.\n" + patch, patch + "\n" + weather):
        assert feed(engine, auto, text) == (True, True), text
    for text in ("Ok.\n" + hermes("apply_patch", {"input": BAD}), hermes("nope", {})):
        assert feed(engine, auto, text)[0] is False, text


@pytest.mark.parametrize(
    ("syntax", "parser"),
    [
        (ToolCallSyntax.HERMES, HermesFormat()),
        (ToolCallSyntax.MISTRAL, MistralFormat()),
        (ToolCallSyntax.LLAMA3, Llama3JSONFormat()),
    ],
)
def test_forced_custom_tool_calls_sample_inputs_of_its_grammar(engine, syntax, parser) -> None:
    """Sampled by the random model under the mask: every reply is one call whose input
    matches the grammar, token-exact (the ids decode to the reply the formats parse)."""
    constraint = Constraint.tool_calls([APPLY_PATCH, WEATHER], syntax=syntax, name="apply_patch")
    for c in sample(engine, constraint, 4, temperature=1.0):
        assert c.finish_reason is FinishReason.STOP and c.constrained, c.text
        assert engine.renderer.tokenizer.decode(c.token_ids, skip_special_tokens=True) == c.text
        action = parser.parse(c.text)
        assert action.error is None and len(action.tool_calls) == 1, c.text
        (call,) = action.tool_calls
        assert call.name == "apply_patch" and re.fullmatch(PATCH_RE, call.arguments["input"])


@pytest.mark.parametrize(
    ("grammar", "problem"),
    [
        ('start: "a"i', "case-insensitive"),
        ("start: /^a/", "cannot be JSON-escaped"),
        ("start: <|im_end|>", "cannot be used"),
        ('start: %json {"type": "object"}', "cannot be used"),
        ("start: A\n%import common.ESCAPED_STRING -> A", "not supported"),
    ],
)
def test_grammars_that_cannot_be_escaped_name_the_problem(grammar, problem) -> None:
    with pytest.raises(ConstraintError, match=f"custom tool 'g'.*{problem}"):
        Constraint.tool_calls([ToolFunction("g", grammar=grammar)])


def test_a_recursive_grammar_is_refused_when_checked(engine) -> None:
    """A tool grammar is matched as one terminal (a regular language); a recursive one is a
    `ConstraintError` from the library, which the routes answer as a 400."""
    nested = ToolFunction("g", grammar='start: "(" start ")" | "x"')
    with pytest.raises(ConstraintError):
        Constraint.tool_calls([nested]).check(engine.renderer.tokenizer)
