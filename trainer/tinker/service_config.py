"""How the Tinker server runs (`ServerConfig`), shared by the service's parts."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from skyrl_sdk.http_guard import DEFAULT_HEADER_TIMEOUT_S, DEFAULT_MAX_REQUEST_BYTES
from skyrl_sdk.sampling_limits import MAX_SAMPLED_TOKENS
from skyrl_sdk.trainer.tinker.backend import DEFAULT_MICRO_BATCH_TOKENS, BaseModelSpec


class TokenizerIds(StrEnum):
    """What `get_info` reports as a model's `tokenizer_id` (the `tinker` SDK's
    `TrainingClient.get_tokenizer()` loads it with `AutoTokenizer.from_pretrained`)."""

    PATH = "path"
    """The tokenizer's directory on the server: loads only on the server's machine."""
    NAME = "name"
    """The base model's name: loads wherever the tokenizer is in the Hugging Face cache under
    that name (`skyrl tinker tokenizer pull`), as `SamplingClient.get_tokenizer()` and
    tinker-cookbook's `get_tokenizer(model_name)` need anyway."""


@dataclass
class ServerConfig:
    """How the server runs."""

    models: list[BaseModelSpec]
    """Base models served."""
    state_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="skyrl-tinker-")))
    """Where the SQLite database and checkpoints live."""
    poll_timeout_s: float = 25.0
    """How long retrieve_future holds a request before answering try_again."""
    autosave_on_shutdown: bool = True
    """On a clean shutdown, save each model changed since its last saved state (weights,
    optimizer state, gradients) so that its model id resumes exactly after a restart."""
    api_key: str | None = None
    """The key every request but the health check must carry (`X-API-Key` as the `tinker` SDK
    sends it, or `Authorization: Bearer`); None: no authentication (bind loopback only)."""
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    """Request bodies larger than this get 413 without being read (and so does a zstd body
    that decompresses to more)."""
    micro_batch_tokens: int = DEFAULT_MICRO_BATCH_TOKENS
    """Most padded tokens in one forward pass of a forward_backward: larger requests run as
    several passes whose gradients add up, so memory is bounded whatever the request."""
    max_sample_batch: int = 64
    """Most sequences sampled in one batch (queued requests on the same weights join it)."""
    abandon_after_s: float = 60.0
    """A sampling request nobody has polled for this long (since it was submitted or since
    its last retrieve_future ended, with no poll waiting on it) is cancelled: a client that
    gave up does not keep the worker decoding for nobody."""
    max_queued_sample_tokens: int = 16 * MAX_SAMPLED_TOKENS
    """Most sampling work (`num_samples x max_tokens`, summed over the sampling requests
    queued or running) the server holds; a request past it gets 429."""
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    """A connection must send a whole request head within this many seconds of opening (or
    of its previous response), else it is closed (`http_guard.header_timeout_protocol`)."""
    gil_switch_interval_s: float | None = 0.0005
    """`sys.setswitchinterval` while the server runs (None: leave it). The torch worker holds
    the GIL through the Python parts of every forward pass; at Python's default 5 ms, each
    hand-over to the event loop (to answer the submit, to read the poll, to send the result)
    waited up to 5 ms, most of the per-call overhead. Set for the whole process while the
    server runs, restored after."""
    tokenizer_ids: TokenizerIds = TokenizerIds.PATH
    """What `get_info` reports as `tokenizer_id` (`skyrl tinker serve` picks NAME when it binds
    a non-loopback host, where clients are on other machines)."""
