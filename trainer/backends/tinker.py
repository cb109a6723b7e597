"""The Tinker backend: the RL loop (`trainer.loop`) with the model behind a Tinker API endpoint.

`skyrl train CONFIG backend=tinker tinker.base_url=URL tinker.base_model=NAME` runs this loop.
Everything but the model is the local trainer's: the same config file, env and
`agents.rollout`, data order (`DataCursor`), per-episode sampling seeds (`SeededPolicy`),
advantages (`build_batch`), loss reductions (`trainer.losses`), LR schedule, metrics
(`step_metrics`, the same sinks) and run directory (`config.yaml`, `metrics.jsonl`,
`trajectories.jsonl`, `checkpoints/step_N`, `summary.json`). The endpoint can be ours
(`skyrl tinker serve`) or a hosted Tinker service; only the official `tinker` SDK talks to it.

Synchronous on-policy: `trainer.max_staleness` must be 0. The loop's parts (`build_tinker`,
`TinkerTrainer` is the loop of them):

- `TinkerLearner` (the learner): per mini-batch, one Datum per sample (model_input =
  ids[:-1], target_tokens = ids[1:], logprobs = sampler logprobs, advantages = A x reduction
  weight on generated tokens and 0 elsewhere; `cross_entropy` gets those as `weights`, `gspo`
  the generated tokens as `sequence_ratio_mask`), forward_backward with `algorithm.loss`
  (Tinker's own name; clip bounds as `loss_fn_config`), then optim_step with AdamParams from `optim` (the scheduled
  LR). Its weights for the engine: save_weights_for_sampler("step_N") -> a tinker:// path and
  a SamplingClient of it. Its checkpoint: save_state on the endpoint, whose tinker:// path goes
  to `checkpoints/step_N` (`--resume` loads it).
- `TinkerEngine` (the engine): samples every turn from the latest SamplingClient
  (`TinkerPolicy`); every sampled token carries the sampler's logprob and version N.

Tinker losses are per-token sums, so the reduction (token mean, sequence mean, constant) is
folded into the advantages as the per-token weights of `losses.reduce`: the summed Tinker
objective is then exactly the reduced loss the local learner minimises. What Tinker's built-in
losses lack is rejected up front (`check_config`): a KL penalty, an entropy bonus, and the
PPO dual clip when more than one mini-batch makes the clip matter, and `dro` (Tinker's has no
loss mask: its penalty would also pull the prompt tokens, and the reduction cannot be folded
into it).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import torch
from rich.console import Console

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.policy import Completion, GenerationContext, SamplingParams
from skyrl_sdk.agents.tinker_policy import TinkerPolicy, import_tinker
from skyrl_sdk.agents.trajectory import TrainingSample
from skyrl_sdk.trainer import losses
from skyrl_sdk.trainer.backends.base import BackendHooks, Parts, RunOutcome
from skyrl_sdk.trainer.config import (
    AdvantageEstimator,
    AlgorithmConfig,
    ConfigError,
    PolicyLoss,
    TrainConfig,
)
from skyrl_sdk.trainer.learner import LearnerStats, lr_schedule
from skyrl_sdk.trainer.run import RunState, rollout_limits

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
"""Hosts for which an unset API key falls back to a placeholder (our server ignores keys)."""

CONNECT_TIMEOUT_S = 30.0
"""Seconds the reachability probe of the endpoint may take before the run fails."""

CHECKPOINT_LOG = "tinker_checkpoints.jsonl"
"""Run-directory file listing every saved state and sampler path, one JSON line each."""


def check_config(config: TrainConfig) -> None:
    """Raise `ConfigError` for settings the Tinker backend cannot honour (never ignore them)."""
    alg = config.algorithm
    problems = []
    if config.trainer.max_staleness:
        problems.append("trainer.max_staleness: the tinker backend is synchronous; set it to 0")
    if alg.kl_coef > 0:
        problems.append("algorithm.kl_coef: Tinker's losses have no KL penalty; set it to 0")
    if alg.entropy_coef > 0:
        problems.append(
            "algorithm.entropy_coef: Tinker's losses have no entropy bonus; set it to 0"
        )
    if alg.observation_loss_coef > 0:
        problems.append(
            "algorithm.observation_loss_coef: the tinker backend has no observation-token "
            "loss; set it to 0"
        )
    if alg.advantage is AdvantageEstimator.OPD:
        problems.append(
            "algorithm.advantage 'opd': the tinker backend does not train per-token "
            "advantages yet; use backend 'local'"
        )
    if config.model.init_from:
        problems.append(
            "model.init_from: the tinker backend trains the endpoint's base_model; "
            "start from a local checkpoint with backend 'local'"
        )
    if alg.loss is PolicyLoss.PPO and alg.mini_batches > 1 and alg.dual_clip is not None:
        problems.append(
            "algorithm.dual_clip: Tinker's ppo loss has no dual clip, which matters with "
            "mini_batches > 1; set algorithm.dual_clip=null"
        )
    if alg.loss is PolicyLoss.DRO:
        problems.append(
            "algorithm.loss: Tinker's dro has no loss mask (its penalty would cover prompt "
            "tokens); use cispo, gspo, ppo, importance_sampling or cross_entropy"
        )
    if problems:
        raise ConfigError("invalid config for backend 'tinker':\n  " + "\n  ".join(problems))


def reduction_weights(
    samples: Sequence[TrainingSample], algorithm: AlgorithmConfig
) -> list[list[float]]:
    """Per target token (`input_ids[1:]`) of each sample: d reduced-loss / d per-token-loss.

    Multiplying each token's advantage by its weight turns Tinker's summed objective into
    `losses.reduce(per_token_loss, mask, reduction)`; non-generated tokens get 0.
    """
    mask = _pad([s.loss_mask[1:] for s in samples], 0.0)
    per_token = torch.zeros_like(mask, requires_grad=True)
    reduction = losses.Reduction(algorithm.reduction.value)
    losses.reduce(per_token, mask, reduction, algorithm.normalizer).backward()
    assert per_token.grad is not None
    return [per_token.grad[i, : len(s.input_ids) - 1].tolist() for i, s in enumerate(samples)]


def build_datums(
    samples: Sequence[TrainingSample], advantages: Sequence[float], algorithm: AlgorithmConfig
) -> list[Any]:
    """One `tinker.types.Datum` per sample, with the inputs `algorithm.loss` reads."""
    types = import_tinker().types
    datums = []
    for sample, adv, weights in zip(
        samples, advantages, reduction_weights(samples, algorithm), strict=True
    ):
        ids = list(sample.input_ids)
        weighted = [adv * w for w in weights]
        inputs: dict[str, list[int] | list[float]] = {"target_tokens": ids[1:]}
        if algorithm.loss is PolicyLoss.CROSS_ENTROPY:
            inputs["weights"] = weighted
        else:
            inputs["logprobs"] = list(sample.logprobs[1:])
            inputs["advantages"] = weighted
        if algorithm.loss is PolicyLoss.GSPO:
            inputs["sequence_ratio_mask"] = [float(m) for m in sample.loss_mask[1:]]
        datums.append(
            types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]), loss_fn_inputs=inputs)
        )
    return datums


@dataclass(frozen=True)
class MiniBatchResult:
    """What one forward_backward (+ optim_step) on the endpoint returned, reduced locally."""

    loss: float
    """The reduced policy loss at the pre-update weights (from the endpoint's logprobs)."""
    endpoint_loss: float | None
    """The endpoint's own `loss:sum` (equal to `loss` when the datums are right)."""
    kl_sampler: float
    """Summed k3 estimate of KL(sampler || endpoint) over generated tokens (as the local
    learner's `kl_sampler`)."""
    clip: float
    """Generated tokens whose PPO ratio was clipped (count)."""
    ratio: float
    """Sum of the policy ratio over generated tokens."""
    tokens: int
    """Generated tokens."""
    stepped: bool
    """An optimizer step ran (False: every advantage was 0, so only a forward pass ran)."""
    grad_norm: float | None
    """Gradient norm from optim_step's metrics (None: no step, or not reported)."""


@dataclass(frozen=True)
class SamplerWeights:
    """Weights saved on the endpoint for sampling: what `TinkerLearner` hands the engine."""

    path: str
    """Their tinker:// path (`save_weights_for_sampler`)."""
    client: Any
    """A `tinker.SamplingClient` of that path."""


class TinkerLearner:
    """A LoRA training client on the endpoint, as the loop's learner (`PolicyLearner`).

    Its methods block on the endpoint (the loop calls them from a worker thread)."""

    def __init__(
        self,
        config: TrainConfig,
        service: Any,
        training: Any,
        *,
        version: int,
        state_path: str | None,
    ):
        self.config = config
        self.tinker = import_tinker()
        self.service = service
        self.training = training
        self.base_model = config.tinker.base_model
        self.version = version
        """Optimizer steps taken (over all resumes)."""
        self.sampler_path: str | None = None
        """The tinker:// path of the weights last handed to the engine."""
        self.trained_from: str | None = None
        """The sampler path that generated the batch of the last `train_step`."""
        self.endpoint_loss: float | None = None
        """The endpoint's own `loss:sum` of the last `train_step` (None: not reported)."""
        self.state_path = state_path
        """The tinker:// path of the last saved state (weights + optimizer)."""
        self._lr_factor = lr_schedule(
            config.optim.schedule, config.optim.warmup_steps, config.trainer.steps
        )

    def engine_weights(self) -> SamplerWeights:
        """save_weights_for_sampler under the version's name, and a sampling client of it."""
        saved = self.training.save_weights_for_sampler(f"step_{self.version:06d}").result()
        client = self.service.create_sampling_client(model_path=saved.path).result()
        self.sampler_path = saved.path
        return SamplerWeights(saved.path, client)

    async def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """Each completion token's logprob under the training client's current adapters
        (`agents.scoring.Scorer`): a forward pass with `cross_entropy`, no gradient step."""
        return await asyncio.to_thread(self._score, [*prompt_ids], [*completion_ids])

    def _score(self, prompt: list[int], completion: list[int]) -> list[float]:
        types = self.tinker.types
        ids = prompt + completion
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(ids[:-1]),
            loss_fn_inputs={"target_tokens": ids[1:], "weights": [0.0] * (len(ids) - 1)},
        )
        output = self.training.forward([datum], "cross_entropy").result()
        logprobs = output.loss_fn_outputs[0]["logprobs"].tolist()
        return [float(x) for x in logprobs[len(prompt) - 1 :]]

    def state_dict(self) -> dict[str, Any]:
        """save_state on the endpoint (weights + optimizer); a checkpoint keeps its path."""
        saved = self.training.save_state(f"step_{self.version:06d}").result()
        self.state_path = saved.path
        return {"tinker_path": saved.path, "base_model": self.base_model, "version": self.version}

    def train_step(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float]
    ) -> LearnerStats:
        """Mini-batches of forward_backward + optim_step (split as the local learner does)."""
        started = time.perf_counter()
        version = self.version
        optim = self.config.optim
        lr = optim.lr * self._lr_factor(version)
        adam = self.tinker.types.AdamParams(
            learning_rate=lr,
            beta1=optim.betas[0],
            beta2=optim.betas[1],
            eps=1e-8,  # torch.optim.AdamW's default, which the local learner uses
            weight_decay=optim.weight_decay,
            grad_clip_norm=optim.grad_clip or 0.0,
        )
        n = min(self.config.algorithm.mini_batches, len(samples))
        results = []
        for chunk in (list(range(len(samples)))[i::n] for i in range(n)):
            results.append(
                self._mini_batch([samples[i] for i in chunk], [advantages[i] for i in chunk], adam)
            )
        tokens = max(sum(r.tokens for r in results), 1)
        stepped = [r for r in results if r.stepped]
        norms = [r.grad_norm for r in stepped if r.grad_norm is not None]
        loss = sum(r.loss for r in results)
        reported = [r.endpoint_loss for r in results]
        lags = [version - v for s in samples for v in s.policy_versions if v >= 0]
        self.version += 1
        self.trained_from = self.sampler_path
        self.endpoint_loss = None if None in reported else sum(r for r in reported if r is not None)
        return LearnerStats(
            loss=loss,
            policy_loss=loss,
            kl_ref=0.0,
            kl_sampler=sum(r.kl_sampler for r in results) / tokens,
            entropy=float("nan"),
            clip_fraction=sum(r.clip for r in results) / tokens,
            tis_clip_fraction=0.0,
            ratio_mean=sum(r.ratio for r in results) / tokens,
            # As the local learner: the last mini-batch's norm; 0 when no step ran.
            grad_norm=norms[-1] if norms else (math.nan if stepped else 0.0),
            lr=lr,
            tokens=sum(r.tokens for r in results),
            sequences=len(samples),
            staleness_mean=sum(lags) / max(len(lags), 1),
            staleness_max=max(lags, default=0),
            duration_s=time.perf_counter() - started,
        )

    def _mini_batch(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float], adam: Any
    ) -> MiniBatchResult:
        alg = self.config.algorithm
        datums = build_datums(samples, advantages, alg)
        loss_fn = alg.loss.value
        loss_config = losses.tinker_loss_config(losses.config_for(alg, dual_clip=False))
        grad_norm = None
        stepped = any(a != 0 for a in advantages)
        if stepped:
            # Both requests go out before either result is awaited (one round trip less).
            fb_future = self.training.forward_backward(datums, loss_fn, loss_config)
            opt_future = self.training.optim_step(adam)
            output = fb_future.result()
            opt = opt_future.result()
            grad_norm = (opt.metrics or {}).get("grad_norm:mean")
        else:
            # No signal: the local learner skips the optimizer step (Adam's momentum would
            # still move the weights); a forward pass gives the statistics.
            output = self.training.forward(datums, loss_fn, loss_config).result()
        logprobs = [torch.tensor(o["logprobs"].tolist()) for o in output.loss_fn_outputs]
        return _reduce_locally(
            samples, advantages, logprobs, alg, output.metrics, stepped, grad_norm
        )


