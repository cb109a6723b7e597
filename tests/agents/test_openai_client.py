"""`OpenAIClient` against scripted HTTP responses: token mode, chat fallback, retries, errors."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from skyrl_sdk.agents.openai_client import ApiMode, OpenAIClient, RetryPolicy, ServerError
from skyrl_sdk.agents.policy import FinishReason, GenerationContext, PolicyError, SamplingParams

FAST = RetryPolicy(attempts=3, backoff_s=0.001, timeout_s=5)
CONTEXT = GenerationContext("ep-1", "t-1", 0, ({"role": "user", "content": "hi"},))


def client(handler, renderer=None, api=ApiMode.AUTO, retry=FAST) -> OpenAIClient:
    return OpenAIClient(
        "http://test/v1",
        model="m",
        renderer=renderer,
        api=api,
        retry=retry,
        transport=httpx.MockTransport(handler),
    )


def generate(c: OpenAIClient, prompt=(1, 2, 3)):
    async def go():
        try:
            return await c.generate(
                prompt, SamplingParams(max_tokens=4, stop_token_ids=(9,)), context=CONTEXT
            )
        finally:
            await c.aclose()

    return asyncio.run(go())


def test_token_mode_sends_ids_and_keeps_returned_ids(chatml_renderer) -> None:
    seen = []
    eot = chatml_renderer.end_of_turn_id

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(
            (request.url.path, json.loads(request.content), request.headers.get("x-session-id"))
        )
        return httpx.Response(
            200,
            json={
                "choices": [
                    {
                        "text": "ignored",
                        "token_ids": [40, 41, eot],
                        "finish_reason": "stop",
                        "logprobs": {"token_logprobs": [-0.5, -0.25, -0.125]},
                    }
                ]
            },
        )

    c = generate(client(handler, chatml_renderer))
    path, body, session = seen[0]
    assert path == "/v1/completions" and body["prompt"] == [1, 2, 3] and body["return_token_ids"]
    assert body["stop_token_ids"] == [9] and session == "ep-1"
    assert c.token_ids == (40, 41, eot) and c.logprobs == (-0.5, -0.25, -0.125)
    assert not c.text_only and c.finish_reason is FinishReason.STOP
    assert c.text == chatml_renderer.decode([40, 41])


def test_auto_falls_back_to_chat_when_no_token_ids(chatml_renderer) -> None:
    paths = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        if request.url.path.endswith("/completions") and "chat" not in request.url.path:
            return httpx.Response(200, json={"choices": [{"text": "x", "finish_reason": "length"}]})
        body = json.loads(request.content)
        assert body["messages"] == [{"role": "user", "content": "hi"}]
        return httpx.Response(
            200, json={"choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}]}
        )

    c = client(handler, chatml_renderer)
    first = generate(c)
    assert first.text == "hello" and first.text_only and first.logprobs is None
    assert c.api is ApiMode.CHAT and paths == ["/v1/completions", "/v1/chat/completions"]
    with pytest.raises(PolicyError, match="no token ids"):
        generate(client(handler, chatml_renderer, api=ApiMode.TOKENS))


def test_retries_transient_failures_with_backoff(chatml_renderer) -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            raise httpx.ConnectError("refused")
        if len(calls) == 2:
            return httpx.Response(503, text="warming up")
        return httpx.Response(
            200,
            json={
                "choices": [
                    {
                        "token_ids": [5],
                        "finish_reason": "length",
                        "logprobs": {"token_logprobs": [-1.0]},
                    }
                ]
            },
        )

    c = generate(client(handler, chatml_renderer))
    assert len(calls) == 3 and c.token_ids == (5,) and c.finish_reason is FinishReason.LENGTH


def test_gives_up_with_a_clear_error(chatml_renderer) -> None:
    def down(request):
        raise httpx.ConnectError("connection refused")

    with pytest.raises(PolicyError, match="after 3 attempts: ConnectError"):
        generate(client(down, chatml_renderer))
    calls = []

    def bad_request(request):
        calls.append(1)
        return httpx.Response(401, text="bad key")

    with pytest.raises(ServerError, match="401: bad key") as info:
        generate(client(bad_request, chatml_renderer, api=ApiMode.TOKENS))
    assert info.value.status == 401 and len(calls) == 1  # not retried


def test_without_a_tokenizer_only_chat_is_possible() -> None:
    def handler(request):
        assert request.url.path == "/v1/chat/completions"
        return httpx.Response(
            200, json={"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}
        )

    c = client(handler, renderer=None, api=ApiMode.TOKENS)
    assert c.api is ApiMode.CHAT
    out = generate(c)
    assert out.text == "ok" and out.token_ids == () and out.text_only
