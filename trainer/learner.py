"""`Learner`: a single-process torch learner for causal LMs on `TrainingSample`s.

One `train_step` is one batch of samples with one advantage each (a sample may add one per
token, `TrainingSample.token_advantages`: on-policy distillation's, `trainer.opd`):

    1. pad the samples into micro-batches (or pack them into rows, `LearnerSettings.pack`);
       forward the policy -> per-token logprobs (logits divided by the sampling temperature,
       so they compare with the sampler's)
    2. truncated IS weights min(exp(learner - sampler), cap) for every generated token:
       tokens an older policy version produced (async) are re-weighted toward this one
    3. policy loss (`algorithm.loss` from `trainer.losses`), + KL to the initial policy, - entropy bonus,
       + ECHO's observation NLL, + distillation's logit KL to the teacher's top tokens (each
       when its coefficient is set), reduced over the whole batch, backward per micro-batch
       (gradient accumulation)
    4. clip the global grad norm, optimizer step, scheduler step; version += 1

LoRA (`peft`, the `lora` extra) trains adapters only; `engine_weights()` then merges them
into full weights, so inference engines never need to know about adapters.
"""

from __future__ import annotations

import asyncio
import copy
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from skyrl_sdk.agents.trajectory import TrainingSample
from skyrl_sdk.trainer import losses, model_forward, packing
from skyrl_sdk.trainer.config import AlgorithmConfig, LoRAConfig, OptimConfig, Schedule

if TYPE_CHECKING:
    from skyrl_sdk.trainer.config import TrainConfig


@dataclass(frozen=True)
class LearnerStats:
    """What one `train_step` did (token averages over generated tokens)."""

    loss: float
    """Total loss (policy + KL - entropy), batch-reduced."""
    policy_loss: float
    """The policy-gradient term alone."""
    kl_ref: float
    """Mean KL estimate to the initial policy (0 when `kl_coef` is 0)."""
    kl_sampler: float
    """KL(sampler || learner) per generated token (k3 from the sampled tokens): how far the
    trained weights have moved from those that sampled the batch (0 when on-policy)."""
    entropy: float
    """Mean per-token entropy of the policy."""
    clip_fraction: float
    """Share of tokens whose PPO ratio was clipped."""
    tis_clip_fraction: float
    """Share of tokens whose truncated IS weight hit `tis_cap`."""
    ratio_mean: float
    """Mean policy ratio seen by the loss."""
    grad_norm: float
    """Global gradient norm before clipping."""
    lr: float
    """Learning rate used for this step."""
    tokens: int
    """Generated (trained) tokens in the batch."""
    sequences: int
    """Samples in the batch."""
    staleness_mean: float
    """Mean over generated tokens of (learner version - producing version)."""
    staleness_max: int
    """Largest staleness of any generated token."""
    duration_s: float
    """Wall time of the step."""
    observation_loss: float = 0.0
    """The observation-token NLL (ECHO's term, before its coefficient): token mean over the
    batch's observation tokens (0 when `observation_loss_coef` is 0)."""
    logit_kl: float = 0.0
    """Distillation's logit term before its coefficient (`losses.logit_kl`): token mean over
    the batch's sampled tokens that carry the teacher's top tokens (0 when
    `opd_logit_kl_coef` is 0)."""


