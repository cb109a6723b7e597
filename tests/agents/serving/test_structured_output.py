"""Structured outputs and forced tool calls through `skyrl serve` on the tiny local model,
with the real `openai` SDK over HTTP on 127.0.0.1: `response_format` (JSON schema, JSON
object, the SDK's `chat.completions.parse` with a pydantic model, run from its own venv),
`tool_choice` `required` / a named function / `none`, the capture of constrained turns, and
the 400s for what cannot be enforced."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import textwrap
import time
from typing import Any

import openai
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

from skyrl_sdk.agents.engine.constraints import Constraint, GrammarMatcher  # noqa: E402
from skyrl_sdk.agents.scripted import ScriptedPolicy  # noqa: E402
from skyrl_sdk.agents.serving import ServeConfig, start_server  # noqa: E402
from skyrl_sdk.benchmarks import harness_venv  # noqa: E402

PET = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["cat", "dog", "bird"]},
        "age": {"type": "integer", "minimum": 0, "maximum": 30},
        "owner": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 10},
                "floor": {"type": "integer", "minimum": 0, "maximum": 9},
            },
            "required": ["city", "floor"],
            "additionalProperties": False,
        },
        "tags": {
            "type": "array",
            "items": {"enum": ["calm", "loud"]},
            "minItems": 1,
            "maxItems": 3,
        },
    },
    "required": ["kind", "age", "owner", "tags"],
    "additionalProperties": False,
}
"""A nested object, an enum, integers and a bounded array."""
PET_FORMAT = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET, "strict": True}}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"enum": ["Paris", "Rome", "Oslo"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city", "days"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The time in a zone.",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"enum": ["UTC", "CET"]}},
                "required": ["zone"],
                "additionalProperties": False,
            },
        },
    },
]
ASK = [{"role": "user", "content": "Tell me about a pet."}]


@pytest.fixture(scope="module")
def tiny() -> Any:
    """What `skyrl serve --policy tiny` serves: the tiny random model (one decoding thread)
    and its tools renderer, loaded the same way."""
    from skyrl_sdk.agents.policy_spec import PolicyUse, load_policy

    loaded = load_policy("tiny", use=PolicyUse.SERVE)
    engine, renderer = loaded.policy, loaded.renderer
    config = ServeConfig(model_name="tiny")
    with start_server(engine, config, renderer=renderer) as server:
        yield engine, renderer, server


def api(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0, timeout=120)


def masked_argmax_steps(
    engine: Any, renderer: Any, constraint: Constraint, turn: Any, prompt
) -> int:
    """Steps of a captured turn at which the model's unconstrained argmax was masked out
    (one full forward pass over prompt + sampled ids, the grammar replayed)."""
    ids = list(turn.token_ids)
    with torch.no_grad():
        logits = engine.model(torch.tensor([[*prompt, *ids]])).logits[0].float()
    matcher = GrammarMatcher(constraint, renderer.tokenizer, renderer.stop_token_ids)
    hits = 0
    for k, token in enumerate(ids):
        line = logits[len(prompt) - 1 + k]
        allowed = matcher.allowed(line.shape[-1])
        assert allowed[token]
        hits += not bool(allowed[int(line.argmax())])
        matcher.advance(token)
    return hits


def test_response_format_json_schema_fifty_replies_validate_and_are_captured(tiny) -> None:
    """50 sampled replies (10 at a time, the engine batches them), `max_tokens` 256: each
    ends with `stop`, validates, and its captured turn is `constrained`, holds the returned
    ids and logprobs, and decodes to the reply; the mask overrode the model's argmax."""
    engine, renderer, server = tiny
    client = api(server)

    def one(i: int) -> Any:
        return client.chat.completions.create(
            model="tiny",
            messages=ASK,
            max_tokens=256,
            seed=i,
            user=f"pet-{i}",
            logprobs=True,
            response_format=PET_FORMAT,
            extra_body={"return_token_ids": True},
        )

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(one, range(50)))
    took = time.perf_counter() - started
    overridden = 0
    for i, answer in enumerate(answers):
        choice = answer.choices[0]
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), PET)
        turn = server.session_trajectory(f"pet-{i}").turns[0]
        ids = choice.model_extra["token_ids"]
        assert turn.constrained and list(turn.token_ids) == ids
        assert renderer.decode(ids[:-1]) == choice.message.content == turn.action
        assert [t.logprob for t in choice.logprobs.content] == pytest.approx(turn.logprobs)
        if i < 10:
            prompt = server.session_trajectory(f"pet-{i}").segments[0].prompt_ids
            overridden += masked_argmax_steps(
                engine, renderer, Constraint.json_schema(PET), turn, prompt
            )
    assert overridden > 0
    print(f"50 constrained replies in {took:.2f} s")


