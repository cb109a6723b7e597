"""The FastAPI app: routes for models, chat completions and completions, over any `Policy`."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from starlette.requests import Request  # route signatures are resolved at runtime

from skyrl_sdk.agents.policy import (
    Completion,
    GenerationContext,
    Policy,
    PolicyError,
    SamplingParams,
    TokenChunk,
)
from skyrl_sdk.agents.serving.auth import SESSION_SCOPE_KEY, SessionGate, SessionKeys
from skyrl_sdk.agents.serving.capture import DEFAULT_SESSION, Answer, SessionStore
from skyrl_sdk.agents.serving.config import ServeConfig
from skyrl_sdk.agents.serving.generation import (
    ClientDisconnected,
    Reply,
    TextDeltas,
    reply,
    token_stream,
    until_disconnect,
)
from skyrl_sdk.agents.serving.prompts import (
    chat_prompt,
    encode_within,
    normalize_messages,
    reply_key,
)
from skyrl_sdk.agents.serving.protocol import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    parse_body,
    usage,
)
from skyrl_sdk.agents.serving.sse import DONE, EventStreamResponse, event, json_response
from skyrl_sdk.agents.serving.tool_output import ToolOutputFormat
from skyrl_sdk.http_guard import ErrorStyle, GuardConfig, install

if TYPE_CHECKING:
    from fastapi import FastAPI

    from skyrl_sdk.agents.chat import ChatRenderer

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/health"})
"""Served without a key: liveness probes carry no credentials."""


@dataclass(frozen=True)
class Plan:
    """One request, validated: what to generate and how to answer."""

    session: str
    """The session it belongs to."""
    prompt: tuple[int, ...]
    """Prompt ids (empty for a policy without a tokenizer)."""
    messages: tuple[dict[str, Any], ...]
    """Normalized chat messages (empty for completions)."""
    sampling: SamplingParams
    """Sampling for choice 0 (choice i uses seed + i)."""
    n: int
    """Choices."""
    stops: tuple[str, ...]
    """Stop strings (cut from the text)."""
    tool_format: ToolOutputFormat | None
    """How to read tool calls (None: tools not offered)."""

    def sampling_for(self, index: int) -> SamplingParams:
        """Choice `index`'s sampling: its own seed."""
        if index == 0 or self.sampling.seed is None:
            return self.sampling
        return replace(self.sampling, seed=self.sampling.seed + index)


