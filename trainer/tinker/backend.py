"""Training and sampling on local torch models, one `TrainedModel` per Tinker model id.

Semantics follow the Tinker API: each forward_backward *accumulates* gradients of a per-token
*summed* objective (normalisation is the client's business, through weights and advantages),
and optim_step applies AdamW with the request's hyperparameters, then clears the gradients.
All methods are blocking and meant to run on the server's single torch worker thread.
Sampling goes through the engine (`Sampler` drives a `agents.engine.sync.SyncEngine` on that
thread): the server has no decoder of its own.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from skyrl_sdk.agents.engine.options import LogprobMode, RequestOptions
from skyrl_sdk.agents.engine.request import Request
from skyrl_sdk.agents.engine.sync import SyncEngine
from skyrl_sdk.agents.policy import Completion, FinishReason, SamplingParams
from skyrl_sdk.trainer import losses
from skyrl_sdk.trainer.config import LoRAConfig, PolicyLoss
from skyrl_sdk.trainer.learner import wrap_lora
from skyrl_sdk.trainer.losses import token_logprobs
from skyrl_sdk.trainer.tinker import lora as lora_records
from skyrl_sdk.trainer.tinker.wire import AdamParams, Datum, SamplingParamsIn

LOSSES = tuple(loss.value for loss in PolicyLoss)
"""Names of the loss functions served: the whole catalogue (`trainer.losses.LOSSES`)."""

UNSUPPORTED_LOSSES = {
    "stable_reinforce": "it needs the sampler's provenance and stability records "
    "(record_stability_info), which the local sampler does not keep",
    "custom": "server-side custom losses (FX graphs) are off here; "
    "forward_backward_custom computes the loss in the client instead",
}
"""Loss names the SDK knows that this server rejects, with the reason."""


@dataclass(frozen=True)
class LossSpec:
    """What a loss reads from each datum (the wire side; the math is `trainer.losses`)."""

    inputs: tuple[str, ...]
    """Required `loss_fn_inputs` (besides the model input)."""
    fills: Mapping[str, str | float] = field(default_factory=dict)
    """Optional per-token inputs: the value used where a datum lacks one (a number, or the
    name of a `loss_fn_config` key whose value is used)."""

    def config(self, loss: PolicyLoss) -> dict[str, float | None]:
        """Accepted `loss_fn_config` keys and their defaults (None: required), from the
        catalogue's config type of `loss`."""
        entry = losses.loss_spec(loss)
        defaults = {f.name: f.default for f in dataclasses.fields(entry.config_type)}
        return {
            k: None if defaults[k] is dataclasses.MISSING else float(defaults[k])
            for k in entry.tinker_config
        }


_RL = ("target_tokens", "logprobs", "advantages")
_CLIP_FILLS = {
    "clip_low_threshold": "clip_low_threshold",
    "clip_high_threshold": "clip_high_threshold",
}

LOSS_SPECS: dict[PolicyLoss, LossSpec] = {
    PolicyLoss.CROSS_ENTROPY: LossSpec(("target_tokens",), fills={"weights": 1.0}),
    PolicyLoss.IMPORTANCE_SAMPLING: LossSpec(_RL),
    PolicyLoss.PPO: LossSpec(_RL, fills=_CLIP_FILLS),
    PolicyLoss.CISPO: LossSpec(_RL, fills=_CLIP_FILLS),
    PolicyLoss.DRO: LossSpec(_RL),
    PolicyLoss.GSPO: LossSpec((*_RL, "sequence_ratio_mask"), fills=_CLIP_FILLS),
}
"""Per loss: its per-token inputs. The clip thresholds default to Tinker's PPO values
(1 - 0.2, 1 + 0.2); DRO's `beta` has no documented default, so it must be given."""


