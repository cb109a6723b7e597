"""The official `anthropic` SDK against `skyrl serve`'s Messages API, run from the SDK's own venv
(`python -m skyrl_sdk.benchmarks.harness_venv anthropic`).

    python anthropic_driver.py BASE_URL KEY MODEL

Plays a tool round trip the way an Anthropic client does (the assistant's content blocks sent
back as they came, a `tool_result` answering the `tool_use`): turn 1 `messages.create`, turn 2
streamed with `messages.stream`, turn 3 streamed with `messages.create(stream=True)`; then
counts tokens, makes one side request (another system prompt), and provokes three errors.
Prints one JSON object with what it saw.
"""

import json
import sys

import anthropic

TOOLS = [
    {
        "name": "calc",
        "description": "Evaluate an arithmetic expression.",
        "input_schema": {"type": "object", "properties": {"expr": {"type": "string"}}},
    }
]
SYSTEM = [{"type": "text", "text": "You are a calculator.", "cache_control": {"type": "ephemeral"}}]


def blocks(message) -> list:
    return [b.model_dump(exclude_none=True) for b in message.content]


def main() -> None:
    base_url, key, model = sys.argv[1:4]
    client = anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0, timeout=60)
    out: dict = {}
    messages: list = [{"role": "user", "content": "What is 6*7? Check twice."}]
    common = {"model": model, "max_tokens": 200, "system": SYSTEM, "tools": TOOLS}

    first = client.messages.create(messages=messages, thinking={"type": "disabled"}, **common)
    out["first"] = {"content": blocks(first), "stop_reason": first.stop_reason}
    out["first_usage"] = first.usage.model_dump()
    call = next(b for b in first.content if b.type == "tool_use")
    messages += [
        {"role": "assistant", "content": blocks(first)},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "42"}],
        },
    ]

    with client.messages.stream(messages=messages, **common) as stream:
        texts = list(stream.text_stream)
        second = stream.get_final_message()
    out["second"] = {"content": blocks(second), "stop_reason": second.stop_reason, "texts": texts}
    call = next(b for b in second.content if b.type == "tool_use")
    messages += [
        {"role": "assistant", "content": blocks(second)},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": call.id,
                    "content": [{"type": "text", "text": "division by zero"}],
                    "is_error": True,
                },
                {"type": "text", "text": "Try once more."},
            ],
        },
    ]

    events = list(client.messages.create(messages=messages, stream=True, **common))
    out["third_events"] = [e.type for e in events]
    out["third_text"] = "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    out["third_stop"] = next(e.delta.stop_reason for e in events if e.type == "message_delta")

    counted = client.messages.count_tokens(
        model=model, messages=messages, system=SYSTEM, tools=TOOLS
    )
    out["count_tokens"] = counted.input_tokens

    side = client.messages.create(
        model=model,
        max_tokens=20,
        system="Write a 3-word title for the conversation.",
        messages=[{"role": "user", "content": "What is 6*7?"}],
        stop_sequences=["!"],
    )
    out["side"] = {
        "content": blocks(side),
        "stop_reason": side.stop_reason,
        "stop_sequence": side.stop_sequence,
    }

    errors = {}
    for name, kwargs in {
        "bad_model": {**common, "model": "claude-nope", "messages": messages},
        "bad_temperature": {**common, "extra_body": {"temperature": 1.5}, "messages": messages},
        "tool_choice_any": {**common, "tool_choice": {"type": "any"}, "messages": messages},
    }.items():
        try:
            client.messages.create(**kwargs)
            errors[name] = None
        except anthropic.APIStatusError as e:
            errors[name] = {"class": type(e).__name__, "status": e.status_code, "body": e.body}
    try:
        anthropic.Anthropic(base_url=base_url, api_key="sk-wrong", max_retries=0).messages.create(
            model=model, max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
    except anthropic.APIStatusError as e:
        errors["wrong_key"] = {"class": type(e).__name__, "status": e.status_code, "body": e.body}
    out["errors"] = errors
    print(json.dumps(out))


main()