class Server:
    """What the routes share: the policy, its renderer, the sessions."""

    def __init__(
        self,
        policy: Policy,
        config: ServeConfig,
        renderer: ChatRenderer | None,
        store: SessionStore,
    ):
        self.policy = policy
        self.config = config
        self.renderer = renderer
        self.store = store
        self.created = int(time.time())
        self.context_limit: int | None = getattr(policy, "max_context_tokens", None)

    # -- validation -----------------------------------------------------------------------

    def check_model(self, model: str) -> None:
        if model != self.config.model_name:
            raise ApiError(
                404,
                f"the model {model!r} does not exist; this server serves "
                f"{self.config.model_name!r}",
                param="model",
                code="model_not_found",
            )

    def session_of(self, request: Request, user: str | None) -> str:
        return request.scope.get(SESSION_SCOPE_KEY) or user or DEFAULT_SESSION

    def sampling(
        self,
        req: ChatRequest | CompletionRequest,
        prompt_len: int,
        *,
        stop_token_ids: Sequence[int],
        top_logprobs: int,
        limit_param: str,
    ) -> SamplingParams:
        limit = self.context_limit
        room = None if limit is None or not prompt_len else limit - prompt_len
        if room is not None and room < 1:
            raise ApiError(
                400,
                f"this model's maximum context length is {limit} tokens and the prompt has "
                f"{prompt_len}: no room for a reply",
                param="messages" if isinstance(req, ChatRequest) else "prompt",
                code="context_length_exceeded",
            )
        asked = req.token_limit()
        if asked is None:
            max_tokens = room if room is not None else self.config.default_max_tokens
        elif room is not None and asked > room:
            raise ApiError(
                400,
                f"this model's maximum context length is {limit} tokens; you requested "
                f"{prompt_len + asked} ({prompt_len} in the prompt, {asked} for the reply)",
                param=limit_param,
                code="context_length_exceeded",
            )
        else:
            max_tokens = asked
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            stop=req.stops(),
            stop_token_ids=tuple(stop_token_ids),
            seed=req.seed,
            top_logprobs=top_logprobs,
        )

    def context(self, plan: Plan) -> GenerationContext:
        """The generation context of the session's next call (its turn index)."""
        turn = self.store.next_call(plan.session)
        return GenerationContext(plan.session, plan.session, turn, plan.messages)  # type: ignore[arg-type]

    # -- generation -----------------------------------------------------------------------

    async def generate(self, plan: Plan) -> tuple[list[Reply], float]:
        """All choices, together (the engine batches them); seconds taken."""
        started = time.perf_counter()
        contexts = [self.context(plan) for _ in range(plan.n)]
        completions = await asyncio.gather(
            *(
                self.policy.generate(plan.prompt, plan.sampling_for(i), context=contexts[i])
                for i in range(plan.n)
            )
        )
        replies = [reply(c, plan.stops, plan.tool_format) for c in completions]
        return replies, time.perf_counter() - started

    def capture(self, plan: Plan, index: int, r: Reply, llm_s: float) -> None:
        """Record choice 0 as the session's turn; remember other choices' ids."""
        key = None
        if plan.messages:
            calls = [
                {"function": {"name": c.name, "arguments": c.arguments}} for c in r.output.calls
            ]
            key = reply_key(r.content or "", calls)
        if index > 0:
            if key is not None:
                self.store.remember(plan.session, key, r.completion.token_ids)
            return
        self.store.record(
            plan.session,
            Answer(
                prompt_ids=plan.prompt,
                messages=plan.messages,
                completion=r.completion,
                action=r.text,
                reply_key=key,
                tool_calls=r.output.calls,
                parse_error=r.output.error,
                llm_s=llm_s,
            ),
        )

    # -- response pieces ------------------------------------------------------------------

    def token_text(self, token_id: int) -> str:
        return self.renderer.decode([token_id]) if self.renderer is not None else ""

    def chat_logprobs(self, c: Completion, top: int) -> dict[str, Any] | None:
        if c.logprobs is None:
            return None
        content = []
        for k, (token, lp) in enumerate(zip(c.token_ids, c.logprobs, strict=True)):
            text = self.token_text(token)
            alternatives = []
            if top and c.top_logprobs is not None:
                for alt, alt_lp in c.top_logprobs[k][:top]:
                    alt_text = self.token_text(alt)
                    alternatives.append(
                        {"token": alt_text, "logprob": alt_lp, "bytes": list(alt_text.encode())}
                    )
            content.append(
                {
                    "token": text,
                    "logprob": lp,
                    "bytes": list(text.encode()),
                    "top_logprobs": alternatives,
                }
            )
        return {"content": content, "refusal": None}

    def completion_logprobs(self, c: Completion, top: int) -> dict[str, Any] | None:
        if c.logprobs is None:
            return None
        tokens = [self.token_text(t) for t in c.token_ids]
        offsets, at = [], 0
        for t in tokens:
            offsets.append(at)
            at += len(t)
        alternatives = None
        if top and c.top_logprobs is not None:
            alternatives = [
                {self.token_text(a): lp for a, lp in per[:top]} for per in c.top_logprobs
            ]
        return {
            "tokens": tokens,
            "token_logprobs": list(c.logprobs),
            "top_logprobs": alternatives,
            "text_offset": offsets,
        }


# -- chat ---------------------------------------------------------------------------------


def plan_chat(server: Server, request: Request, req: ChatRequest) -> Plan:
    server.check_model(req.model)
    if req.top_logprobs and not req.logprobs:
        raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    session = server.session_of(request, req.user)
    messages = normalize_messages(req.messages)
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
    offered = bool(tools) and req.tool_choice != "none"
    renderer = server.renderer
    if renderer is None:
        prompt: tuple[int, ...] = ()
        stop_ids: Sequence[int] = ()
    else:
        rendered = chat_prompt(
            renderer, messages, tools, server.store.replies(session), server.context_limit
        )
        prompt, stop_ids = rendered.token_ids, renderer.stop_token_ids
    param = "max_completion_tokens" if req.max_completion_tokens else "max_tokens"
    sampling = server.sampling(
        req,
        len(prompt),
        stop_token_ids=stop_ids,
        top_logprobs=(req.top_logprobs or 0) if req.logprobs else 0,
        limit_param=param,
    )
    return Plan(
        session=session,
        prompt=prompt,
        messages=tuple(messages),
        sampling=sampling,
        n=req.n,
        stops=req.stops(),
        tool_format=server.config.tool_format if offered else None,
    )


