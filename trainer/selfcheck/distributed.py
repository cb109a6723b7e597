"""A short data-parallel training of a tiny model, for the suite and for manual checks.

    torchrun --nproc_per_node 2 -m skyrl_sdk.trainer.selfcheck.distributed --backend fsdp --out result.json

Every rank trains the same global batch (sharded by the learner): a rewarded reply and a
penalised one after the same prompt. Rank 0 writes a JSON report: the rewarded reply's
logprob before and after, the penalised one's, and whether every rank ended with identical
full weights. With `--check-state` it also checks checkpoints: a fresh learner of the same
backend loads `state_dict()` and gives it back unchanged, its next step matches the trained
learner's, and a single-process `Learner` loads the same state (the layouts are one).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist

from skyrl_sdk.agents.tiny import build_model
from skyrl_sdk.agents.trajectory import TrainingSample
from skyrl_sdk.trainer.config import AlgorithmConfig, OptimConfig
from skyrl_sdk.trainer.distributed_learner import DeepSpeedLearner, FSDPLearner
from skyrl_sdk.trainer.learner import Learner, LearnerSettings

PROMPT = (5, 6, 7)
GOOD, BAD = 9, 10


def _sample(token: int) -> TrainingSample:
    n = len(PROMPT)
    return TrainingSample(
        input_ids=(*PROMPT, token),
        loss_mask=(0,) * n + (1,),
        logprobs=(0.0,) * n + (-3.0,),
        policy_versions=(-1,) * n + (0,),
    )


def _model() -> torch.nn.Module:
    return build_model(32, hidden_size=32, num_layers=2, seed=0, pad_token_id=0)


@torch.no_grad()
def _logprobs(weights: dict[str, torch.Tensor]) -> tuple[float, float]:
    model = _model()
    model.load_state_dict(weights)
    logits = model(input_ids=torch.tensor([PROMPT])).logits[0, -1]
    lp = torch.log_softmax(logits, -1)
    return float(lp[GOOD]), float(lp[BAD])


def _digest(weights: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha1()
    for key in sorted(weights):
        h.update(key.encode())
        h.update(weights[key].detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


def _same(a: object, b: object) -> bool:
    """Deep equality of nested state dicts (tensors compared exactly)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if torch.is_tensor(a) and torch.is_tensor(b):
        return a.shape == b.shape and bool(torch.equal(a.float(), b.float()))
    return a == b


def _check_state(learner, make, samples, advantages) -> dict[str, bool]:
    """Round trip of `state_dict` through a fresh learner, and into a single-process one."""
    state = learner.state_dict()
    fresh = make()
    fresh.load_state_dict(state)
    round_trip = _same(state, fresh.state_dict())
    learner.train_step(samples, advantages)
    fresh.train_step(samples, advantages)
    next_step = _same(learner.engine_weights(), fresh.engine_weights())
    single = Learner(
        _model(), LearnerSettings(algorithm=AlgorithmConfig(), optim=OptimConfig(lr=1e-2))
    )
    single.load_state_dict(state)
    portable = _same(state, single.state_dict())
    return {
        "state_round_trip": round_trip,
        "resumed_step_matches": next_step,
        "single_process_loads_state": portable,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=("fsdp", "deepspeed"), required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--zero-stage", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--check-state", action="store_true", help="Also check checkpoints.")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    before = _logprobs(_model().state_dict())
    settings = LearnerSettings(
        algorithm=AlgorithmConfig(), optim=OptimConfig(lr=1e-2), total_steps=args.steps
    )

    def make() -> FSDPLearner | DeepSpeedLearner:
        if args.backend == "fsdp":
            return FSDPLearner(_model(), settings)
        return DeepSpeedLearner(_model(), settings, zero_stage=args.zero_stage)

    learner = make()
    # 5 samples over 2 ranks: one rank gets a zero-advantage filler.
    samples = [_sample(GOOD), _sample(BAD), _sample(GOOD), _sample(BAD), _sample(GOOD)]
    advantages = [1.0, -1.0, 1.0, -1.0, 1.0]
    start = time.perf_counter()
    losses = [learner.train_step(samples, advantages).loss for _ in range(args.steps)]
    train_s = time.perf_counter() - start
    weights = learner.engine_weights()
    digests: list[str | None] = [None] * learner.world_size
    dist.all_gather_object(digests, _digest(weights))
    version = learner.version
    checks = _check_state(learner, make, samples, advantages) if args.check_state else {}
    if learner.rank == 0:
        after = _logprobs(weights)
        report = {
            "backend": args.backend,
            "world_size": learner.world_size,
            "version": version,
            "train_s": train_s,
            "losses": losses,
            "good_logprob": [before[0], after[0]],
            "bad_logprob": [before[1], after[1]],
            "same_weights_on_all_ranks": len(set(digests)) == 1,
            **checks,
        }
        args.out.write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
