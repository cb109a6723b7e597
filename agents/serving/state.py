"""What the routes share: a validated request (`Plan`) and the server's state (`Server`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from starlette.requests import Request  # route signatures are resolved at runtime

from skyrl_sdk.agents.engine.fairness import TenantQueueFull
from skyrl_sdk.agents.policy import (
    Completion,
    GenerationContext,
    Policy,
    SamplingParams,
)
from skyrl_sdk.agents.serving.auth import SESSION_SCOPE_KEY, SessionKeys
from skyrl_sdk.agents.serving.budget import BudgetExceeded, Ticket
from skyrl_sdk.agents.serving.capture import DEFAULT_SESSION, Answer, SessionStore
from skyrl_sdk.agents.serving.config import ServeConfig
from skyrl_sdk.agents.serving.generation import (
    ClientDisconnected,
    Reply,
    reply,
)
from skyrl_sdk.agents.serving.prompts import reply_key
from skyrl_sdk.agents.serving.protocol import (
    ApiError,
    ChatRequest,
    CompletionRequest,
)
from skyrl_sdk.agents.serving.tool_output import ToolOutputFormat
from skyrl_sdk.sampling_limits import stop_problem

if TYPE_CHECKING:
    from skyrl_sdk.agents.chat import ChatRenderer


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
    auxiliary: bool = False
    """A side conversation of the session (captured apart, not trained on by default)."""
    ticket: Ticket = field(default_factory=lambda: Ticket(None, 0), compare=False)
    """Its reservation of the session's token budget (`Server.admit`); counts what it
    generates."""

    def sampling_for(self, index: int) -> SamplingParams:
        """Choice `index`'s sampling: its own seed."""
        if index == 0 or self.sampling.seed is None:
            return self.sampling
        return replace(self.sampling, seed=self.sampling.seed + index)


def session_queue_full(e: TenantQueueFull) -> ApiError:
    """The 429 of a session whose queue of waiting requests is at its cap."""
    return ApiError(429, str(e), code="session_queue_full")


class Server:
    """What the routes share: the policy, its renderer, the sessions and their keys."""

    def __init__(
        self,
        policy: Policy,
        config: ServeConfig,
        renderer: ChatRenderer | None,
        store: SessionStore,
        keys: SessionKeys | None = None,
    ):
        self.policy = policy
        self.config = config
        self.renderer = renderer
        self.store = store
        self.keys = keys or SessionKeys(config.session_token_budget)
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
        param_names: Mapping[str, str] | None = None,
    ) -> SamplingParams:
        """The request's sampling for a `prompt_len`-token prompt; `ApiError` 400 when it
        does not fit the context or its stop lists are over the caps. `param_names` renames
        the fields those errors name to the route's own (the Messages API's `stop` is
        `stop_sequences`), so each route need not catch and remap them itself."""
        try:
            return self._sampling(
                req,
                prompt_len,
                stop_token_ids=stop_token_ids,
                top_logprobs=top_logprobs,
                limit_param=limit_param,
            )
        except ApiError as e:
            if param_names and e.param in param_names:
                e.param = param_names[e.param]
            raise

    def _sampling(
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
        # The one place every route's sampling passes: the shared caps on stop lists.
        problem = stop_problem(req.stops(), stop_token_ids)
        if problem is not None:
            param = "stop" if "string" in problem else "stop_token_ids"
            raise ApiError(400, f"invalid '{param}': {problem}", param=param, code="invalid_value")
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

    # -- admission ------------------------------------------------------------------------

    def admit(self, plan: Plan) -> Plan:
        """`plan` with its reservation of the session's token budget, if there is room for
        all of its choices in the session's queue and budget; else 429 (`session_queue_full`,
        `session_token_budget_exceeded`), in OpenAI's error shape. The engine's fairness
        policy caps the session's share of the batch; this refuses before anything queues."""
        room = getattr(self.policy, "queue_room", None)
        free = room(plan.session) if room is not None else None
        if free is not None and free < plan.n:
            cap = getattr(getattr(self.policy, "fairness", None), "max_queued", None)
            raise session_queue_full(TenantQueueFull(plan.session, cap or free))
        budget = self.keys.budget(plan.session)
        if budget is None:
            return plan
        try:
            ticket = budget.reserve(plan.session, plan.prompt, plan.n, plan.sampling.max_tokens)
        except BudgetExceeded as e:
            raise ApiError(429, str(e), code="session_token_budget_exceeded") from None
        return replace(plan, ticket=ticket)

    @contextlib.asynccontextmanager
    async def settling(self, plan: Plan, *, streamed: bool = False) -> AsyncIterator[None]:
        """Settle the plan's reservation when the block ends (a streamed answer's block only
        starts it: `settled` settles once the stream ends). A client that disconnected is
        charged the whole reservation."""
        try:
            yield
        except ClientDisconnected:
            plan.ticket.settle(whole=True)
            raise
        except BaseException:
            plan.ticket.settle()
            raise
        if not streamed:
            plan.ticket.settle()

    async def settled(self, plan: Plan, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """`events`, settling the plan's reservation when they end (closed early: the client
        went away, charged in full)."""
        complete = False
        try:
            async for data in events:
                yield data
            complete = True
        finally:
            plan.ticket.settle(whole=not complete)

    # -- generation -----------------------------------------------------------------------

    def check_admitted(self, plan: Plan) -> None:
        """Refuse to generate for a plan that skipped `admit` in a session with a budget: a
        route added later cannot forget the budget silently."""
        if plan.ticket.budget is None and self.keys.budget(plan.session) is not None:
            raise RuntimeError("a route generated without Server.admit (the session's budget)")

    async def generate(self, plan: Plan) -> tuple[list[Reply], float]:
        """All choices, together (the engine batches them); seconds taken. If one fails,
        the others are cancelled (they would hold rows of the batch for nobody)."""
        self.check_admitted(plan)
        started = time.perf_counter()
        contexts = [self.context(plan) for _ in range(plan.n)]
        tasks = [
            asyncio.ensure_future(
                self.policy.generate(plan.prompt, plan.sampling_for(i), context=contexts[i])
            )
            for i in range(plan.n)
        ]
        try:
            completions = await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
        plan.ticket.generated += sum(len(c.token_ids) for c in completions)
        plan.ticket.reply = completions[0].token_ids
        replies = [reply(c, plan.stops, plan.tool_format) for c in completions]
        return replies, time.perf_counter() - started

    async def capture(self, plan: Plan, index: int, r: Reply, llm_s: float) -> None:
        """Record choice 0 as the session's turn, on disk before the answer is sent (written
        from a worker thread, so a long session's file does not stall other requests). Other
        choices are kept as alternatives: the turn becomes the one the client continues from."""
        key = None
        if plan.messages:
            calls = [
                {"function": {"name": c.name, "arguments": c.arguments}} for c in r.output.calls
            ]
            key = reply_key(r.content or "", calls)
        answer = Answer(
            prompt_ids=plan.prompt,
            messages=plan.messages,
            completion=r.completion,
            action=r.text,
            reply_key=key,
            tool_calls=r.output.calls,
            parse_error=r.output.error,
            llm_s=llm_s,
            auxiliary=plan.auxiliary,
        )
        if index > 0:
            if key is not None:
                self.store.remember(plan.session, key, r.completion.token_ids)
            self.store.alternative(plan.session, answer)
            return
        write = self.store.record(plan.session, answer)
        if self.store.capture_dir is not None:
            await asyncio.to_thread(write)

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