def chat_choice(server: Server, req: ChatRequest, index: int, r: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": r.content, "refusal": None}
    if r.output.calls:
        message["tool_calls"] = r.output.openai_calls()
    choice: dict[str, Any] = {
        "index": index,
        "message": message,
        "logprobs": server.chat_logprobs(r.completion, req.top_logprobs or 0)
        if req.logprobs
        else None,
        "finish_reason": r.finish_reason,
    }
    if req.return_token_ids:
        choice["token_ids"] = list(r.completion.token_ids)
    return choice


async def chat_response(server: Server, request: Request, req: ChatRequest, plan: Plan) -> Any:
    replies, llm_s = await until_disconnect(request.receive, server.generate(plan))
    for i, r in enumerate(replies):
        server.capture(plan, i, r, llm_s)
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": server.config.model_name,
        "choices": [chat_choice(server, req, i, r) for i, r in enumerate(replies)],
        "usage": usage(len(plan.prompt), sum(len(r.completion.token_ids) for r in replies)),
        "system_fingerprint": None,
    }
    if req.return_token_ids:
        body["prompt_token_ids"] = list(plan.prompt)
    return body


async def chat_events(
    server: Server, req: ChatRequest, plan: Plan, first: _Primed
) -> AsyncIterator[bytes]:
    head = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": server.config.model_name,
        "system_fingerprint": None,
    }
    totals = [0] * plan.n

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        choice.update(extra)
        payload = {**head, "choices": [choice]}
        if req.include_usage:
            payload["usage"] = None
        return event(payload)

    async def one(index: int, stream: _Primed) -> AsyncIterator[bytes]:
        yield chunk(index, {"role": "assistant", "content": ""})
        deltas = TextDeltas(server.renderer, plan.stops, tools=plan.tool_format is not None)
        completion = None
        async for item in stream:
            if isinstance(item, TokenChunk):
                text = deltas.push(item.token_ids)
                if text:
                    yield chunk(index, {"content": text})
            else:
                completion = item
        assert completion is not None
        r = reply(completion, plan.stops, plan.tool_format)
        server.capture(plan, index, r, stream.elapsed())
        totals[index] = len(completion.token_ids)
        rest = deltas.finish(r.content or "")
        if rest:
            yield chunk(index, {"content": rest})
        if r.output.calls:
            calls = [{**call, "index": k} for k, call in enumerate(r.output.openai_calls())]
            yield chunk(index, {"tool_calls": calls})
        extra: dict[str, Any] = {}
        if req.return_token_ids:
            extra["token_ids"] = list(completion.token_ids)
        final = chunk(index, {}, r.finish_reason, **extra)
        if req.logprobs:
            # All of the choice's logprobs at once, with its last chunk (clients concatenate).
            final = chunk(
                index,
                {},
                r.finish_reason,
                **{**extra, "logprobs": server.chat_logprobs(completion, req.top_logprobs or 0)},
            )
        yield final

    streams = [first] + [_Primed(server, plan, i) for i in range(1, plan.n)]
    async for data in _guarded(_merge([one(i, s) for i, s in enumerate(streams)])):
        yield data
    if req.include_usage:
        payload = {**head, "choices": [], "usage": usage(len(plan.prompt), sum(totals))}
        yield event(payload)
    yield DONE


# -- completions ----------------------------------------------------------------------------


def plan_completion(server: Server, request: Request, req: CompletionRequest) -> Plan:
    server.check_model(req.model)
    if req.echo:
        raise ApiError(400, "echo is not supported", param="echo")
    renderer = server.renderer
    if renderer is None:
        raise ApiError(
            400,
            "this server's policy has no tokenizer: use /v1/chat/completions",
            param="prompt",
        )
    limit = server.context_limit
    if isinstance(req.prompt, str):
        encoded = encode_within(renderer, req.prompt, limit)
        if encoded is None:
            raise ApiError(
                400,
                f"the prompt is far longer than the model's context of {limit} tokens",
                param="prompt",
                code="context_length_exceeded",
            )
        prompt = tuple(encoded)
    else:
        prompt = tuple(req.prompt)
        vocab = len(renderer.tokenizer)
        bad = next((t for t in prompt if not 0 <= t < vocab), None)
        if bad is not None:
            raise ApiError(
                400, f"token id {bad} is outside the vocabulary (0..{vocab - 1})", param="prompt"
            )
    if not prompt:
        raise ApiError(400, "the prompt is empty", param="prompt")
    sampling = server.sampling(
        req,
        len(prompt),
        stop_token_ids=req.stop_token_ids,
        top_logprobs=req.logprobs or 0,
        limit_param="max_tokens",
    )
    session = server.session_of(request, req.user)
    return Plan(session, prompt, (), sampling, req.n, req.stops(), None)