@dataclass(frozen=True)
class LearnerSettings:
    """What a learner is built from besides the model; `Learner`, `FSDPLearner` and
    `DeepSpeedLearner` all take it."""

    algorithm: AlgorithmConfig
    """Losses, clipping, KL and entropy terms, mini-batches."""
    optim: OptimConfig
    """AdamW and the learning-rate schedule."""
    lora: LoRAConfig | None = None
    """Adapters to train instead of all weights (None or `enabled: false`: full weights)."""
    temperature: float = 1.0
    """The sampler's temperature: logits are divided by it so logprobs match the sampler's."""
    pad_token_id: int = 0
    """Id that pads micro-batches (masked out of every loss)."""
    total_steps: int = 1
    """Optimizer steps of the whole run, for the learning-rate schedule."""
    micro_batch_size: int = 64
    """Sequences per forward/backward (gradient accumulation above it)."""
    supervised: bool = False
    """The data was not sampled by this policy (SFT): no truncated importance weights toward
    a sampler, whose logprobs the samples do not carry."""
    pack: bool = False
    """Pack the samples of each (mini-)batch into rows (`trainer.packing`: first-fit
    decreasing, position ids restarting per sample, attention confined to each sample) and
    forward `micro_batch_size` rows at a time instead of that many samples (False, the
    default: padded). The per-token losses are the padded ones; it needs
    `algorithm.reduction: token_mean`, the only reduction blind to rows."""
    pack_tokens: int | None = None
    """Tokens per packed row (None: the batch's longest sample, so no forward is wider than
    the padded one); a longer sample gets a row of its own."""

    def __post_init__(self) -> None:
        reduction = self.algorithm.reduction
        if self.pack and reduction is not losses.Reduction.TOKEN_MEAN:
            raise ValueError(
                "packed micro-batches need algorithm.reduction 'token_mean' (a row holds "
                f"several sequences), not {reduction.value!r}"
            )

    @classmethod
    def from_config(cls, config: TrainConfig, tokenizer: Any) -> LearnerSettings:
        """The settings a training config implies (`tokenizer` gives the pad id)."""
        return cls(
            algorithm=config.algorithm,
            optim=config.optim,
            lora=config.model.lora,
            temperature=config.rollout.temperature,
            pad_token_id=tokenizer.pad_token_id or 0,
            total_steps=config.trainer.steps,
            micro_batch_size=config.trainer.micro_batch_size,
        )


