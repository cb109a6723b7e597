"""`skyrl serve`: an OpenAI-compatible server over any `Policy`, with token-exact capture.

Endpoints: `GET /health` (no key), `GET /v1/models`, `GET /v1/models/{id}`,
`POST /v1/chat/completions`, `POST /v1/completions`, `POST /v1/responses` (the Responses
API over the same rendering, sampling and capture: `responses_api`), `POST /v1/messages` and
`POST /v1/messages/count_tokens` (the Anthropic Messages API, likewise, with Anthropic's
events, errors and `x-api-key`; a harness's side conversations captured as `auxiliary`
segments: `messages_api`); each `/v1/...` path also answers under `/sessions/{id}/v1/...`.
What clients can rely on:

- **OpenAI's protocol.** Server-sent-event streaming (`stream`, with a final usage chunk for
  `stream_options.include_usage`); `tools` rendered by the chat template and tool calls parsed
  from the model's reply (Hermes/Qwen, Mistral, Llama 3 JSON) into `tool_calls` with
  `finish_reason: "tool_calls"`, streamed as tool-call deltas; `logprobs`/`top_logprobs`, `n`,
  `stop` (cut from the text), `seed`, `max_completion_tokens`; vLLM's `return_token_ids`
  (`prompt_token_ids`, each choice's `token_ids`). Errors are `{"error": {"message", "type",
  "param", "code"}}` with OpenAI's status codes; a bad field is a 400 naming it; `model` is
  required and must be the served one (else 404 `model_not_found`).
- **Limits.** `max_tokens` defaults to what the context leaves and may not exceed it (400
  `context_length_exceeded`); bodies over `max_request_bytes` get 413 unread; at most 4 stop
  strings of 256 characters and 256 `stop_token_ids` (400 naming the field; checked in
  `Server.sampling`, which every route's sampling passes, with `skyrl_sdk.sampling_limits`);
  a connection that does not send a whole request head within `header_timeout_s` (10 s) is
  closed.
- **Fair shares.** Sessions share the engine's batch through its scheduler's fairness policy
  (`agents/fairness.py`): a session holds at most half the batch (`n`'s choices included;
  `--session-max-rows`), at most 64 of its requests wait (`--session-max-queued`; one more is
  429 `session_queue_full`, checked for all `n` choices before any is queued), and the
  session with the fewest rows is admitted first. A session key carries a token budget
  (`--session-token-budget`, 200,000: new prompt tokens plus generated ones; past it 429
  `session_token_budget_exceeded`; see `budget`). Requests with neither a session URL nor a
  `user` share the session `default`, and so one share.
- **Determinism.** A `seed` gives the request its own sampler: the same request gives the
  same tokens streamed or not, alone or batched (choice i of `n` uses seed + i).
- **Cancellation.** A client that disconnects cancels its generation (streamed or not).
- **A malformed tool call** in the model's reply is returned as plain content
  (`finish_reason: "stop"`), and the capture keeps its parse error; never a 500.

Capture (`SessionStore`, `ServeConfig.capture_dir`): requests are grouped into sessions by
URL (`/sessions/{id}/v1`), else by the `user` field, else session `default`.

- Every answered request of a session is a turn of its trajectory (`agents/trajectory.py`
  format) with the exact sampled ids, logprobs and policy versions.
- When the client sends the conversation back, each assistant message that matches a reply
  the server gave in this session (same text up to outer whitespace, same tool names and
  arguments; call ids do not matter) is rendered as the ids that were sampled for it, not as
  re-tokenized text. So an ordinary multi-turn, tool-calling session is one segment whose ids
  are exactly what the policy saw and sampled, non-canonical tokenizations included.
- A request whose prompt ids start with the previous turn's ids continues the segment (the
  ids in between are the previous turn's `observation_ids`, mask 0); any other prompt (the
  harness edited or dropped history) starts a new segment marked `history_edited`, holding
  that prompt as it was given to the policy; nothing is silently re-tokenized.
- After each answered turn the session's trajectory so far is on disk as
  `DIR/<session>.jsonl`: one line, replaced atomically, so a reader (`skyrl view`,
  `skyrl train`, a check while the server runs) always sees a whole trajectory.
- Captured trajectories have `env_id` "serve", reward 0 and stop reason `done`: the server
  knows no reward; whoever runs the episode scores it.

Keys: `ServeConfig.api_key` opens everything; `RunningServer.issue_session_key(id)` makes a
key that opens only `/sessions/{id}/v1`, for the session's token budget (see `auth`, `budget`).
"""

try:
    import starlette  # noqa: F401  (fastapi's base; the server extra brings both)
    import uvicorn  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(
        f"skyrl serve needs the 'server' extra ({e.name} is missing): "
        "pip install 'skyrl-sdk[server]'"
    ) from e

from skyrl_sdk.agents.serving.app import create_app
from skyrl_sdk.agents.serving.capture import SessionStore
from skyrl_sdk.agents.serving.config import ServeConfig
from skyrl_sdk.agents.serving.runner import RunningServer, start_server
from skyrl_sdk.agents.serving.tool_output import ToolOutputFormat

__all__ = [
    "RunningServer",
    "ServeConfig",
    "SessionStore",
    "ToolOutputFormat",
    "create_app",
    "start_server",
]