def completion_choice(
    server: Server, req: CompletionRequest, plan: Plan, index: int, r: Reply
) -> dict[str, Any]:
    c = r.completion
    choice: dict[str, Any] = {
        "index": index,
        "text": r.text,
        "logprobs": server.completion_logprobs(c, req.logprobs or 0)
        if req.logprobs is not None
        else None,
        "finish_reason": r.finish_reason,
    }
    if req.return_token_ids:
        choice["token_ids"] = list(c.token_ids)
        choice["prompt_token_ids"] = list(plan.prompt)
    return choice


async def completion_response(
    server: Server, request: Request, req: CompletionRequest, plan: Plan
) -> Any:
    replies, llm_s = await until_disconnect(request.receive, server.generate(plan))
    for i, r in enumerate(replies):
        server.capture(plan, i, r, llm_s)
    choices = [completion_choice(server, req, plan, i, r) for i, r in enumerate(replies)]
    return {
        "id": f"cmpl-{uuid.uuid4().hex[:24]}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": server.config.model_name,
        "choices": choices,
        "usage": usage(len(plan.prompt), sum(len(r.completion.token_ids) for r in replies)),
        "policy_version": max(r.completion.policy_version for r in replies),
    }


async def completion_events(
    server: Server, req: CompletionRequest, plan: Plan, first: _Primed
) -> AsyncIterator[bytes]:
    head = {
        "id": f"cmpl-{uuid.uuid4().hex[:24]}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": server.config.model_name,
    }
    totals = [0] * plan.n

    def chunk(index: int, text: str, finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
        choice.update(extra)
        payload = {**head, "choices": [choice]}
        if req.include_usage:
            payload["usage"] = None
        return event(payload)

    async def one(index: int, stream: _Primed) -> AsyncIterator[bytes]:
        deltas = TextDeltas(server.renderer, plan.stops, tools=False)
        completion = None
        async for item in stream:
            if isinstance(item, TokenChunk):
                text = deltas.push(item.token_ids)
                if text:
                    yield chunk(index, text)
            else:
                completion = item
        assert completion is not None
        r = reply(completion, plan.stops, None)
        server.capture(plan, index, r, stream.elapsed())
        totals[index] = len(completion.token_ids)
        extra: dict[str, Any] = {}
        if req.return_token_ids:
            extra["token_ids"] = list(completion.token_ids)
            extra["prompt_token_ids"] = list(plan.prompt)
        if req.logprobs is not None:
            extra["logprobs"] = server.completion_logprobs(completion, req.logprobs)
        yield chunk(index, deltas.finish(r.text), r.finish_reason, **extra)

    streams = [first] + [_Primed(server, plan, i) for i in range(1, plan.n)]
    async for data in _guarded(_merge([one(i, s) for i, s in enumerate(streams)])):
        yield data
    if req.include_usage:
        yield event({**head, "choices": [], "usage": usage(len(plan.prompt), sum(totals))})
    yield DONE


# -- streaming plumbing -------------------------------------------------------------------


class _Primed:
    """A choice's token stream whose first item is fetched before the response starts, so
    that a policy failing at once (a script with no reply left) is a plain HTTP error."""

    def __init__(self, server: Server, plan: Plan, index: int):
        self.started = time.perf_counter()
        self.finished: float | None = None
        self._inner = token_stream(
            server.policy, plan.prompt, plan.sampling_for(index), server.context(plan)
        )
        self._first: TokenChunk | Completion | None = None

    async def prime(self) -> None:
        self._first = await self._inner.__anext__()

    def elapsed(self) -> float:
        return (self.finished or time.perf_counter()) - self.started

    async def __aiter__(self) -> AsyncIterator[TokenChunk | Completion]:
        try:
            if self._first is not None:
                first, self._first = self._first, None
                yield first
                if isinstance(first, Completion):
                    return
            async for item in self._inner:
                if isinstance(item, Completion):
                    self.finished = time.perf_counter()
                yield item
        finally:
            await self._inner.aclose()

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _guarded(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`events`, with a failure mid-stream sent as an OpenAI error event (the SDK raises it)."""
    try:
        async for data in events:
            yield data
    except ApiError as e:
        yield event(e.body())
    except PolicyError as e:
        yield event(ApiError(500, str(e), code="policy_error").body())
    except asyncio.CancelledError:
        raise
    except Exception as e:  # never a silent hang: the client learns the stream failed
        log.exception("streaming failed")
        yield event(ApiError(500, f"generation failed: {type(e).__name__}").body())


async def _merge(streams: list[AsyncIterator[bytes]]) -> AsyncIterator[bytes]:
    """Interleave several choices' events as they come (one stream: passed through)."""
    if len(streams) == 1:
        async for data in streams[0]:
            yield data
        return
    queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()

    async def drain(stream: AsyncIterator[bytes]) -> None:
        try:
            async for data in stream:
                await queue.put(data)
            await queue.put(None)
        except BaseException as e:
            await queue.put(e)

    tasks = [asyncio.ensure_future(drain(s)) for s in streams]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _start_stream(server: Server, plan: Plan) -> _Primed:
    first = _Primed(server, plan, 0)
    try:
        await first.prime()
    except BaseException:
        await first.aclose()
        raise
    return first


# -- the app --------------------------------------------------------------------------------


def create_app(
    policy: Policy,
    config: ServeConfig | None = None,
    *,
    renderer: ChatRenderer | None = None,
    store: SessionStore | None = None,
    keys: SessionKeys | None = None,
) -> FastAPI:
    """The FastAPI app serving `policy` (see the package docstring for what it guarantees).

    `renderer`: the chat template and tokenizer requests are rendered with (default: the
    policy's). `store` / `keys`: the sessions and session keys (default: new ones).
    """
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException as StarletteHTTPException

    config = config or ServeConfig()
    server = Server(
        policy,
        config,
        renderer if renderer is not None else policy.renderer,
        store or SessionStore(policy.name, config.capture_dir),
    )
    app = FastAPI(title="skyrl serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = server
    install(
        app,
        GuardConfig(
            api_key=None,  # keys are SessionGate's job (it also knows the session keys)
            max_request_bytes=config.max_request_bytes,
            open_paths=OPEN_PATHS,
            error_style=ErrorStyle.OPENAI,
        ),
    )
    app.add_middleware(
        SessionGate, api_key=config.api_key, keys=keys or SessionKeys(), open_paths=OPEN_PATHS
    )

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(ClientDisconnected)
    async def client_gone(request: Request, e: ClientDisconnected) -> Response:
        return Response(status_code=499)  # nobody reads it; the generation was cancelled

    @app.exception_handler(PolicyError)
    async def policy_error(request: Request, e: PolicyError) -> JSONResponse:
        return JSONResponse(ApiError(500, str(e), code="policy_error").body(), status_code=500)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        message = (
            f"no such path: {request.method} {request.url.path}"
            if e.status_code == 404
            else str(e.detail)
        )
        return JSONResponse(ApiError(e.status_code, message).body(), status_code=e.status_code)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception) -> JSONResponse:
        log.exception("request failed")
        body = ApiError(500, f"internal server error: {type(e).__name__}").body()
        return JSONResponse(body, status_code=500)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    def model_card() -> dict[str, Any]:
        return {
            "id": config.model_name,
            "object": "model",
            "created": server.created,
            "owned_by": "skyrl",
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> dict[str, Any]:
        server.check_model(model_id)
        return model_card()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        req = parse_body(await request.body(), ChatRequest)
        plan = plan_chat(server, request, req)
        if not req.stream:
            return json_response(await chat_response(server, request, req, plan))
        first = await until_disconnect(request.receive, _start_stream(server, plan))
        return EventStreamResponse(chat_events(server, req, plan, first))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        req = parse_body(await request.body(), CompletionRequest)
        plan = plan_completion(server, request, req)
        if not req.stream:
            return json_response(await completion_response(server, request, req, plan))
        first = await until_disconnect(request.receive, _start_stream(server, plan))
        return EventStreamResponse(completion_events(server, req, plan, first))

    return app