def test_json_object_and_text_formats(tiny) -> None:
    """`json_object`: every reply is (the start of) an object, a finished one parses; `text`
    is plain sampling, not marked constrained."""
    _, _, server = tiny
    client = api(server)
    for seed in range(4):
        answer = client.chat.completions.create(
            model="tiny",
            messages=ASK,
            max_tokens=48,
            seed=seed,
            response_format={"type": "json_object"},
        )
        choice = answer.choices[0]
        assert choice.message.content.startswith("{")
        if choice.finish_reason == "stop":  # a random model may run out of tokens mid-object
            assert isinstance(json.loads(choice.message.content), dict)
    plain = client.chat.completions.create(
        model="tiny", messages=ASK, max_tokens=8, user="plain", response_format={"type": "text"}
    )
    assert plain.choices[0].message.content is not None
    assert not server.session_trajectory("plain").turns[0].constrained


def test_tool_choice_required_makes_a_call_in_every_reply_with_exact_ids(tiny) -> None:
    """Each reply is tool calls the grammar produced: parsed calls with valid arguments, the
    captured ids are the returned ones and decode to the calls' Hermes text."""
    _, renderer, server = tiny
    client = api(server)
    for i in range(12):
        answer = client.chat.completions.create(
            model="tiny",
            messages=ASK,
            tools=TOOLS,
            tool_choice="required",
            **({} if i % 2 == 0 else {"parallel_tool_calls": False}),
            max_tokens=200,
            seed=i,
            user=f"tools-{i}",
            extra_body={"return_token_ids": True},
        )
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        calls = choice.message.tool_calls
        assert calls and (i % 2 == 0 or len(calls) == 1)
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
        for call in calls:
            jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
        turn = server.session_trajectory(f"tools-{i}").turns[0]
        ids = choice.model_extra["token_ids"]
        assert turn.constrained and list(turn.token_ids) == ids
        text = renderer.decode(ids[:-1])
        assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>")
        assert [c.name for c in turn.tool_calls] == [c.function.name for c in calls]


def test_a_named_function_and_none(tiny) -> None:
    _, _, server = tiny
    client = api(server)
    named = {"type": "function", "function": {"name": "get_time"}}
    for seed in range(4):
        answer = client.chat.completions.create(
            model="tiny", messages=ASK, tools=TOOLS, tool_choice=named, max_tokens=100, seed=seed
        )
        calls = answer.choices[0].message.tool_calls
        assert [c.function.name for c in calls] == ["get_time"]
    none = client.chat.completions.create(
        model="tiny", messages=ASK, tools=TOOLS, tool_choice="none", max_tokens=8, user="none"
    )
    assert none.choices[0].message.tool_calls is None
    assert not server.session_trajectory("none").turns[0].constrained


def test_what_cannot_be_enforced_is_a_400_naming_the_field(tiny) -> None:
    _, renderer, server = tiny
    client = api(server)
    cases = [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "schema": {"type": "object", "dependentSchemas": {"a": {}}},
                    },
                }
            },
            "response_format",
            "dependentSchemas",
        ),
        ({"response_format": {"type": "yaml"}}, "response_format.type", "yaml"),
        (
            {"response_format": PET_FORMAT, "tools": TOOLS, "tool_choice": "required"},
            "response_format",
            "forced tool_choice",
        ),
    ]
    for extra, param, words in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="tiny", messages=ASK, max_tokens=8, **extra)
        assert e.value.body["param"] == param and words in e.value.body["message"]
    # A policy without masks (a scripted one) cannot enforce either field.
    scripted = ScriptedPolicy(["hello"] * 4, renderer=renderer)
    with start_server(scripted, ServeConfig(model_name="tiny"), renderer=renderer) as other:
        c = api(other)
        for extra, param in [
            ({"response_format": PET_FORMAT}, "response_format"),
            ({"tools": TOOLS, "tool_choice": "required"}, "tool_choice"),
        ]:
            with pytest.raises(openai.BadRequestError) as e:
                c.chat.completions.create(model="tiny", messages=ASK, **extra)
            assert (
                e.value.body["param"] == param and "cannot be enforced" in e.value.body["message"]
            )
        assert c.chat.completions.create(model="tiny", messages=ASK).choices[0].message.content


