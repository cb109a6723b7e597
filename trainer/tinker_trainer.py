"""`TinkerTrainer`: the RL loop of `AsyncTrainer`, with the model behind a Tinker API endpoint.

`skyrl train CONFIG backend=tinker tinker.base_url=URL tinker.base_model=NAME` runs this loop.
Everything but the model is the local trainer's: the same config file, env and
`agents.rollout`, data order (`DataCursor`), per-episode sampling seeds (`SeededPolicy`),
advantages (`build_batch`), loss reductions (`trainer.losses`), LR schedule, metrics
(`step_metrics`, the same sinks) and run directory (`config.yaml`, `metrics.jsonl`,
`trajectories.jsonl`, `checkpoints/step_N`, `summary.json`). The endpoint can be ours
(`skyrl tinker serve`) or a hosted Tinker service; only the official `tinker` SDK talks to it.

Synchronous on-policy: `trainer.max_staleness` must be 0. One step, top to bottom
(`TinkerTrainer.train`):

    1. publish: save_weights_for_sampler("step_N") -> a tinker:// path; a SamplingClient of
       that path becomes the policy (`TinkerPolicy`), version N
    2. play `groups_per_step` groups of `group_size` episodes with `agents.rollout`; every
       sampled token carries the sampler's logprob and version N
    3. advantages per group (GRPO / Dr.GRPO / RLOO), one per TrainingSample
    4. per mini-batch: one Datum per sample (model_input = ids[:-1], target_tokens = ids[1:],
       logprobs = sampler logprobs, advantages = A x reduction weight on generated tokens and 0
       elsewhere), forward_backward with loss `importance_sampling` or `ppo`, then optim_step
       with AdamParams from `optim` (the scheduled LR)
    5. log the same metrics; every `checkpoint_every` steps and at the end, save_state to the
       endpoint and record its tinker:// path in `checkpoints/step_N` (`--resume` loads it)

Tinker losses are per-token sums, so the reduction (token mean, sequence mean, constant) is
folded into the advantages as the per-token weights of `losses.reduce`: the summed Tinker
objective is then exactly the reduced loss the local learner minimises. What Tinker's built-in
losses lack is rejected up front (`check_config`): a KL penalty, an entropy bonus, and the
PPO dual clip when more than one mini-batch makes the clip matter.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import torch
from rich.console import Console

import skyrl_sdk.trainer.lookup_env  # noqa: F401  (registers the `lookup` env)
from skyrl_sdk.agents.rollout import RolloutLimits
from skyrl_sdk.agents.tinker_policy import TinkerPolicy, import_tinker
from skyrl_sdk.agents.trajectory import TrainingSample, Trajectory
from skyrl_sdk.trainer import losses
from skyrl_sdk.trainer.async_trainer import (
    Group,
    SeededPolicy,
    TrainResult,
    build_batch,
    make_env,
    open_run_outputs,
    play_episode,
    sampling_params,
    seed_everything,
    step_metrics,
)
from skyrl_sdk.trainer.checkpoint import Checkpointer, CheckpointState, capture_rng, restore_rng
from skyrl_sdk.trainer.config import AlgorithmConfig, ConfigError, PolicyLoss, TrainConfig
from skyrl_sdk.trainer.data import DataCursor
from skyrl_sdk.trainer.learner import LearnerStats, lr_schedule

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
    if alg.loss is PolicyLoss.PPO and alg.mini_batches > 1 and alg.dual_clip is not None:
        problems.append(
            "algorithm.dual_clip: Tinker's ppo loss has no dual clip, which matters with "
            "mini_batches > 1; set algorithm.dual_clip=null"
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
    """One `tinker.types.Datum` per sample, for the `importance_sampling` / `ppo` losses."""
    types = import_tinker().types
    datums = []
    for sample, adv, weights in zip(
        samples, advantages, reduction_weights(samples, algorithm), strict=True
    ):
        ids = list(sample.input_ids)
        datums.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(ids[:-1]),
                loss_fn_inputs={
                    "target_tokens": ids[1:],
                    "logprobs": list(sample.logprobs[1:]),
                    "advantages": [adv * w for w in weights],
                },
            )
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
    """Summed k3 KL between the endpoint's and the sampler's logprobs on generated tokens."""
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


class TinkerTrainer:
    """Trains a policy through a Tinker API endpoint with the local trainer's RL loop."""

    def __init__(
        self,
        config: TrainConfig,
        *,
        resume: bool = False,
        console: Console | None = None,
    ):
        check_config(config)
        self.config = config
        self.console = console or Console()
        self.tinker = import_tinker()
        tcfg = config.tinker
        assert tcfg.base_url and tcfg.base_model  # TrainConfig validates this
        self.base_model = tcfg.base_model
        self.run_dir = Path(config.out_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        seed_everything(config.seed)

        # Env and its task list; group i plays tasks[cursor.task_index(i)] (as AsyncTrainer).
        probe = self._make_env()
        self.tasks: list[dict[str, Any]] = list(getattr(probe.unwrapped, "tasks", ()))
        probe.close()
        self.cursor = DataCursor(len(self.tasks), config.seed)
        self.step = 0
        self.resumed_from: int | None = None
        self.checkpointer = Checkpointer(self.run_dir, keep=config.trainer.keep_checkpoints)

        # The endpoint: a LoRA training client, fresh or from the run's last saved state.
        api_key = _api_key(config)
        self.service = self.tinker.ServiceClient(base_url=tcfg.base_url, api_key=api_key)
        max_context = self._check_served(api_key)
        state = self._restore() if resume else None
        if state is None:
            future = self.service.create_lora_training_client(
                self.base_model, rank=tcfg.lora_rank, seed=config.seed
            )
        else:
            future = self.service.create_training_client_from_state_with_optimizer(
                state.learner["tinker_path"]
            )
        self.training = future.result()
        tokenizer = self.training.get_tokenizer()
        self.console.print(
            f"backend tinker: LoRA rank {tcfg.lora_rank} on {self.base_model} at {tcfg.base_url} "
            "(the `model` section is not used)"
        )

        self.engine = TinkerPolicy(None, tokenizer, name=f"tinker:{self.base_model}")
        self.policy = SeededPolicy(self.engine, config.seed)  # type: ignore[arg-type]
        self.limits = RolloutLimits(
            max_turns=config.env.max_turns,
            max_tokens=config.rollout.max_tokens,
            max_context_tokens=config.rollout.max_context_tokens or max_context,
        )
        self.sampling = sampling_params(config)
        self._lr_factor = lr_schedule(
            config.optim.schedule, config.optim.warmup_steps, config.trainer.steps
        )
        self.sinks, self.writer = open_run_outputs(
            config, self.run_dir, self.resumed_from, self.console
        )
        self._pending = self.cursor.pending()
        self.sampler_path: str | None = None
        self.state_path: str | None = None if state is None else state.learner["tinker_path"]

    # -- the training loop ----------------------------------------------------------------

    def run(self) -> TrainResult:
        """Train to `trainer.steps` (blocking)."""
        return asyncio.run(self.train())

    async def train(self) -> TrainResult:
        """Train to `trainer.steps`; see the module docstring for one step."""
        cfg = self.config.trainer
        history: list[dict[str, Any]] = []
        status = "errored"
        try:
            while self.step < cfg.steps:
                t_step = time.perf_counter()
                version = self.step
                # 1. The current weights, as a sampler: policy version `version`.
                t0 = time.perf_counter()
                await self._publish(version)
                t_sync = time.perf_counter() - t0
                # 2. A batch of groups, all played with those weights (on-policy).
                t0 = time.perf_counter()
                indices = [next(self._pending) for _ in range(cfg.groups_per_step)]
                async with asyncio.timeout(cfg.step_timeout_s):
                    groups = list(await asyncio.gather(*(self._group(i, version) for i in indices)))
                t_wait = time.perf_counter() - t0
                # 3. Advantages, flattened to one per training sample.
                samples, advantages, adv_values = build_batch(groups, self.config.algorithm)
                # 4. forward_backward + optim_step on the endpoint.
                t0 = time.perf_counter()
                stats, endpoint_loss = await self._train_step(samples, advantages, version)
                t_train = time.perf_counter() - t0
                # 5. Bookkeeping, as AsyncTrainer.
                self.cursor.mark_consumed(indices)
                self.step += 1
                metrics = step_metrics(groups, stats, adv_values, self.step)
                # Tinker returns target logprobs only, not the full distribution.
                metrics.pop("policy/entropy", None)
                if math.isnan(stats.grad_norm):  # the endpoint reports no gradient norm
                    del metrics["optim/grad_norm"]
                metrics.update(
                    {
                        "time/wait_s": t_wait,
                        "time/train_s": t_train,
                        "time/sync_s": t_sync,
                        "time/step_s": time.perf_counter() - t_step,
                        "tinker/sampler_path": self.sampler_path,
                    }
                )
                if endpoint_loss is not None:
                    metrics["tinker/loss_sum"] = endpoint_loss
                metrics["throughput/tokens_per_s"] = (
                    metrics["tokens/generated"] / metrics["time/step_s"]
                )
                self.sinks.log(metrics, self.step)
                history.append({"step": self.step, **metrics})
                if self.step == cfg.steps or (
                    cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0
                ):
                    await self.save_checkpoint()
            if self.step and self.sampler_path is not None:  # the trained policy, for sampling
                self.sampler_path = await self._save_sampler(self.step)
            status = "success"
        except (KeyboardInterrupt, asyncio.CancelledError):
            status = "interrupted"
            raise
        finally:
            self.sinks.close()
            if self.writer is not None:
                self.writer.close()
            try:
                await self.service.close(status)
            except Exception as e:  # a failed goodbye must not hide the run's own error
                self.console.print(f"[yellow]closing the tinker session failed: {e}[/yellow]")
        result = TrainResult(self.run_dir, self.step, self.step, tuple(history), self.resumed_from)
        (self.run_dir / "summary.json").write_text(
            json.dumps(
                {
                    "steps": result.steps,
                    "version": result.version,
                    "resumed_from": result.resumed_from,
                    "backend": "tinker",
                    "base_url": self.config.tinker.base_url,
                    "base_model": self.base_model,
                    "tinker_state_path": self.state_path,
                    "tinker_sampler_path": self.sampler_path,
                }
            )
        )
        return result

    async def _publish(self, version: int) -> None:
        """Save the weights for sampling and point the policy at them."""
        path = await self._save_sampler(version)
        client = await self.service.create_sampling_client(model_path=path)
        self.engine.use(client, version)
        self.sampler_path = path

    async def _save_sampler(self, version: int) -> str:
        """save_weights_for_sampler under the version's name; its tinker:// path."""
        saved = await self.training.save_weights_for_sampler(f"step_{version:06d}")
        return saved.path

    async def _group(self, index: int, version: int) -> Group:
        task = self.tasks[self.cursor.task_index(index)]
        trajectories = await asyncio.gather(
            *(self._episode(index, k, task) for k in range(self.config.rollout.group_size))
        )
        return Group(index, str(task.get("task_id", "")), version, tuple(trajectories))

    async def _episode(self, index: int, k: int, task: dict[str, Any]) -> Trajectory:
        return await play_episode(self, index, k, task)

    async def _train_step(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float], version: int
    ) -> tuple[LearnerStats, float | None]:
        """Mini-batches of forward_backward + optim_step (split as the local learner does)."""
        started = time.perf_counter()
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
                await self._mini_batch(
                    [samples[i] for i in chunk], [advantages[i] for i in chunk], adam
                )
            )
        tokens = max(sum(r.tokens for r in results), 1)
        stepped = [r for r in results if r.stepped]
        norms = [r.grad_norm for r in stepped if r.grad_norm is not None]
        loss = sum(r.loss for r in results)
        reported = [r.endpoint_loss for r in results]
        lags = [version - v for s in samples for v in s.policy_versions if v >= 0]
        stats = LearnerStats(
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
        endpoint_loss = None if None in reported else sum(r for r in reported if r is not None)
        return stats, endpoint_loss

    async def _mini_batch(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float], adam: Any
    ) -> MiniBatchResult:
        alg = self.config.algorithm
        datums = build_datums(samples, advantages, alg)
        loss_fn, loss_config = "importance_sampling", None
        if alg.loss is PolicyLoss.PPO:
            loss_fn = "ppo"
            loss_config = {
                "clip_low_threshold": 1.0 - alg.clip_low,
                "clip_high_threshold": 1.0 + alg.clip_high,
            }
        grad_norm = None
        stepped = any(a != 0 for a in advantages)
        if stepped:
            fb_future = self.training.forward_backward(datums, loss_fn, loss_config)
            opt_future = self.training.optim_step(adam)
            output = await fb_future
            opt = await opt_future
            grad_norm = (opt.metrics or {}).get("grad_norm:mean")
        else:
            # No signal: the local learner skips the optimizer step (Adam's momentum would
            # still move the weights); a forward pass gives the statistics.
            output = await self.training.forward(datums, loss_fn, loss_config)
        logprobs = [torch.tensor(o["logprobs"].tolist()) for o in output.loss_fn_outputs]
        return _reduce_locally(
            samples, advantages, logprobs, alg, output.metrics, stepped, grad_norm
        )

    # -- checkpoints ----------------------------------------------------------------------

    async def save_checkpoint(self) -> Path:
        """save_state on the endpoint (weights + optimizer); its path, the data cursor, RNG
        and step go to `checkpoints/step_N` like the local trainer's checkpoints."""
        saved = await self.training.save_state(f"step_{self.step:06d}")
        self.state_path = saved.path
        learner = {"tinker_path": saved.path, "base_model": self.base_model, "version": self.step}
        path = self.checkpointer.save(
            CheckpointState(self.step, learner, self.cursor.state_dict(), capture_rng())
        )
        (path / "tinker.json").write_text(json.dumps(learner))
        with (self.run_dir / CHECKPOINT_LOG).open("a") as f:
            f.write(json.dumps({"step": self.step, "state_path": saved.path}) + "\n")
        return path

    def _restore(self) -> CheckpointState | None:
        state = self.checkpointer.load()
        if state is None:
            self.console.print("[yellow]--resume: no checkpoint found; starting fresh[/yellow]")
            return None
        if "tinker_path" not in state.learner:
            raise ConfigError(f"{self.checkpointer.latest()} is a local-backend checkpoint")
        if state.learner["base_model"] != self.base_model:
            raise ConfigError(
                f"tinker.base_model is {self.base_model!r} but the checkpoint trained "
                f"{state.learner['base_model']!r}"
            )
        self.cursor.load_state_dict(state.cursor)
        restore_rng(state.rng)
        self.step = self.resumed_from = state.step
        self.console.print(f"resumed from step {state.step} ({state.learner['tinker_path']})")
        return state

    # -- helpers --------------------------------------------------------------------------

    def _check_served(self, api_key: str) -> int | None:
        """Fail early if the endpoint does not serve `base_model`; its context length."""
        url = (self.config.tinker.base_url or "").rstrip("/")
        try:  # the SDK retries an unreachable endpoint for minutes, silently: fail sooner
            httpx.get(f"{url}/api/v1/healthz", timeout=CONNECT_TIMEOUT_S)
        except httpx.HTTPError as e:
            raise ConfigError(
                f"tinker.base_url {url} is unreachable ({type(e).__name__}: {e})"
            ) from None
        rest = self.tinker.RestClient(base_url=url, api_key=api_key)
        models = rest.get_server_capabilities().result().supported_models
        names = [m.model_name for m in models if m.model_name]
        if names and self.base_model not in names:
            raise ConfigError(
                f"tinker.base_model {self.base_model!r} is not served at "
                f"{url}; served: {sorted(names)}"
            )
        return next((m.max_context_length for m in models if m.model_name == self.base_model), None)

    def _make_env(self) -> Any:
        return make_env(self.config)


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
    reduction = losses.Reduction(algorithm.reduction.value)
    kwargs = {"reduction": reduction, "normalizer": algorithm.normalizer}
    if algorithm.loss is PolicyLoss.PPO:
        loss, pstats = losses.ppo_clip_loss(
            learner,
            sampler,
            adv,
            mask,
            clip_low=algorithm.clip_low,
            clip_high=algorithm.clip_high,
            dual_clip=None,
            **kwargs,
        )
    else:
        loss, pstats = losses.importance_sampling_loss(learner, sampler, adv, mask, **kwargs)
    tokens = int(mask.sum())
    kl = losses.kl_penalty(learner, sampler, losses.KLEstimator.K3)
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