class Learner:
    """Owns the trained model, its optimizer and scheduler, and the policy version."""

    def __init__(self, model: Any, settings: LearnerSettings):
        """Train `model` (a transformers causal LM) as `settings` say."""
        self.settings = settings
        algorithm, optim, lora = settings.algorithm, settings.optim, settings.lora
        total_steps = settings.total_steps
        self.algorithm = algorithm
        self.temperature = settings.temperature
        self.pad_token_id = settings.pad_token_id
        self.micro_batch_size = settings.micro_batch_size
        self.pack, self.pack_tokens = settings.pack, settings.pack_tokens
        self.version = 0
        """Policy version of the current weights: optimizer steps (batches) applied so far."""
        self.lora = lora is not None and lora.enabled
        if self.lora:
            assert lora is not None
            model = wrap_lora(model, lora)
        self.model = model.train()
        self.keeps_logits = model_forward.keeps_logits(model)
        """Whether the model projects only the positions asked for (`logits_to_keep`)."""
        self.cache_name = model_forward.cache_argument(model)
        # KL needs the initial policy: with LoRA it is the base model (adapters disabled);
        # otherwise a frozen copy.
        self.ref_model = None
        if algorithm.kl_coef > 0 and not self.lora:
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay
        )
        self.grad_clip = optim.grad_clip
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_schedule(optim.schedule, optim.warmup_steps, total_steps)
        )
        self.reduction = algorithm.reduction
        self.kl_estimator = algorithm.kl_estimator
        self.loss_spec = losses.loss_spec(algorithm.loss)
        """The policy loss's catalogue entry (`trainer.losses.LOSSES`)."""
        self.loss_config = losses.config_for(algorithm)
        """Its typed settings, from `algorithm`."""

    # -- one step -------------------------------------------------------------------------

    def train_step(
        self, samples: Sequence[TrainingSample], advantages: Sequence[float]
    ) -> LearnerStats:
        """Train on one batch (one advantage per sample, plus each sample's per-token
        `token_advantages`, if any); bumps `version` by one."""
        if len(samples) != len(advantages) or not samples:
            raise ValueError("train_step needs one advantage per sample, and at least one sample")
        started = time.perf_counter()
        n_minibatches = min(self.algorithm.mini_batches, len(samples))
        proximal = None
        if n_minibatches > 1:
            # PPO's "old" policy is the one before this batch's first update.
            proximal = self._logprobs_no_grad(samples)
        acc = _Accumulator()
        grad_norm = 0.0
        lr = self.optimizer.param_groups[0]["lr"]
        order = list(range(len(samples)))
        chunks = [order[i::n_minibatches] for i in range(n_minibatches)]
        for chunk in chunks:
            mb_samples = [samples[i] for i in chunk]
            mb_adv = [advantages[i] for i in chunk]
            mb_prox = None if proximal is None else [proximal[i] for i in chunk]
            self.optimizer.zero_grad(set_to_none=True)
            self._accumulate(mb_samples, mb_adv, mb_prox, acc)
            grad_norm = self._clip_and_step()
        with warnings.catch_warnings():
            # The schedule follows policy versions; torch warns when a step skipped the
            # optimizer (a zero or non-finite gradient, see `_clip_and_step`), which is intended.
            warnings.filterwarnings("ignore", message=".*lr_scheduler.step", category=UserWarning)
            self.scheduler.step()
        self.version += 1
        return acc.stats(grad_norm, lr, time.perf_counter() - started, self.version - 1)

    def _accumulate(
        self,
        samples: Sequence[TrainingSample],
        advantages: Sequence[float],
        proximal: Sequence[torch.Tensor] | None,
        acc: _Accumulator,
    ) -> None:
        total_tokens = sum(sum(s.loss_mask[1:]) for s in samples)
        total_obs = sum(sum(s.observation_mask[1:]) for s in samples)
        total_distilled = sum(sum(1 for top in s.teacher_top_ids[1:] if top) for s in samples)
        total_seqs = len(samples)
        packed = self.pack
        for rows in _forwards(samples, self.micro_batch_size, packed, self.pack_tokens):
            batch, adv, old_rows = _micro_batch(
                samples, advantages, proximal, rows, self.pad_token_id, self._device(), packed
            )
            if self.keeps_logits:
                batch, adv, old_rows = _scored_region(batch, adv, old_rows)
            n_seqs = sum(len(r) for r in rows)
            logits = self._logits(self.model, batch)
            logprobs = losses.token_logprobs(logits, batch.targets)
            mask = batch.mask
            sampler = batch.sampler_logprobs
            detached = logprobs.detach()
            is_weights, _ = losses.truncated_is_weights(
                detached, sampler, cap=self.algorithm.tis_cap
            )
            tis_hits = _sum((torch.exp(detached - sampler) > self.algorithm.tis_cap).float(), mask)
            old = detached if old_rows is None else _pad_rows(old_rows, detached)
            # Clipped losses take their ratio to the proximal policy and correct stale tokens
            # by truncated IS; the others take it to the sampler (`losses.OldPolicy`).
            proximal_loss = self.loss_spec.old_policy is losses.OldPolicy.PROXIMAL
            pg, pstats = losses.policy_loss(
                self.algorithm.loss,
                logprobs,
                old if proximal_loss else sampler,
                adv,
                mask,
                self.loss_config,
                reduction=self.reduction,
                normalizer=self.algorithm.normalizer,
                is_weights=is_weights if proximal_loss and not self.settings.supervised else None,
            )
            loss, kl_ref, entropy_tok = self._regularised(pg, logits, logprobs, batch)
            # Micro-batches are parts of one batch: weight each by its share, so the sum is
            # the batch-level reduction (token mean over all tokens, or mean over sequences).
            n_tok = float(mask.sum())
            share = (
                n_tok / max(total_tokens, 1)
                if self.reduction is losses.Reduction.TOKEN_MEAN
                else n_seqs / total_seqs
            )
            obs = _observation_term(
                self.algorithm, self.temperature, logits, logprobs, batch, total_obs
            )
            kd = _logit_kl_term(self.algorithm, self.temperature, logits, batch, total_distilled)
            alg = self.algorithm
            self._backward(
                loss * share + alg.observation_loss_coef * obs + alg.opd_logit_kl_coef * kd
            )
            with torch.no_grad():
                # KL(sampler || learner) from the sampler's own tokens: k3 with r = p_learner /
                # p_sampler (the estimator's "policy" is the distribution sampled from).
                kl_sampler = losses.kl_penalty(sampler, detached, losses.KLEstimator.K3)
                acc.add(
                    tokens=n_tok,
                    seqs=n_seqs,
                    share=share,
                    loss=float(loss),
                    pg=float(pg),
                    kl_ref=float(kl_ref),
                    kl_sampler=_sum(kl_sampler, mask),
                    entropy=_sum(entropy_tok, mask),
                    clip=pstats.clip_fraction * n_tok,
                    ratio=pstats.ratio_mean * n_tok,
                    tis=tis_hits,
                    obs=float(obs),
                    logit_kl=float(kd),
                    versions=batch.versions[mask.bool()],
                )

    def _regularised(
        self, pg: torch.Tensor, logits: torch.Tensor, logprobs: torch.Tensor, batch: _Padded
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A micro-batch's loss: the policy loss `pg` plus the KL penalty to the reference
        policy, minus the entropy bonus; with the reduced KL and the per-token entropy."""
        mask = batch.mask
        loss = pg
        kl_ref = torch.zeros(())
        if self.algorithm.kl_coef > 0:
            ref = self._ref_logprobs(batch)
            kl_tok = losses.kl_penalty(logprobs, ref, self.kl_estimator)
            kl_ref = losses.reduce(kl_tok, mask, self.reduction, self.algorithm.normalizer)
            loss = loss + self.algorithm.kl_coef * kl_ref
        if self.algorithm.entropy_coef > 0:
            entropy_tok = losses.entropy_from_logits(logits)
            loss = loss - self.algorithm.entropy_coef * losses.reduce(
                entropy_tok, mask, self.reduction, self.algorithm.normalizer
            )
        else:
            with torch.no_grad():
                entropy_tok = losses.entropy_from_logits(logits.detach())
        return loss, kl_ref, entropy_tok

    def _backward(self, loss: torch.Tensor) -> None:
        """Backward of one micro-batch's share of the loss (DeepSpeed overrides this)."""
        loss.backward()

    def _clip_and_step(self) -> float:
        params = [p for p in self.model.parameters() if p.requires_grad and p.grad is not None]
        max_norm = self.grad_clip if self.grad_clip is not None else float("inf")
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        # A non-finite gradient skips the update rather than poisoning the weights; a zero one
        # (every advantage 0) skips it too, or Adam's momentum would keep moving the policy
        # on a batch that carries no signal.
        if math.isfinite(norm) and norm > 0:
            self.optimizer.step()
        return norm

    # -- forward helpers ------------------------------------------------------------------

    def _logits(self, model: Any, batch: _Padded) -> torch.Tensor:
        """Logits for `batch.targets` (`[B, T, V]`, divided by the sampler's temperature),
        from `batch.first_scored` on (`model_forward.causal_logits`)."""
        raw = model_forward.causal_logits(
            model,
            batch.input_ids,
            batch.attention_mask,
            batch.position_ids,
            first=batch.first_scored,
            shared=batch.shared_prefix,
            cache_name=self.cache_name,
        )
        # Position t predicts token t+1; the sampler's temperature applies to both sides.
        logits = raw[:, :-1, :].float()
        # Dividing by 1.0 would be a full [batch, tokens, vocab] pass forward and backward.
        return logits if self.temperature == 1.0 else logits / self.temperature

    @torch.no_grad()
    def _logprobs_no_grad(self, samples: Sequence[TrainingSample]) -> list[torch.Tensor]:
        out: list[torch.Tensor] = []
        for start in range(0, len(samples), self.micro_batch_size):
            chunk = samples[start : start + self.micro_batch_size]
            batch = _pad(chunk, self.pad_token_id, self._device())
            lp = losses.token_logprobs(self._logits(self.model, batch), batch.targets)
            out.extend(lp[i, : len(s.input_ids) - 1] for i, s in enumerate(chunk))
        return out

    def _device(self) -> torch.device:
        """Where the model's weights are (a GPU or the CPU): batches are built there."""
        return next(self.model.parameters()).device

    @torch.no_grad()
    def _ref_logprobs(self, batch: _Padded) -> torch.Tensor:
        if self.lora:
            with self.model.disable_adapter():
                logits = self._logits(self.model, batch)
        else:
            assert self.ref_model is not None
            logits = self._logits(self.ref_model, batch)
        return losses.token_logprobs(logits, batch.targets)

    async def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """Each completion token's logprob under the current weights (`agents.scoring.Scorer`:
        raw logits, no temperature; with LoRA, the adapters on). Not while `train_step` runs."""
        return (await self.score_batch([(prompt_ids, completion_ids)]))[0]

    async def score_batch(
        self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]
    ) -> list[list[float]]:
        """`score` of each (prompt, completion) pair, `micro_batch_size` rows a forward
        (`model_forward.score_pairs`: a shared prompt forwarded once)."""
        return await asyncio.to_thread(self._score_batch, [([*p], [*c]) for p, c in pairs])

    def _score_batch(self, pairs: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        self.model.eval()  # dropout (LoRA's too) off: the engine has none
        try:
            scored = model_forward.score_pairs(self.model, pairs, batch_size=self.micro_batch_size)
        finally:
            self.model.train()
        return [list(s.logprobs) for s in scored]

    # -- weights and state ----------------------------------------------------------------

    @torch.no_grad()
    def engine_weights(self) -> dict[str, torch.Tensor]:
        """A snapshot of the full weights, keyed like the plain (non-LoRA) model.

        Tensors are copies where training can still change them, so an engine may load them
        later (between two decoding steps) while the next step already trains.
        """
        if not self.lora:
            return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return merged_lora_weights(self.model)

    def state_dict(self) -> dict[str, Any]:
        """Trainable weights, optimizer, scheduler and version (for checkpoints)."""
        trainable = {n for n, p in self.model.named_parameters() if p.requires_grad}
        weights = {
            k: v.detach().clone() for k, v in self.model.state_dict().items() if k in trainable
        }
        return {
            "weights": weights,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "version": self.version,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Inverse of `state_dict`."""
        missing, unexpected = self.model.load_state_dict(state["weights"], strict=False)
        trainable = {n for n, p in self.model.named_parameters() if p.requires_grad}
        if unexpected or (set(missing) & trainable):
            raise ValueError(
                f"checkpoint does not match the model: missing {sorted(set(missing) & trainable)[:5]}, "
                f"unexpected {sorted(unexpected)[:5]}"
            )
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.version = int(state["version"])


# -- helpers ------------------------------------------------------------------------------


def _observation_term(
    algorithm: AlgorithmConfig,
    temperature: float,
    logits: torch.Tensor,
    logprobs: torch.Tensor,
    batch: _Padded,
    total: int,
) -> torch.Tensor:
    """A micro-batch's part of ECHO's observation NLL (`losses.observation_loss`), or zero
    without computing anything when `observation_loss_coef` is 0 (the loss is then exactly
    what it was without the term)."""
    if algorithm.observation_loss_coef == 0 or total == 0:
        return torch.zeros((), device=logprobs.device)
    if temperature != 1.0:
        # The env's tokens were not sampled: score them under the untempered model.
        logprobs = losses.token_logprobs(logits * temperature, batch.targets)
    return losses.observation_loss(logprobs, batch.observation, total)


def _logit_kl_term(
    algorithm: AlgorithmConfig,
    temperature: float,
    logits: torch.Tensor,
    batch: _Padded,
    total: int,
) -> torch.Tensor:
    """A micro-batch's part of distillation's logit KL (`losses.logit_kl`), or zero without
    computing anything when `opd_logit_kl_coef` is 0 or no sample carries the teacher's
    tokens."""
    if algorithm.opd_logit_kl_coef == 0 or total == 0 or batch.teacher_ids is None:
        return torch.zeros((), device=logits.device)
    assert batch.teacher_logprobs is not None and batch.distilled is not None
    # The teacher's distribution is its untempered one; so is the student's it is matched to.
    student = logits * temperature if temperature != 1.0 else logits
    return losses.logit_kl(
        student, batch.teacher_ids, batch.teacher_logprobs, batch.distilled, total
    )


@dataclass(frozen=True)
class _Padded:
    """A right-padded micro-batch; per-token fields are aligned with `targets`."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    sampler_logprobs: torch.Tensor
    versions: torch.Tensor
    observation: torch.Tensor
    token_advantages: torch.Tensor | None = None
    """Per-token advantages added to each sample's own (None: no sample carries any)."""
    position_ids: torch.Tensor | None = None
    """Packed rows' positions, restarting at each sample (None: a padded batch, positions
    from the attention mask)."""
    first_scored: int = 0
    """The per-token fields start at this target position (`_scored_region`): the ones
    before it carry no loss, observation or advantage in any row."""
    shared_prefix: int = 0
    """Every row starts with the same this many ids (a GRPO group's prompt), all before
    `first_scored` + 1: they are forwarded once, not once per row (0: no sharing)."""
    teacher_ids: torch.Tensor | None = None
    """`[batch, tokens, k]`: the teacher's top ids per target (`TrainingSample.teacher_top_ids`;
    None: no sample carries any)."""
    teacher_logprobs: torch.Tensor | None = None
    """`[batch, tokens, k]`: their teacher logprobs."""
    distilled: torch.Tensor | None = None
    """`[batch, tokens]`: 1 where a target carries the teacher's top ids."""


def _pad(
    samples: Sequence[TrainingSample],
    pad_id: int,
    device: torch.device | None = None,
    positions: Sequence[Sequence[int]] | None = None,
) -> _Padded:
    width = max(len(s.input_ids) for s in samples)
    n = len(samples)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.float32)
    sampler = torch.zeros((n, width), dtype=torch.float32)
    versions = torch.full((n, width), -1, dtype=torch.long)
    observed = torch.zeros((n, width), dtype=torch.float32)
    per_token = torch.zeros((n, width), dtype=torch.float32)
    for row, s in enumerate(samples):
        k = len(s.input_ids)
        ids[row, :k] = torch.tensor(s.input_ids)
        attention[row, :k] = 1
        mask[row, :k] = torch.tensor(s.loss_mask, dtype=torch.float32)
        sampler[row, :k] = torch.tensor(s.logprobs, dtype=torch.float32)
        versions[row, :k] = torch.tensor(s.policy_versions)
        if s.observation_mask:
            observed[row, :k] = torch.tensor(s.observation_mask, dtype=torch.float32)
        if s.token_advantages:
            per_token[row, :k] = torch.tensor(s.token_advantages, dtype=torch.float32)
    any_per_token = any(s.token_advantages for s in samples)
    teacher = _teacher_targets(samples, width)
    if device is not None:  # one copy per tensor, after filling them row by row on the host
        ids, attention, mask, sampler, versions, observed, per_token = (
            t.to(device) for t in (ids, attention, mask, sampler, versions, observed, per_token)
        )
        teacher = tuple(t.to(device) for t in teacher)
    # Shift: position t's logits score token t+1, so per-token fields drop their first entry.
    top_ids, top_logprobs, distilled = (t[:, 1:] for t in teacher) if teacher else (None,) * 3
    return _Padded(
        ids,
        attention,
        ids[:, 1:],
        mask[:, 1:],
        sampler[:, 1:],
        versions[:, 1:],
        observed[:, 1:],
        per_token[:, 1:] if any_per_token else None,
        None if positions is None else _positions(positions, width, ids.device),
        teacher_ids=top_ids,
        teacher_logprobs=top_logprobs,
        distilled=distilled,
    )


def _teacher_targets(
    samples: Sequence[TrainingSample], width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | tuple[()]:
    """The samples' `teacher_top_ids` / `_logprobs` as `[n, width, k]` tensors and the
    `[n, width]` mask of the positions that have them; `()` when no sample has any. Positions
    without them hold id 0 and logprob 0 (masked out)."""
    k = next((len(top) for s in samples for top in s.teacher_top_ids if top), 0)
    if not k:
        return ()
    n = len(samples)
    top_ids = torch.zeros((n, width, k), dtype=torch.long)
    top_logprobs = torch.zeros((n, width, k), dtype=torch.float32)
    distilled = torch.zeros((n, width), dtype=torch.float32)
    for row, s in enumerate(samples):
        at = [i for i, top in enumerate(s.teacher_top_ids) if top]
        if not at:
            continue
        top_ids[row, at] = torch.tensor([s.teacher_top_ids[i] for i in at], dtype=torch.long)
        top_logprobs[row, at] = torch.tensor([s.teacher_top_logprobs[i] for i in at])
        distilled[row, at] = 1.0
    return top_ids, top_logprobs, distilled


def _positions(rows: Sequence[Sequence[int]], width: int, device: torch.device) -> torch.Tensor:
    """Packed rows' position ids, `width` wide: a row's padding counts up from 0 again, so
    transformers reads it as one more sequence that no real token attends to."""
    out = torch.zeros((len(rows), width), dtype=torch.long)
    for r, row in enumerate(rows):
        out[r, : len(row)] = torch.tensor(row)
        out[r, len(row) :] = torch.arange(width - len(row))
    return out.to(device)


def _forwards(
    samples: Sequence[TrainingSample], micro_batch_size: int, pack: bool, pack_tokens: int | None
) -> list[list[list[int]]]:
    """The rows of each forward, as indices into `samples`: padded, `micro_batch_size` rows of
    one sample each; packed, `micro_batch_size` of the rows `packing.first_fit_decreasing`
    fills up to `pack_tokens` (None: the longest sample's length)."""
    if not pack:
        rows = [[i] for i in range(len(samples))]
    else:
        lengths = [len(s.input_ids) for s in samples]
        rows = packing.first_fit_decreasing(lengths, pack_tokens or max(lengths))
    return [rows[i : i + micro_batch_size] for i in range(0, len(rows), micro_batch_size)]


def _micro_batch(
    samples: Sequence[TrainingSample],
    advantages: Sequence[float],
    proximal: Sequence[torch.Tensor] | None,
    rows: Sequence[Sequence[int]],
    pad_id: int,
    device: torch.device,
    packed: bool,
) -> tuple[_Padded, torch.Tensor, list[torch.Tensor] | None]:
    """The forward's batch of `rows` (padded rows of one sample, or packed rows), its
    advantages (per row, or per token) and its rows' proximal logprobs (None without
    mini-batches)."""
    if not packed:
        idx = [r[0] for r in rows]
        batch = _pad([samples[i] for i in idx], pad_id, device)
        adv = torch.tensor([advantages[i] for i in idx], dtype=torch.float32, device=device)
        old_rows = None if proximal is None else [proximal[i] for i in idx]
    else:
        made = [packing.pack_row(samples, advantages, r) for r in rows]
        batch = _pad([m.sample for m in made], pad_id, device, [m.position_ids for m in made])
        adv = torch.zeros(len(rows), dtype=torch.float32, device=device)  # in the tokens'
        old_rows = (
            None
            if proximal is None
            else [packing.join_targets([proximal[i] for i in r]) for r in rows]
        )
    if batch.token_advantages is not None:  # per token (`TrainingSample.token_advantages`)
        adv = adv[:, None] + batch.token_advantages
    return batch, adv, old_rows


def _scored_region(
    batch: _Padded, adv: torch.Tensor, old_rows: list[torch.Tensor] | None
) -> tuple[_Padded, torch.Tensor, list[torch.Tensor] | None]:
    """`batch` (its advantages, its rows' proximal logprobs) from the first target position
    that any loss reads (a trained or an observation token) on: the shared prompt positions
    before it need no logits (unchanged when every row is scored from its start)."""
    scored = (batch.mask != 0) | (batch.observation != 0)
    hits = scored.any(dim=0).nonzero()
    first = int(hits[0]) if hits.numel() else 0
    if first == 0:
        return batch, adv, old_rows
    sliced = replace(
        batch,
        targets=batch.targets[:, first:],
        mask=batch.mask[:, first:],
        sampler_logprobs=batch.sampler_logprobs[:, first:],
        versions=batch.versions[:, first:],
        observation=batch.observation[:, first:],
        token_advantages=_cut(batch.token_advantages, first),
        teacher_ids=_cut(batch.teacher_ids, first),
        teacher_logprobs=_cut(batch.teacher_logprobs, first),
        distilled=_cut(batch.distilled, first),
        first_scored=first,
    )
    if batch.position_ids is None:
        shared = model_forward.shared_prefix(batch.input_ids, batch.attention_mask, first)
        sliced = replace(sliced, shared_prefix=shared)
    if adv.dim() == 2:  # per token
        adv = adv[:, first:]
    return sliced, adv, None if old_rows is None else [row[first:] for row in old_rows]


def _cut(x: torch.Tensor | None, first: int) -> torch.Tensor | None:
    """`x` from target position `first` on (None stays None)."""
    return None if x is None else x[:, first:]


def _pad_rows(rows: Sequence[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    out = like.clone()
    for i, row in enumerate(rows):
        out[i, : row.shape[0]] = row
    return out


def _sum(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum())


class _Accumulator:
    """Sums micro-batch statistics into one `LearnerStats`."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.versions: list[torch.Tensor] = []

    def add(self, *, versions: torch.Tensor, share: float, **values: float) -> None:
        for key in ("loss", "pg", "kl_ref"):
            self.totals[key] = self.totals.get(key, 0.0) + values.pop(key) * share
        for key, value in values.items():
            self.totals[key] = self.totals.get(key, 0.0) + value
        self.versions.append(versions)

    def stats(self, grad_norm: float, lr: float, duration: float, version: int) -> LearnerStats:
        t = self.totals
        tokens = max(t["tokens"], 1.0)
        produced = torch.cat(self.versions) if self.versions else torch.zeros(0, dtype=torch.long)
        lag = (version - produced).clamp(min=0).float()
        return LearnerStats(
            loss=t["loss"],
            policy_loss=t["pg"],
            kl_ref=t["kl_ref"],
            kl_sampler=t["kl_sampler"] / tokens,
            entropy=t["entropy"] / tokens,
            clip_fraction=t["clip"] / tokens,
            tis_clip_fraction=t["tis"] / tokens,
            ratio_mean=t["ratio"] / tokens,
            grad_norm=grad_norm,
            lr=lr,
            tokens=int(t["tokens"]),
            sequences=int(t["seqs"]),
            staleness_mean=float(lag.mean()) if lag.numel() else 0.0,
            staleness_max=int(lag.max()) if lag.numel() else 0,
            duration_s=duration,
            observation_loss=t.get("obs", 0.0),
            logit_kl=t.get("logit_kl", 0.0),
        )


def lr_schedule(schedule: Schedule, warmup: int, total: int) -> Callable[[int], float]:
    """The LR multiplier for optimizer step `step`: linear warm-up, then `schedule` to 0 at
    `total` (a `LambdaLR` factor; the Tinker trainer applies it to AdamParams itself)."""

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule is Schedule.CONSTANT:
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        if schedule is Schedule.LINEAR:
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def merged_lora_weights(model: Any) -> dict[str, torch.Tensor]:
    """The full weights of a `peft` LoRA model with its adapters merged in, keyed like the
    plain model (the frozen base tensors are shared, the merged ones are new)."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    out: dict[str, torch.Tensor] = {}
    for key, value in base.state_dict().items():
        if "lora_" in key:
            continue
        out[key.replace(".base_layer.", ".")] = value  # frozen: safe to share
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            weight = module.base_layer.weight
            out[f"{name}.weight"] = weight + module.get_delta_weight("default").to(weight.dtype)
    return out


def wrap_lora(model: Any, lora: LoRAConfig) -> Any:
    """`model` with `peft` adapters as `lora` describes (the only place adapters are added)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:
        raise ImportError("LoRA training needs peft: pip install 'skyrl-sdk[lora]'") from e
    if lora.seed is not None:
        torch.manual_seed(lora.seed)
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)