PARSE_CLIENT = textwrap.dedent(
    """
    import sys
    from typing import Literal

    import openai
    from pydantic import BaseModel, Field

    class Owner(BaseModel):
        city: str = Field(max_length=10)
        floor: int = Field(ge=0, le=9)

    class Pet(BaseModel):
        kind: Literal["cat", "dog", "bird"]
        age: int = Field(ge=0, le=30)
        owner: Owner
        tags: list[Literal["calm", "loud"]] = Field(min_length=1, max_length=3)

    client = openai.OpenAI(base_url=sys.argv[1], api_key="none", max_retries=0)
    for seed in range(3):
        done = client.chat.completions.parse(
            model="tiny",
            messages=[{"role": "user", "content": "Tell me about a pet."}],
            response_format=Pet,
            max_tokens=256,
            seed=seed,
        )
        pet = done.choices[0].message.parsed
        assert isinstance(pet, Pet) and isinstance(pet.owner, Owner), done
        print("parsed", pet.model_dump_json())
    """
)


def test_the_openai_sdk_parse_with_a_pydantic_model(tiny, tmp_path) -> None:
    """`chat.completions.parse(response_format=Pet)` from the openai SDK in its own venv
    (`$ref`s to a nested model, `Literal`s, bounded fields) gets parsed `Pet`s back."""
    venv = harness_venv.ready("openai-agents")
    if venv is None:
        pytest.skip(
            "build the harness venv: python -m skyrl_sdk.benchmarks.harness_venv openai-agents"
        )
    _, _, server = tiny
    script = tmp_path / "parse_client.py"
    script.write_text(PARSE_CLIENT)
    out = subprocess.run(
        [str(venv / "bin" / "python"), str(script), server.base_url],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("parsed ") == 3


def test_completions_honour_structured_outputs_and_response_format(tiny) -> None:
    """vLLM's `structured_outputs` (a Lark grammar, a JSON schema) and `response_format` on
    `/v1/completions`; other kinds are a 400 naming them."""
    _, renderer, server = tiny
    client = api(server)
    prompt = list(renderer.prompt(ASK).token_ids)
    for seed in range(4):
        yes_no = client.completions.create(
            model="tiny",
            prompt=prompt,
            max_tokens=8,
            seed=seed,
            extra_body={"structured_outputs": {"grammar": 'start: "yes" | "no"'}},
        )
        assert yes_no.choices[0].text in ("yes", "no") and yes_no.choices[0].finish_reason == "stop"
    pet = client.completions.create(
        model="tiny",
        prompt=prompt,
        max_tokens=256,
        seed=1,
        extra_body={"response_format": PET_FORMAT},
    )
    jsonschema.validate(json.loads(pet.choices[0].text), PET)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(
            model="tiny", prompt=prompt, extra_body={"structured_outputs": {"regex": "a+"}}
        )
    assert e.value.body["param"] == "structured_outputs.regex"


def test_an_upstream_policy_gets_the_constraint_passed_through(tiny, tiny_dir) -> None:
    """`skyrl serve --policy URL` in front of the tiny server: the proxy's `OpenAIClient`
    sends the constraint upstream (`response_format`, `structured_outputs`), which enforces
    it; the proxy's capture marks the turn constrained."""
    from skyrl_sdk.agents.policy_spec import PolicyUse, load_policy

    _, _, upstream = tiny
    loaded = load_policy(
        upstream.base_url, tokenizer=str(tiny_dir), model="tiny", use=PolicyUse.SERVE
    )
    with start_server(
        loaded.policy, ServeConfig(model_name="proxied"), renderer=loaded.renderer
    ) as proxy:
        via = api(proxy)
        pet = via.chat.completions.create(
            model="proxied",
            messages=ASK,
            max_tokens=256,
            seed=3,
            user="p",
            response_format=PET_FORMAT,
        )
        jsonschema.validate(json.loads(pet.choices[0].message.content), PET)
        assert proxy.session_trajectory("p").turns[0].constrained
        call = via.chat.completions.create(
            model="proxied",
            messages=ASK,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=120,
            seed=4,
        )
        assert [c.function.name for c in call.choices[0].message.tool_calls] == ["get_weather"]


def test_streamed_constrained_replies(tiny) -> None:
    """Streamed: the JSON arrives as content deltas, a forced call as a `tool_calls` delta."""
    _, _, server = tiny
    client = api(server)
    stream = client.chat.completions.create(
        model="tiny", messages=ASK, max_tokens=256, seed=7, stream=True, response_format=PET_FORMAT
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jsonschema.validate(json.loads(text), PET)
    assert chunks[-1].choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(
        model="tiny",
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=120,
        seed=8,
        stream=True,
    )
    chunks = list(stream)
    calls = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
    assert len(calls) == 1 and calls[0].function.name in ("get_weather", "get_time")
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()