def check_loss(loss_fn: str, config: Mapping[str, float | str]) -> dict[str, float]:
    """The full config of a served loss (defaults filled in); ValueError naming what is wrong."""
    if loss_fn not in LOSSES:
        why = UNSUPPORTED_LOSSES.get(loss_fn)
        reason = f" ({why})" if why else ""
        raise ValueError(f"unsupported loss_fn {loss_fn!r}{reason}; supported: {list(LOSSES)}")
    accepted = LOSS_SPECS[PolicyLoss(loss_fn)].config(PolicyLoss(loss_fn))
    unknown = sorted(set(config) - set(accepted))
    if unknown:
        raise ValueError(
            f"loss_fn_config keys {unknown} do not apply to {loss_fn!r}; "
            f"it accepts {sorted(accepted) or 'none'}"
        )
    full: dict[str, float] = {}
    for key, default in accepted.items():
        value = config.get(key, default)
        if value is None:
            raise ValueError(f"loss {loss_fn!r} needs loss_fn_config[{key!r}]")
        if isinstance(value, str) or not math.isfinite(float(value)):
            raise ValueError(f"loss_fn_config[{key!r}] must be a finite number, got {value!r}")
        full[key] = float(value)
    return full


DEFAULT_MICRO_BATCH_TOKENS = 4096
"""Most padded tokens in one forward pass of a forward_backward (larger requests run as several
passes, their gradients summed)."""


class Cancelled(Exception):
    """Raised inside a job whose client cancelled it."""


@dataclass(frozen=True)
class BaseModelSpec:
    """A base model the server offers."""

    name: str
    """Name clients use (`base_model`), HF style `org/model`."""
    path: Path
    """Local model directory (weights, config and tokenizer)."""
    max_context_length: int = 2048
    """Longest sequence accepted."""
    tokenizer_path: Path | None = None
    """Tokenizer directory when it is not `path` (None: `path`). A tokenizer saved next to a
    model config is loaded as that architecture's tokenizer class, which rebuilds custom
    (e.g. word-level) tokenizers wrongly; a directory of its own keeps it exact."""

    @property
    def tokenizer_dir(self) -> Path:
        """Where the tokenizer loads from (also what `get_info` reports as `tokenizer_id`)."""
        return self.tokenizer_path or self.path


class BaseModels:
    """The served base models; loads each on first use and keeps a pristine copy."""

    def __init__(self, specs: list[BaseModelSpec]):
        self.specs = {s.name: s for s in specs}
        self._loaded: dict[str, tuple[Any, Any]] = {}

    def spec(self, name: str) -> BaseModelSpec:
        """The spec of `name`, or `KeyError` with the served names."""
        if name not in self.specs:
            raise KeyError(f"unknown base model {name!r}; served: {sorted(self.specs)}")
        return self.specs[name]

    def load(self, name: str) -> tuple[Any, Any]:
        """A fresh copy of the base model (train mode, float32) and its tokenizer."""
        if name not in self._loaded:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            spec = self.spec(name)
            tokenizer = AutoTokenizer.from_pretrained(spec.tokenizer_dir)
            model = AutoModelForCausalLM.from_pretrained(spec.path, dtype=torch.float32)
            self._loaded[name] = (model, tokenizer)
        model, tokenizer = self._loaded[name]
        return copy.deepcopy(model), tokenizer