class TinkerEngine:
    """Tinker sampling clients as the loop's engine (`PolicyEngine`): every turn samples from
    the client of the latest weights the learner saved for sampling."""

    def __init__(self, tokenizer: Any, name: str):
        self.name = name
        self.sampler = TinkerPolicy(None, tokenizer, name=name)
        self.policy_version = -1
        """Version of the sampling client in use (-1: none yet, the loop publishes first)."""

    @property
    def renderer(self) -> ChatRenderer:
        return self.sampler.renderer

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> Completion:
        return await self.sampler.generate(prompt_token_ids, sampling, context=context)

    def update_weights(self, weights: SamplerWeights, version: int) -> None:
        """Sample from `weights`' client from the next turn on."""
        self.sampler.use(weights.client, version)
        self.policy_version = version

    async def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """The current sampling client's scores (`TinkerPolicy.score`): the adapters saved
        for sampling at `policy_version`."""
        return await self.sampler.score(prompt_ids, completion_ids)

    def wait_for_version(self, version: int, timeout: float | None = 30.0) -> bool:
        """True once a client of `version` is in use (`update_weights` switches at once)."""
        return self.policy_version >= version

    async def aclose(self) -> None:
        await self.sampler.aclose()


def _reduce_locally(
    samples: Sequence[TrainingSample],
    advantages: Sequence[float],
    logprobs: Sequence[torch.Tensor],
    algorithm: AlgorithmConfig,
    endpoint_metrics: dict[str, float],
    stepped: bool,
    grad_norm: float | None,
) -> MiniBatchResult:
    """The mini-batch's loss and statistics from the endpoint's target logprobs, computed
    with the local learner's loss functions (Tinker's objective, reduced)."""
    mask = _pad([s.loss_mask[1:] for s in samples], 0.0)
    sampler = _pad([s.logprobs[1:] for s in samples], 0.0)
    learner = _pad([lp.tolist() for lp in logprobs], 0.0)
    adv = torch.tensor(list(advantages), dtype=torch.float32)
    # The endpoint's ratios are to the sampler for every loss (Tinker's `logprobs` input).
    loss, pstats = losses.policy_loss(
        algorithm.loss,
        learner,
        sampler,
        adv,
        mask,
        losses.config_for(algorithm, dual_clip=False),
        reduction=losses.Reduction(algorithm.reduction.value),
        normalizer=algorithm.normalizer,
    )
    tokens = int(mask.sum())
    kl = losses.kl_penalty(sampler, learner, losses.KLEstimator.K3)  # KL(sampler || endpoint)
    return MiniBatchResult(
        loss=float(loss),
        endpoint_loss=endpoint_metrics.get("loss:sum"),
        kl_sampler=float((kl * mask).sum()),
        clip=pstats.clip_fraction * tokens,
        ratio=pstats.ratio_mean * tokens,
        tokens=tokens,
        stepped=stepped,
        grad_norm=grad_norm,
    )


