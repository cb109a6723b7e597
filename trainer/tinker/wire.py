"""Wire shapes of the Tinker API: pydantic models for JSON bodies, and protobuf conversion.

JSON requests are validated here (extra keys allowed, since newer SDKs add fields). The
forward_backward request and the forward_backward / sample results travel as protobuf in SDK
0.25+; this module converts between those messages and the plain `Datum` / result objects the
backend uses. The protobuf classes come from the installed `tinker` package (the `tinker` extra).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from skyrl_sdk.sampling_limits import sampled_tokens_problem, stop_problem
from skyrl_sdk.trainer.tinker.errors import ServiceError, Status

DEFAULT_SAMPLE_MAX_TOKENS = 64
"""Tokens per sample when a request gives no `max_tokens` (the backend's default)."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow")


# -- JSON requests --------------------------------------------------------------------------


class CreateSessionRequest(_Wire):
    """`POST /create_session`."""

    tags: list[str] = []
    user_metadata: dict[str, Any] | None = None
    sdk_version: str | None = None
    project_id: str | None = None
    display_name: str | None = None


class FinishSessionRequest(_Wire):
    """`POST /sessions/{id}/finish`: why the client is done."""

    reason: dict[str, Any] | None = None
    detail: str | None = None


class SessionRequest(_Wire):
    """A request naming only its session (heartbeat)."""

    session_id: str


class CreateModelRequest(_Wire):
    """`POST /create_model`: a trainable copy of a served base model."""

    session_id: str
    model_seq_id: int = 0
    base_model: str
    lora_config: dict[str, Any] | None = None
    """The SDK's LoRA settings (`rank`, `train_attn`, `train_mlp`, `train_unembed`, `seed`);
    `lora.from_request` turns them into the trainer's `LoRAConfig`."""
    user_metadata: dict[str, Any] | None = None


class ModelRequest(_Wire):
    """A request naming a model (get_info, unload_model)."""

    model_id: str


class AdamParams(_Wire):
    """AdamW hyperparameters of one optimizer step (decoupled weight decay)."""

    learning_rate: float = Field(1e-4, ge=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    eps: float = Field(1e-12, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip_norm: float = Field(0.0, ge=0)


class OptimStepRequest(_Wire):
    """`POST /optim_step`."""

    model_id: str
    seq_id: int | None = None
    adam_params: AdamParams


class SaveWeightsRequest(_Wire):
    """`POST /save_weights` (save_state) and `/save_weights_for_sampler`."""

    model_id: str
    path: str | None = None
    seq_id: int | None = None
    sampling_session_seq_id: int | None = None
    kind: str | None = None
    ttl_seconds: int | None = Field(None, gt=0)
    overwrite: bool = False
    user_metadata: dict[str, Any] | None = None


class LoadWeightsRequest(_Wire):
    """`POST /load_weights`: either create-via-load (session addressing) or legacy (model_id)."""

    path: str
    optimizer: bool = False
    session_id: str | None = None
    model_seq_id: int | None = None
    model_id: str | None = None
    seq_id: int | None = None
    base_model: str | None = None
    user_metadata: dict[str, Any] | None = None


class CreateSamplingSessionRequest(_Wire):
    """`POST /create_sampling_session`: a sampler of a base model or of saved weights."""

    session_id: str
    sampling_session_seq_id: int = 0
    base_model: str | None = None
    model_path: str | None = None


class EncodedTextChunk(_Wire):
    """A chunk of token ids (the only chunk type served)."""

    type: Literal["encoded_text"] = "encoded_text"
    tokens: list[int]


class ModelInput(_Wire):
    """A prompt: token chunks, concatenated."""

    chunks: list[EncodedTextChunk]

    def tokens(self) -> list[int]:
        """All token ids in order."""
        return [t for c in self.chunks for t in c.tokens]


class SamplingParamsIn(_Wire):
    """Sampling settings; `stop` is absent (EOS), `[]` (never), strings, or token ids.

    The one model every sampling route parses its settings with, so its limits hold for every
    endpoint: stop lists within `skyrl_sdk.sampling_limits`' caps, else 400 (raised as a
    `ServiceError`, which pydantic passes through unwrapped, so it is not a 422)."""

    max_tokens: int | None = Field(None, ge=0)
    seed: int | None = None
    stop: str | list[str] | list[int] | None = None
    temperature: float = Field(1.0, ge=0)
    top_k: int = -1
    top_p: float = Field(1.0, gt=0, le=1)

    @field_validator("stop")
    @classmethod
    def _stop_within_caps(cls, value: str | list[str] | list[int] | None) -> Any:
        items: list[Any] = [value] if isinstance(value, str) else list(value or [])
        strings = [s for s in items if isinstance(s, str)]
        ids = [s for s in items if not isinstance(s, str)]
        problem = stop_problem(strings, ids)
        if problem is not None:
            raise ServiceError(Status.BAD_REQUEST, f"sampling_params.stop: {problem}")
        return value

    def token_limit(self) -> int:
        """Tokens per sample asked for (the default when none is given)."""
        return DEFAULT_SAMPLE_MAX_TOKENS if self.max_tokens is None else self.max_tokens


class SampleRequest(_Wire):
    """`POST /asample`."""

    num_samples: int = Field(1, ge=1, le=256)
    prompt: ModelInput
    sampling_params: SamplingParamsIn
    sampling_session_id: str | None = None
    base_model: str | None = None
    model_path: str | None = None
    prompt_logprobs: bool = False

    @model_validator(mode="after")
    def _work_within_cap(self) -> SampleRequest:
        problem = sampled_tokens_problem(self.num_samples, self.sampling_params.token_limit())
        if problem is not None:
            raise ServiceError(Status.BAD_REQUEST, problem)
        return self

    def work(self) -> int:
        """Tokens it may sample: `num_samples x max_tokens`."""
        return self.num_samples * self.sampling_params.token_limit()


class FutureRequest(_Wire):
    """`POST /retrieve_future`."""

    request_id: str
    allow_metadata_only: bool = False


class CancelRequest(_Wire):
    """`POST /cancel_future`: the client abandoned a sampling request."""

    request_id: str


class WeightsInfoRequest(_Wire):
    """`POST /weights_info`."""

    tinker_path: str


class TtlRequest(_Wire):
    """`PUT .../checkpoints/{id}/ttl`: seconds from now until expiry (None: never)."""

    ttl_seconds: int | None = Field(None, gt=0)


class SessionSearchRequest(_Wire):
    """`POST /sessions/search` (the filters a local server can apply)."""

    session_id: str | None = None
    display_name: str | None = None
    user_metadata: dict[str, str] = {}
    statuses: list[dict[str, Any]] | None = None
    limit: int = Field(50, ge=1, le=200)
    cursor: dict[str, Any] | None = None


class TensorDataIn(_Wire):
    """A JSON tensor (legacy SDKs): flat data, dtype, optional shape."""

    data: list[float] | list[int]
    dtype: str = "float32"
    shape: list[int] | None = None


class DatumIn(_Wire):
    """A JSON datum (legacy SDKs)."""

    model_input: ModelInput
    loss_fn_inputs: dict[str, TensorDataIn]


class ForwardBackwardInputIn(_Wire):
    """The `forward_backward_input` of a legacy JSON forward_backward body."""

    data: list[DatumIn]
    loss_fn: str
    loss_fn_config: dict[str, float | str] | None = None


class ForwardBackwardJSON(_Wire):
    """A legacy (SDK <= 0.24) JSON forward_backward body."""

    model_id: str
    seq_id: int | None = None
    forward_backward_input: ForwardBackwardInputIn


# -- backend-facing values ------------------------------------------------------------------


@dataclass(frozen=True)
class Datum:
    """One training example: input tokens and per-token loss inputs (all length N)."""

    tokens: list[int]
    """Model input ids; position i predicts `loss_fn_inputs["target_tokens"][i]`."""
    loss_fn_inputs: dict[str, np.ndarray]
    """Named arrays: target_tokens, weights, logprobs, advantages."""


@dataclass(frozen=True)
class ForwardBackwardCall:
    """One forward_backward (or forward) request, decoded."""

    model_id: str
    seq_id: int | None
    data: list[Datum]
    loss_fn: str
    loss_fn_config: dict[str, float | str] = field(default_factory=dict)
    forward_only: bool = False


def _pb() -> Any:
    try:
        from tinker.proto import tinker_public_pb2
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the Tinker server needs the SDK's protobuf: pip install tinker") from e
    return tinker_public_pb2


_NP_OF_DTYPE = {1: np.float32, 2: np.int64, 3: np.int32}


def _tensor_from_proto(msg: Any) -> np.ndarray:
    dtype = _NP_OF_DTYPE.get(msg.dtype)
    if dtype is None:
        raise ValueError(f"unsupported tensor dtype {msg.dtype}")
    shape = list(msg.shape)
    if msg.WhichOneof("encoding") == "sparse_csr":
        if len(shape) != 2:
            raise ValueError("a sparse tensor needs a 2-D shape")
        values = np.frombuffer(msg.sparse_csr.values, dtype=dtype)
        crow = np.frombuffer(msg.sparse_csr.crow_indices, dtype=np.int64)
        col = np.frombuffer(msg.sparse_csr.col_indices, dtype=np.int64)
        dense = np.zeros(shape, dtype=dtype)
        for row in range(shape[0]):
            lo, hi = int(crow[row]), int(crow[row + 1])
            dense[row, col[lo:hi]] = values[lo:hi]
        return dense
    arr = np.frombuffer(msg.dense, dtype=dtype).copy()
    return arr.reshape(shape) if shape else arr


def decode_forward_backward(body: bytes) -> ForwardBackwardCall:
    """Decode a protobuf `ForwardBackwardRequest` body."""
    pb = _pb()
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as e:
        raise ValueError(f"invalid ForwardBackwardRequest protobuf: {e}") from e
    data = []
    for d in msg.data:
        tokens: list[int] = []
        for chunk in d.model_input:
            if chunk.WhichOneof("chunk") != "encoded_text":
                raise ValueError("only encoded_text chunks are supported")
            tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())
        inputs = {k: _tensor_from_proto(v) for k, v in d.loss_fn_inputs.items()}
        data.append(Datum(tokens=tokens, loss_fn_inputs=inputs))
    config: dict[str, float | str] = dict(msg.loss_fn_config)
    for k, v in msg.loss_fn_config_v2.items():
        config[k] = v.number if v.WhichOneof("value") == "number" else v.text
    return ForwardBackwardCall(
        model_id=msg.model_id,
        seq_id=msg.seq_id or None,
        data=data,
        loss_fn=msg.loss_fn,
        loss_fn_config=config,
        forward_only=msg.forward_only,
    )


def decode_forward_backward_json(
    body: ForwardBackwardJSON, forward_only: bool
) -> ForwardBackwardCall:
    """Convert a legacy JSON forward_backward body."""
    data = []
    for d in body.forward_backward_input.data:
        inputs = {}
        for k, t in d.loss_fn_inputs.items():
            arr = np.asarray(t.data, dtype=np.int64 if t.dtype == "int64" else np.float32)
            inputs[k] = arr.reshape(t.shape) if t.shape else arr
        data.append(Datum(tokens=d.model_input.tokens(), loss_fn_inputs=inputs))
    fbi = body.forward_backward_input
    return ForwardBackwardCall(
        model_id=body.model_id,
        seq_id=body.seq_id,
        data=data,
        loss_fn=fbi.loss_fn,
        loss_fn_config=dict(fbi.loss_fn_config or {}),
        forward_only=forward_only,
    )


# -- results: stored as JSON, sent as JSON or protobuf ---------------------------------------


def forward_backward_to_proto(result: dict[str, Any]) -> bytes:
    """Encode a stored forward_backward result (`outputs`, `metrics`) as protobuf."""
    pb = _pb()
    outputs: list[dict[str, list[float]]] = result["loss_fn_outputs"]
    record = pb.ArrayRecord(type_tag="ArrayRecord", num_datums=len(outputs))
    names = sorted(outputs[0]) if outputs else []
    for name in names:
        arrays = [np.asarray(o[name], dtype=np.float32) for o in outputs]
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([a.nbytes for a in arrays])
        record.fields[name].CopyFrom(
            pb.BatchedTensor(
                data=b"".join(a.tobytes() for a in arrays),
                offsets=offsets.tobytes(),
                dtype=pb.DTYPE_FLOAT32,
            )
        )
    out = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=[record])
    for k, v in result["metrics"].items():
        out.metrics[k] = float(v)
    return out.SerializeToString()


def forward_backward_to_json(result: dict[str, Any]) -> dict[str, Any]:
    """The legacy JSON form of a forward_backward result."""
    outputs = [
        {k: {"data": v, "dtype": "float32", "shape": [len(v)]} for k, v in o.items()}
        for o in result["loss_fn_outputs"]
    ]
    return {
        "loss_fn_output_type": "ArrayRecord",
        "loss_fn_outputs": outputs,
        "metrics": result["metrics"],
    }


def sample_to_proto(result: dict[str, Any]) -> bytes:
    """Encode a stored sample result (`sequences`, `prompt_logprobs`) as protobuf."""
    pb = _pb()
    msg = pb.SampleResponse(prompt_cache_hit_tokens=0)
    for s in result["sequences"]:
        msg.sequences.append(
            pb.SampledSequence(
                stop_reason=pb.STOP_REASON_STOP
                if s["stop_reason"] == "stop"
                else pb.STOP_REASON_LENGTH,
                tokens=np.asarray(s["tokens"], dtype=np.int32).tobytes(),
                logprobs=np.asarray(s["logprobs"], dtype=np.float32).tobytes(),
            )
        )
    if result.get("prompt_logprobs") is not None:
        lp = [float("nan") if v is None else v for v in result["prompt_logprobs"]]
        msg.prompt_logprobs = np.asarray(lp, dtype=np.float32).tobytes()
    return msg.SerializeToString()


def sample_to_json(result: dict[str, Any]) -> dict[str, Any]:
    """The legacy JSON form of a sample result."""
    return {
        "sequences": result["sequences"],
        "prompt_logprobs": result.get("prompt_logprobs"),
        "prompt_cache_hit_tokens": 0,
        "type": "sample",
    }


# -- JSON replies -----------------------------------------------------------------------------
#
# What the service returns and the routes send. Field order is the order of the keys on the
# wire; a field named in `_omit_when_none` is left out of the body when None (as the SDK's
# optional fields are absent, not null), every other field is always sent. `body()` is the
# one way a reply becomes JSON, so the bytes stay what they were when these were dicts.


class FailureCategory(StrEnum):
    """Whose fault a failed request is (the SDK's `RequestFailedError.category`)."""

    USER = "user"
    """A bad request: unknown model, bad checkpoint, a loss the server refuses."""
    SERVER = "server"
    """The server failed while executing it."""


class Reply(BaseModel):
    """A JSON reply of the Tinker API (frozen: built once, then only sent)."""

    model_config = ConfigDict(frozen=True)
    _omit_when_none: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in self._omit_when_none:
            if data.get(name, 0) is None:
                del data[name]
        return data

    def body(self) -> dict[str, Any]:
        """The reply as the JSON object sent (and stored as a future's result)."""
        return self.model_dump(mode="json", by_alias=True)


class RequestFailed(Reply):
    """A future's failure: the SDK raises it as `RequestFailedError`."""

    error: str
    """One line saying what went wrong."""
    category: FailureCategory
    """Whose fault it is."""


class FutureReply(Reply):
    """The SDK's `UntypedAPIFuture`: what every queued request answers at once."""

    _omit_when_none = frozenset({"model_id", "sample_sequence_ids"})
    request_id: str
    """The id to poll with `retrieve_future`."""
    model_id: str | None = None
    """The training run the request belongs to (absent for sampling)."""
    sample_sequence_ids: list[str] | None = None
    """One id per requested sample (asample only; SDK 0.26+ asserts on it)."""


class TryAgain(Reply):
    """`retrieve_future` of a request still pending after the long-poll."""

    type: Literal["try_again"] = "try_again"
    """The reply kind the SDK switches on."""
    request_id: str
    """The request polled."""
    queue_state: Literal["active"] = "active"
    """The queue is running (never paused locally)."""


class CancelReply(Reply):
    """`POST /cancel_future`."""

    request_id: str
    """The request asked about."""
    cancelled: bool
    """Whether this call cancelled it (False: it had settled already)."""
    state: str
    """Its state after the call (a `store.FutureState` value)."""


class CreateSessionReply(Reply):
    """`POST /create_session`."""

    session_id: str
    """The new session's id."""
    type: Literal["create_session"] = "create_session"
    """The reply kind."""


class CreateModelReply(Reply):
    """The result of a `create_model` future."""

    model_id: str
    """The new training run's id."""
    type: Literal["create_model"] = "create_model"
    """The result kind."""


class UnloadModelReply(Reply):
    """The result of an `unload_model` future."""

    model_id: str
    """The training run dropped."""
    type: Literal["unload_model"] = "unload_model"
    """The result kind."""


class OptimizerConfig(Reply):
    """The optimizer a model trains with (always AdamW here)."""

    type: Literal["adamw"] = "adamw"
    """The optimizer's name."""


class ModelData(Reply):
    """The SDK's `ModelData` of a training run."""

    _omit_when_none = frozenset({"tokenizer_id"})
    arch: str = "causal_lm"
    """Model family."""
    model_name: str
    """The base model."""
    tokenizer_id: str | None = None
    """Where its tokenizer is (absent when the base model is no longer served)."""


class GetInfoReply(Reply):
    """`POST /get_info`: the SDK's `GetInfoResponse`."""

    model_id: str
    """The training run."""
    model_data: ModelData
    """Its base model."""
    is_lora: bool
    """Whether it trains LoRA adapters."""
    lora_rank: int | None
    """The adapters' rank (null when full fine-tuning)."""
    model_name: str
    """The base model."""
    optimizer_config: OptimizerConfig = OptimizerConfig()
    """Its optimizer."""
    type: Literal["get_info"] = "get_info"
    """The reply kind."""


class SaveWeightsReply(Reply):
    """The result of a `save_weights` (save_state) future."""

    path: str
    """The tinker:// path of the checkpoint."""
    type: Literal["save_weights"] = "save_weights"
    """The result kind."""


class SaveForSamplerReply(Reply):
    """The result of a `save_weights_for_sampler` future."""

    _omit_when_none = frozenset({"sampling_session_id"})
    path: str | None
    """The tinker:// path of the checkpoint (null for an in-memory snapshot)."""
    sampling_session_id: str | None = None
    """The snapshot's sampling session (absent for a named checkpoint)."""
    type: Literal["save_weights_for_sampler"] = "save_weights_for_sampler"
    """The result kind."""


class LoadWeightsReply(Reply):
    """The result of a `load_weights` future."""

    _omit_when_none = frozenset({"model_id"})
    path: str
    """The checkpoint loaded."""
    model_id: str | None = None
    """The training run created from it (absent when loaded into an existing one)."""
    type: Literal["load_weights"] = "load_weights"
    """The result kind."""


class CreateSamplingSessionReply(Reply):
    """`POST /create_sampling_session`."""

    sampling_session_id: str
    """The new sampler's id."""
    type: Literal["create_sampling_session"] = "create_sampling_session"
    """The reply kind."""


class Checkpoint(Reply):
    """The SDK's `Checkpoint`."""

    checkpoint_id: str
    """`{kind}/{name}`."""
    checkpoint_type: str
    """`training` or `sampler`."""
    time: str | None
    """When it was saved (ISO-8601 UTC)."""
    tinker_path: str
    """Its tinker:// path."""
    size_bytes: int
    """Disk use of its files."""
    public: bool
    """Whether it is published."""
    user_metadata: dict[str, str]
    """The client's metadata."""
    expires_at: str | None
    """When its TTL runs out (null: never)."""


class TrainingRun(Reply):
    """The SDK's `TrainingRun`."""

    training_run_id: str
    """The model id."""
    base_model: str
    """Its base model."""
    model_owner: str
    """Always `local`."""
    is_lora: bool
    """Whether it trains LoRA adapters."""
    corrupted: bool
    """A restart lost its state."""
    lora_rank: int | None
    """The adapters' rank (null when full fine-tuning)."""
    last_request_time: str | None
    """Its last request (ISO-8601 UTC)."""
    last_checkpoint: Checkpoint | None
    """Its latest save_state."""
    last_sampler_checkpoint: Checkpoint | None
    """Its latest save_weights_for_sampler."""
    user_metadata: dict[str, str]
    """The client's metadata."""


class HeartbeatReply(Reply):
    """`POST /session_heartbeat` of a live session."""

    type: Literal["session_heartbeat"] = "session_heartbeat"
    """The reply kind."""


class StatusOk(Reply):
    """A request done with nothing to report (`POST /sessions/{id}/finish`)."""

    status: Literal["ok"] = "ok"
    """Always `ok`."""


class SessionIds(Reply):
    """`GET /sessions`: the ids of a page of sessions, newest first."""

    sessions: list[str]
    """Their ids."""


class SessionInfo(Reply):
    """`GET /sessions/{id}`: the SDK's `GetSessionResponse`."""

    training_run_ids: list[str]
    """Its training runs."""
    sampler_ids: list[str]
    """Its sampling sessions."""
    user_metadata: dict[str, str]
    """The client's metadata."""
    display_name: str | None
    """Its name, if the client gave one."""


class ActiveStatus(Reply):
    """A session its client has not finished."""

    type: Literal["active"] = "active"
    """The status kind."""


class FinishedStatus(Reply):
    """A session its client finished (`ServiceClient.close`)."""

    type: Literal["client_finished"] = "client_finished"
    """The status kind."""
    reason: dict[str, Any]
    """Why (`{"type": "success" | "errored" | "interrupted"}`)."""
    detail: str | None
    """The client's words, if any."""


class SessionSummary(Reply):
    """A session as the SDK's `SessionSummary`."""

    session_id: str
    """Its id."""
    created_at: str | None
    """When it was created (ISO-8601 UTC)."""
    owner: str
    """Always `local`."""
    project_id: str
    """Its project (`local` when none)."""
    status: ActiveStatus | FinishedStatus
    """Active, or finished by its client."""
    checkpoints_count: int
    """Checkpoints of its training runs."""
    display_name: str | None
    """Its name, if the client gave one."""
    user_metadata: dict[str, str]
    """The client's metadata."""
    checkpoint_storage_bytes: int
    """Disk use of those checkpoints."""


class SessionCursor(Reply):
    """Where the next page of a session search starts."""

    last_created_at: str | None
    """The creation time of the page's last session (ISO-8601 UTC)."""
    last_session_id: str
    """The page's last session."""


class SessionSearchReply(Reply):
    """`POST /sessions/search`."""

    sessions: list[SessionSummary]
    """The page of matching sessions, newest first."""
    next_cursor: SessionCursor | None
    """Where the next page starts (null: this was the last)."""


class PageCursor(Reply):
    """Where a page of a listing sits."""

    offset: int
    """Rows skipped."""
    limit: int
    """Most rows in the page."""
    total_count: int
    """Rows in all."""


class TrainingRunsReply(Reply):
    """`GET /training_runs`."""

    training_runs: list[TrainingRun]
    """A page of runs, newest first."""
    cursor: PageCursor
    """Where the page sits."""


class CheckpointsReply(Reply):
    """`GET /training_runs/{id}/checkpoints` and `GET /checkpoints`."""

    checkpoints: list[Checkpoint]
    """The checkpoints."""
    cursor: PageCursor | None
    """Where the page sits (null: one run's checkpoints, all of them)."""


class DeletedReply(Reply):
    """`DELETE` of a checkpoint."""

    deleted: str
    """Its tinker:// path."""


class PublishedReply(Reply):
    """Publishing or unpublishing a checkpoint."""

    tinker_path: str
    """The checkpoint."""
    public: bool
    """Whether it is published now."""


class TtlReply(Reply):
    """`PUT .../checkpoints/{id}/ttl`."""

    tinker_path: str
    """The checkpoint."""
    expires_at: float | None
    """When it expires now (Unix time; null: never)."""


class WeightsInfoReply(Reply):
    """`POST /weights_info`: the SDK's `WeightsInfoResponse`."""

    _omit_when_none = frozenset({"lora_rank", "train_attn", "train_mlp", "train_unembed"})
    base_model: str
    """The base model the weights were trained from."""
    optimizer_config: OptimizerConfig = OptimizerConfig()
    """The optimizer."""
    is_lora: bool
    """Whether they are LoRA adapters."""
    lora_rank: int | None = None
    """The adapters' rank (absent when full weights)."""
    train_attn: bool | None = None
    """Whether the adapters cover attention (absent when full weights)."""
    train_mlp: bool | None = None
    """Whether they cover the MLPs (absent when full weights)."""
    train_unembed: bool | None = None
    """Whether they cover the unembedding (absent when full weights)."""


class StorageUsage(Reply):
    """The checkpoints' disk use, as one billing item."""

    project_id: str | None
    """The project asked about (a local server has none)."""
    checkpoint_count: int
    """Checkpoints kept."""
    size_bytes: int
    """Their disk use."""
    size_gigabytes: float
    """The same in GB (1e9 bytes)."""


class StorageReply(Reply):
    """`GET /billing/usage/checkpoints/current`."""

    effective_rate_usd_per_gigabyte_month: float | None = None
    """Always null: a local server does no billing."""
    data: list[StorageUsage]
    """One item: every checkpoint."""


class SamplerInfo(Reply):
    """`GET /samplers/{id}`."""

    sampler_id: str
    """The sampling session."""
    base_model: str
    """The base model it samples."""
    model_path: str | None
    """The tinker:// path of its weights (null: the base model, or a snapshot)."""


class SupportedModel(Reply):
    """A base model the server serves."""

    model_name: str
    """Its name."""
    max_context_length: int
    """Most tokens of prompt plus sample."""
    trainable: bool = True
    """It can be trained."""
    sampleable: bool = True
    """It can be sampled."""


class ServerCapabilities(Reply):
    """`GET /get_server_capabilities`."""

    supported_models: list[SupportedModel]
    """The base models served."""


class ClientConfig(Reply):
    """`POST /client/config`: every optional SDK code path stays off."""

    pjwt_auth_enabled: bool = False
    """No JWT exchange: the API key is sent as is."""


class DynamicConfig(Reply):
    """`POST /client/dynamic_config`."""

    refresh_interval_sec: int = 300
    """How often the SDK asks again."""
    sample_cancel_enabled: bool = True
    """The SDK cancels the sampling requests it abandons (`/cancel_future`)."""