class TrainedModel:
    """A trainable model (LoRA adapters or all weights) with its AdamW optimizer."""

    def __init__(
        self,
        model_id: str,
        base: BaseModelSpec,
        bases: BaseModels,
        *,
        lora: LoRAConfig | None,
        micro_batch_tokens: int = DEFAULT_MICRO_BATCH_TOKENS,
    ):
        self.model_id = model_id
        self.base = base
        self.lora = lora
        self.lora_rank = lora.r if lora else None
        self.micro_batch_tokens = micro_batch_tokens
        """Most padded tokens per forward pass (see `micro_batches`)."""
        self.passes = 0
        """Forward passes run by forward_backward (one per micro-batch)."""
        model, self.tokenizer = bases.load(base.name)
        if lora is not None:
            model = wrap_lora(model, lora)
        self.model = model.train()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=1e-4)
        self.steps = 0
        self.grads_pending = False
        """Whether forward_backward accumulated gradients that no optim_step has used yet."""

    # -- training -------------------------------------------------------------------------

    def forward_backward(
        self,
        data: list[Datum],
        loss_fn: str,
        config: dict[str, float | str],
        *,
        forward_only: bool,
    ) -> dict[str, Any]:
        """Per-datum target logprobs and losses; gradients accumulate unless `forward_only`.

        `loss_fn` is one of `LOSSES`; `config` its `loss_fn_config` (see `LOSS_SPECS`).
        """
        full = check_loss(loss_fn, config)
        if not data:
            raise ValueError("forward_backward needs at least one datum")
        loss = PolicyLoss(loss_fn)
        groups = micro_batches([len(d.tokens) for d in data], self.micro_batch_tokens)
        # Every datum is checked before the first backward: a bad one leaves no gradients.
        batches = [
            _Batch.build([data[i] for i in g], loss, full, self.base.max_context_length)
            for g in groups
        ]
        outputs: list[dict[str, list[float]]] = [{} for _ in data]
        total = 0.0
        for group, batch in zip(groups, batches, strict=True):
            total += self._pass(batch, loss, full, group, outputs, forward_only=forward_only)
        if not forward_only:
            self.grads_pending = True
        if len(groups) > 1:
            release_free_memory()
        return {"loss_fn_outputs": outputs, "metrics": {"loss:sum": total}}

    def _pass(
        self,
        batch: _Batch,
        loss: PolicyLoss,
        config: dict[str, float],
        rows: list[int],
        outputs: list[dict[str, list[float]]],
        *,
        forward_only: bool,
    ) -> float:
        """One forward (and backward) pass over a micro-batch; fills `outputs[rows]`, returns
        the summed loss."""
        self.passes += 1
        with torch.set_grad_enabled(not forward_only):
            logits = self.model(input_ids=batch.input_ids, attention_mask=batch.mask).logits
            lp = token_logprobs(logits, batch.targets)
            del logits
            per_token = _objective(loss, lp, batch.inputs, config, batch.mask) * batch.mask
            loss_sum = per_token.sum()
            if not forward_only:
                loss_sum.backward()
        for row, i, n in zip(rows, range(len(rows)), batch.lengths, strict=True):
            outputs[row] = {
                "logprobs": lp[i, :n].detach().tolist(),
                "elementwise_loss": per_token[i, :n].detach().tolist(),
            }
        return float(loss_sum.detach())

    def optim_step(self, adam: AdamParams) -> dict[str, Any]:
        """One AdamW step with the given hyperparameters; clears the gradients."""
        for group in self.optimizer.param_groups:
            group.update(
                lr=adam.learning_rate,
                betas=(adam.beta1, adam.beta2),
                eps=adam.eps,
                weight_decay=adam.weight_decay,
            )
        max_norm = adam.grad_clip_norm if adam.grad_clip_norm > 0 else float("inf")
        grads = [p for p in self.params if p.grad is not None]
        norm = float(torch.nn.utils.clip_grad_norm_(grads, max_norm)) if grads else 0.0
        if grads and math.isfinite(norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.grads_pending = False
        self.steps += 1
        return {"metrics": {"grad_norm:mean": norm, "step:max": float(self.steps)}}

    # -- weights --------------------------------------------------------------------------

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The trained parameters (adapters only with LoRA), detached copies."""
        return {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}

    def save(self, directory: Path, *, optimizer: bool, grads: bool = False) -> None:
        """Write trained parameters (+ optimizer state, + accumulated gradients) and metadata
        to `directory`."""
        directory.mkdir(parents=True, exist_ok=True)
        torch.save(self.trainable_state(), directory / "weights.pt")
        if optimizer:
            torch.save(self.optimizer.state_dict(), directory / "optimizer.pt")
        if grads:
            pending = {
                n: p.grad.detach().clone()
                for n, p in self.model.named_parameters()
                if p.requires_grad and p.grad is not None
            }
            torch.save(pending, directory / "grads.pt")
        meta = {
            "base_model": self.base.name,
            "lora": lora_records.to_record(self.lora),
            "steps": self.steps,
        }
        (directory / "meta.json").write_text(json.dumps(meta))

    def load(self, directory: Path, *, optimizer: bool, grads: bool = False) -> None:
        """Load parameters written by `save` (and the optimizer state and gradients if asked)."""
        state = torch.load(directory / "weights.pt", weights_only=True)
        missing = self.model.load_state_dict(state, strict=False)
        if missing.unexpected_keys:
            raise ValueError(f"checkpoint does not fit this model: {missing.unexpected_keys[:3]}")
        if optimizer:
            opt_path = directory / "optimizer.pt"
            if not opt_path.exists():
                raise ValueError("this checkpoint has no optimizer state (saved for sampling?)")
            self.optimizer.load_state_dict(torch.load(opt_path, weights_only=True))
        if grads and (directory / "grads.pt").exists():
            params = dict(self.model.named_parameters())
            pending = torch.load(directory / "grads.pt", weights_only=True)
            for name, grad in pending.items():
                params[name].grad = grad
            self.grads_pending = bool(pending)
        self.steps = json.loads((directory / "meta.json").read_text()).get("steps", 0)

    def snapshot(self) -> Sampler:
        """A frozen copy of the current weights for sampling."""
        return Sampler(copy.deepcopy(self.model).eval(), self.tokenizer, self.base)


def release_free_memory() -> None:
    """Hand the heap's free pages back to the OS (glibc `malloc_trim`; a no-op elsewhere).

    After a large request glibc keeps the freed activations mapped (its mmap threshold grows
    with every large free), so the server's RSS would stay at the request's peak."""
    import contextlib
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError, TypeError):  # not glibc
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)


def micro_batches(lengths: list[int], budget: int) -> list[list[int]]:
    """Datum indices grouped so that each group's padded size (rows x longest) stays within
    `budget` tokens; a datum longer than the budget goes alone. Shortest first, so that
    similar lengths share a pass and padding stays small."""
    groups: list[list[int]] = []
    current: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if current and (len(current) + 1) * lengths[i] > budget:
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def read_meta(directory: Path) -> dict[str, Any]:
    """The metadata of a saved checkpoint directory."""
    path = directory / "meta.json"
    if not path.exists():
        raise KeyError(f"no checkpoint at {directory.name!r}")
    return json.loads(path.read_text())


@dataclass(frozen=True)
class SampleCall:
    """One sampling request: `num_samples` continuations of `prompt`."""

    prompt: list[int]
    """Prompt token ids."""
    num_samples: int
    """Continuations wanted."""
    params: SamplingParamsIn
    """max_tokens, seed, stop, temperature, top_k, top_p."""
    prompt_logprobs: bool = False
    """Also return the logprob of each prompt token (None for the first)."""


@dataclass
class _Pending:
    """One request of a decoding run: its engine rows (one per sample) and what ends it."""

    index: int
    """The caller's number for it (passed back to `should_stop` and `done`)."""
    call: SampleCall
    """What it asks for."""
    rows: list[Request] = field(default_factory=list)
    """Its engine requests, sample j seeded with the request's seed + j."""
    error: BaseException | None = None
    """Why the engine failed one of its rows (None: none failed)."""
    ended: int = 0
    """Rows finished."""

    @property
    def done(self) -> bool:
        return self.error is not None or self.ended == len(self.rows)

    def on_row_done(self, row: Request, value: Completion | BaseException) -> None:
        """The engine's sink for its rows (called on the decoding thread)."""
        if isinstance(value, BaseException):
            self.error = self.error or value
        else:
            self.ended += 1

    def outcome(self) -> dict[str, Any]:
        sequences = [
            {
                "tokens": list(r.ids),
                "logprobs": list(r.logprobs),
                "stop_reason": "stop" if r.finish is FinishReason.STOP else "length",
            }
            for r in self.rows
        ]
        prompt_lp = self.rows[0].prompt_logprobs if self.call.prompt_logprobs else None
        return {"sequences": sequences, "prompt_logprobs": prompt_lp}

    def cancel(self) -> None:
        for r in self.rows:
            r.cancelled = True


Done = Callable[[int, "dict[str, Any] | Exception"], None]
"""Receives each request's outcome (by its index) as soon as the request ends."""
Join = Callable[[int], "list[tuple[int, SampleCall]]"]
"""Called between decoding steps with the rows free; returns requests to add to the batch."""


class Sampler:
    """Samples completions with per-token logprobs from a frozen model, through the engine
    (`agents.engine.sync.SyncEngine`, driven by the calling thread). Each sample is a row of
    the engine's running batch: requests may join it between steps, and each leaves it as
    soon as it ends. Logprobs are those of the untempered distribution; sample j of a request
    draws from its own generator seeded with the request's seed + j, so its tokens do not
    depend on what else decodes alongside."""

    def __init__(self, model: Any, tokenizer: Any, base: BaseModelSpec):
        # A LoRA snapshot stays a peft model: merging its adapters would also change a tied
        # input embedding (`lm_head` is a target), so the engine runs it unmerged.
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.base = base
        self.engine = SyncEngine(self.model, tokenizer, name=f"tinker:{base.name}")
        """The engine that decodes (its counters: `engine.stats()`)."""
        self.batches = 0
        """Decoding runs started (`decode` calls, and reruns of a failed request alone)."""
        self.joins = 0
        """Groups of requests that joined a running batch."""

    def sample(
        self,
        prompt: list[int],
        num_samples: int,
        params: SamplingParamsIn,
        *,
        prompt_logprobs: bool,
        should_stop: Callable[[], bool] | None = None,
    ) -> dict[str, Any]:
        """`num_samples` continuations of `prompt`; every sampled token carries its logprob.

        `should_stop` is polled before each token; when it returns True, `Cancelled` is raised.
        """
        call = SampleCall(prompt, num_samples, params, prompt_logprobs)
        stop = None if should_stop is None else (lambda _: should_stop())
        (outcome,) = self.sample_many([call], should_stop=stop)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def sample_many(
        self, calls: list[SampleCall], *, should_stop: Callable[[int], bool] | None = None
    ) -> list[dict[str, Any] | Exception]:
        """Sample every request in one batch; per request its result or its exception.

        `should_stop(i)` is polled before each token; once True, request `i` stops and its
        outcome is `Cancelled`. Each request draws from its own seeded generators, so its
        tokens do not depend on the requests it shares the batch with.
        """
        outcomes: dict[int, dict[str, Any] | Exception] = {}
        self.decode(list(enumerate(calls)), outcomes.__setitem__, should_stop=should_stop)
        return [outcomes[i] for i in range(len(calls))]

    def decode(
        self,
        requests: list[tuple[int, SampleCall]],
        done: Done,
        *,
        should_stop: Callable[[int], bool] | None = None,
        join: Join | None = None,
        max_rows: int = 64,
    ) -> None:
        """Decode `requests` (index, call) as one batch, taking in `join`'s requests between
        steps while fewer than `max_rows` rows decode; `done(index, outcome)` gets each
        request's result or exception as soon as it ends. A request that cannot be decoded
        fails alone; one the engine fails inside a batch is rerun alone."""
        self.batches += 1
        run = _Run(self, done, should_stop, retry=True)
        run.admit(requests)
        self.engine.max_batch_size = max(max_rows, run.rows)  # a larger request still runs

        def between() -> None:
            run.settle()
            if join is not None and run.rows < max_rows and run.admit(join(max_rows - run.rows)):
                self.joins += 1

        try:
            self.engine.run(between)
        except Exception:  # a caller's callback failed mid-run: the rest are rerun alone
            run.abandon()
        for index, call in run.failed:
            self.batches += 1
            alone = _Run(self, done, should_stop, retry=False)
            alone.admit([(index, call)])
            try:
                self.engine.run(alone.settle)
            except Exception as e:  # this request's own failure
                alone.abandon()
                done(index, e)

    def problem(self, call: SampleCall) -> str | None:
        """Why a request cannot join a batch (None: it can)."""
        if not call.prompt:
            return "the prompt is empty"
        if len(call.prompt) > self.base.max_context_length:
            return (
                f"the prompt has {len(call.prompt)} tokens; the context length of "
                f"{self.base.name} is {self.base.max_context_length}"
            )
        vocab = self.engine.vocab_size
        if min(call.prompt) < 0 or max(call.prompt) >= vocab:
            return f"prompt token ids must lie in [0, {vocab}) for {self.base.name}"
        return None

    def engine_sampling(self, call: SampleCall) -> tuple[list[SamplingParams], RequestOptions]:
        """The engine's sampling of each of `call`'s samples (none when it may sample no
        token: `max_tokens`, clamped to the context left, is 0), and its options."""
        p = call.params
        max_tokens = max(0, min(p.token_limit(), self.base.max_context_length - len(call.prompt)))
        stop_ids, stop_strs = _stops(p.stop, self.tokenizer)
        seed = p.seed if p.seed is not None else _fresh_seed()
        one = SamplingParams(
            max_tokens=max(max_tokens, 1),
            temperature=p.temperature,
            top_p=p.top_p,
            top_k=p.top_k,
            stop_token_ids=tuple(sorted(stop_ids)),
        )
        options = RequestOptions(
            logprobs=LogprobMode.RAW,
            prompt_logprobs=call.prompt_logprobs,
            stop_suffixes=tuple(stop_strs),
        )
        if max_tokens == 0:
            return [], options
        return [replace(one, seed=seed + j) for j in range(call.num_samples)], options


class _Run:
    """The requests of one `Sampler.decode` run on the engine, reported as each ends."""

    def __init__(
        self,
        sampler: Sampler,
        done: Done,
        should_stop: Callable[[int], bool] | None,
        *,
        retry: bool,
    ):
        self.sampler = sampler
        self.done = done
        self.should_stop = should_stop
        self.retry = retry
        """Whether a request the engine fails is rerun alone (else its error is reported)."""
        self.pending: list[_Pending] = []
        """Requests not reported yet."""
        self.failed: list[tuple[int, SampleCall]] = []
        """Requests the engine failed, to rerun alone."""

    @property
    def rows(self) -> int:
        """Rows of the requests not reported yet."""
        return sum(len(p.rows) for p in self.pending)

    def admit(self, requests: list[tuple[int, SampleCall]]) -> bool:
        """Submit the valid ones (an invalid one fails at once); whether any was submitted."""
        engine, added = self.sampler.engine, False
        for index, call in requests:
            problem = self.sampler.problem(call)
            if problem is not None:
                self.done(index, ValueError(problem))
                continue
            samplings, options = self.sampler.engine_sampling(call)
            pending = _Pending(index, call)
            if not samplings:  # nothing to sample: the prompt's logprobs at most
                prompt_lp = engine.score(call.prompt) if call.prompt_logprobs else None
                empty = [
                    {"tokens": [], "logprobs": [], "stop_reason": "length"}
                    for _ in range(call.num_samples)
                ]
                self.done(index, {"sequences": empty, "prompt_logprobs": prompt_lp})
                continue
            for j, sampling in enumerate(samplings):
                # One row scores the prompt; the others find it in the prefix cache.
                row_options = options if j == 0 else replace(options, prompt_logprobs=False)
                row = engine.submit(call.prompt, sampling, pending.on_row_done, options=row_options)
                pending.rows.append(row)
            self.pending.append(pending)
            added = True
        return added

    def settle(self) -> None:
        """Between two steps: cancel what the caller gave up on, report what ended."""
        keep = []
        for p in self.pending:
            if not p.done and self.should_stop is not None and self.should_stop(p.index):
                p.cancel()
                self.done(p.index, Cancelled("the request was cancelled by the client"))
            elif p.error is not None:
                p.cancel()  # its other rows
                if self.retry:
                    self.failed.append((p.index, p.call))
                else:
                    self.done(p.index, p.error)  # type: ignore[arg-type]
            elif p.done:
                self.done(p.index, p.outcome())
            else:
                keep.append(p)
        self.pending = keep

    def abandon(self) -> None:
        """The run broke off: drop the engine rows of every request not reported yet (they
        are rerun alone when retrying)."""
        for p in self.pending:
            p.cancel()
            if self.retry:
                self.failed.append((p.index, p.call))
        self.pending = []


def _fresh_seed() -> int:
    return int(np.random.default_rng().integers(0, 2**31 - 1))


def _stops(stop: Any, tokenizer: Any) -> tuple[set[int], list[str]]:
    """The stop token ids and strings of a request. EOS ends a sample unless `stop` is `[]`:
    absent, a string, or a list of strings or ids all keep it (chat renderers pass their
    end-of-turn strings and still expect EOS to end the sample)."""
    eos = tokenizer.eos_token_id
    ids = set() if eos is None else {eos}
    if stop is None:
        return ids, []
    if isinstance(stop, str):
        return ids, [stop]
    if len(stop) == 0:
        return set(), []
    ids |= {s for s in stop if isinstance(s, int)}
    return ids, [s for s in stop if isinstance(s, str)]


@dataclass
class _Batch:
    input_ids: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    lengths: list[int]
    inputs: dict[str, torch.Tensor]

    @classmethod
    def build(
        cls, data: list[Datum], loss: PolicyLoss, config: dict[str, float], max_len: int
    ) -> _Batch:
        spec = LOSS_SPECS[loss]
        lengths = [len(d.tokens) for d in data]
        width = max(lengths)
        if width > max_len:
            raise ValueError(f"sequence of {width} tokens exceeds the context length {max_len}")
        if min(lengths) == 0:
            raise ValueError("a datum has no tokens")
        ids = torch.zeros(len(data), width, dtype=torch.long)
        mask = torch.zeros(len(data), width)
        inputs = {k: torch.zeros(len(data), width) for k in spec.inputs}
        for k, fill in spec.fills.items():
            value = config[fill] if isinstance(fill, str) else fill
            inputs[k] = torch.full((len(data), width), float(value))
        for i, d in enumerate(data):
            n = lengths[i]
            ids[i, :n] = torch.tensor(d.tokens)
            mask[i, :n] = 1
            for k in spec.inputs:
                if k not in d.loss_fn_inputs:
                    raise ValueError(f"loss {loss.value!r} needs loss_fn_inputs[{k!r}]")
            for k, arr in d.loss_fn_inputs.items():
                if k not in inputs:
                    continue
                flat = np.asarray(arr).reshape(-1)
                if flat.shape[0] != n:
                    raise ValueError(
                        f"loss_fn_inputs[{k!r}] has {flat.shape[0]} values for {n} tokens"
                    )
                inputs[k][i, :n] = torch.from_numpy(flat.astype(np.float32))
        targets = inputs.pop("target_tokens").long()
        if not bool((targets >= 0).all()):
            raise ValueError("target_tokens must be non-negative token ids")
        return cls(ids, targets, mask, lengths, inputs)


def _objective(
    loss: PolicyLoss,
    lp: torch.Tensor,
    inputs: dict[str, torch.Tensor],
    config: dict[str, float],
    mask: torch.Tensor,
) -> torch.Tensor:
    """Per-token loss (to be summed): the catalogue's `loss` on the datums' inputs.

    `lp` are the learner's logprobs of the target tokens, `inputs["logprobs"]` the sampler's;
    cross-entropy's `weights` are the catalogue's advantages.
    """
    entry = losses.loss_spec(loss)
    settings: dict[str, Any] = {k: inputs.get(k, config.get(k)) for k in entry.tinker_config}
    if loss is PolicyLoss.GSPO:
        settings["sequence_ratio_mask"] = inputs["sequence_ratio_mask"]
    if loss is PolicyLoss.CROSS_ENTROPY:
        old, adv = None, inputs["weights"]
    else:
        old, adv = inputs["logprobs"], inputs["advantages"]
    return entry.fn(lp, old, adv, mask, entry.config_type(**settings)).per_token