def _pad(rows: Sequence[Sequence[float]], value: float) -> torch.Tensor:
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), width), value, dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(list(row), dtype=torch.float32)
    return out


def _api_key(config: TrainConfig) -> str:
    """The key from `$<tinker.api_key_env>`; our loopback server accepts a placeholder."""
    name = config.tinker.api_key_env
    key = os.environ.get(name)
    if key:
        return key
    if urlparse(config.tinker.base_url or "").hostname in LOOPBACK_HOSTS:
        return "tml-local"
    raise ConfigError(f"backend 'tinker': set ${name} to the endpoint's API key")


# -- the parts ------------------------------------------------------------------------------


class TinkerHooks(BackendHooks):
    """The Tinker backend's additions to the loop: its metrics, summary keys and checkpoint
    files, and closing the endpoint's session with the run's outcome."""

    def __init__(self, config: TrainConfig, service: Any, learner: TinkerLearner, console: Console):
        self.config = config
        self.run_dir = Path(config.out_dir)
        self.service = service
        """The `tinker.ServiceClient` of the endpoint."""
        self.learner = learner
        self.console = console

    def add_metrics(self, metrics: MutableMapping[str, Any]) -> None:
        # Tinker returns target logprobs only, not the full distribution.
        metrics.pop("policy/entropy", None)
        if math.isnan(metrics["optim/grad_norm"]):  # the endpoint reports no gradient norm
            del metrics["optim/grad_norm"]
        metrics["tinker/sampler_path"] = self.learner.trained_from
        if self.learner.endpoint_loss is not None:
            metrics["tinker/loss_sum"] = self.learner.endpoint_loss

    def checkpoint_saved(self, path: Path, step: int) -> None:
        """`tinker.json` in the checkpoint (the endpoint's state path) and a line in the run's
        `CHECKPOINT_LOG`."""
        state_path = self.learner.state_path
        learner = {
            "tinker_path": state_path,
            "base_model": self.learner.base_model,
            "version": step,
        }
        (path / "tinker.json").write_text(json.dumps(learner))
        with (self.run_dir / CHECKPOINT_LOG).open("a") as f:
            f.write(json.dumps({"step": step, "state_path": state_path}) + "\n")

    def summary(self) -> Mapping[str, str | None]:
        return {
            "backend": "tinker",
            "base_url": self.config.tinker.base_url,
            "base_model": self.learner.base_model,
            "tinker_state_path": self.learner.state_path,
            "tinker_sampler_path": self.learner.sampler_path,
        }

    async def finish(self, outcome: RunOutcome) -> None:
        try:
            await self.service.close(outcome.value)
        except Exception as e:  # a failed goodbye must not hide the run's own error
            self.console.print(f"[yellow]closing the tinker session failed: {e}[/yellow]")


@dataclass(frozen=True)
class TinkerParts(Parts):
    """The Tinker backend's parts."""

    learner: TinkerLearner
    """A LoRA training client on the endpoint."""
    engine: TinkerEngine
    """Sampling clients of the learner's saved weights."""
    hooks: TinkerHooks
    """Metrics, summary, checkpoint files and the session's goodbye."""


def build_tinker(
    config: TrainConfig, *, resume: bool = False, console: Console | None = None
) -> TinkerParts:
    """A LoRA training client on `tinker.base_url`, fresh or from the run's last saved state
    under `resume`, and the engine that samples from it."""
    check_config(config)
    tinker = import_tinker()
    tcfg = config.tinker
    assert tcfg.base_url and tcfg.base_model  # TrainConfig validates this
    run = RunState(config, resume=resume, console=console)
    api_key = _api_key(config)
    service = tinker.ServiceClient(base_url=tcfg.base_url, api_key=api_key)
    max_context = check_served(config, tinker, api_key)
    state = run.load_checkpoint() if resume else None
    if state is None:
        future = service.create_lora_training_client(
            tcfg.base_model, rank=tcfg.lora_rank, seed=config.seed
        )
    else:
        if "tinker_path" not in state.learner:
            raise ConfigError(f"{run.checkpointer.latest()} is a local-backend checkpoint")
        if state.learner["base_model"] != tcfg.base_model:
            raise ConfigError(
                f"tinker.base_model is {tcfg.base_model!r} but the checkpoint trained "
                f"{state.learner['base_model']!r}"
            )
        run.resume_at(state, state.learner["tinker_path"])
        future = service.create_training_client_from_state_with_optimizer(
            state.learner["tinker_path"]
        )
    training = future.result()
    run.console.print(
        f"backend tinker: LoRA rank {tcfg.lora_rank} on {tcfg.base_model} at {tcfg.base_url} "
        "(the `model` section is not used)"
    )
    learner = TinkerLearner(
        config,
        service,
        training,
        version=run.start_step,
        state_path=None if state is None else state.learner["tinker_path"],
    )
    engine = TinkerEngine(training.get_tokenizer(), f"tinker:{tcfg.base_model}")
    hooks = TinkerHooks(config, service, learner, run.console)
    return TinkerParts(run, learner, engine, rollout_limits(config, max_context), hooks)


def check_served(config: TrainConfig, tinker: Any, api_key: str) -> int | None:
    """Fail early if the endpoint does not serve `tinker.base_model`; its context length."""
    base_model = config.tinker.base_model
    url = (config.tinker.base_url or "").rstrip("/")
    try:  # the SDK retries an unreachable endpoint for minutes, silently: fail sooner
        httpx.get(f"{url}/api/v1/healthz", timeout=CONNECT_TIMEOUT_S)
    except httpx.HTTPError as e:
        raise ConfigError(
            f"tinker.base_url {url} is unreachable ({type(e).__name__}: {e})"
        ) from None
    rest = tinker.RestClient(base_url=url, api_key=api_key)
    models = rest.get_server_capabilities().result().supported_models
    names = [m.model_name for m in models if m.model_name]
    if names and base_model not in names:
        raise ConfigError(
            f"tinker.base_model {base_model!r} is not served at {url}; served: {sorted(names)}"
        )
    return next((m.max_context_length for m in models if m.model_name == base_model), None)
