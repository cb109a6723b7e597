"""A short data-parallel training of a tiny model, for the suite and for manual checks.

    torchrun --nproc_per_node 2 -m trainer.distributed_smoke --backend fsdp --out result.json

Every rank trains the same global batch (sharded by the learner): a rewarded reply and a
penalised one after the same prompt. Rank 0 writes a JSON report: the rewarded reply's
logprob before and after, the penalised one's, and whether every rank ended with identical
full weights.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist

from agents.tiny import build_model
from agents.trajectory import TrainingSample
from trainer.config import AlgorithmConfig, OptimConfig
from trainer.distributed_learner import DeepSpeedLearner, FSDPLearner

PROMPT = (5, 6, 7)
GOOD, BAD = 9, 10


def _sample(token: int) -> TrainingSample:
    n = len(PROMPT)
    return TrainingSample(
        input_ids=(*PROMPT, token),
        loss_mask=(0,) * n + (1,),
        logprobs=(0.0,) * n + (-3.0,),
        policy_versions=(-1,) * n + (0,),
        token_rewards=(0.0,) * (n + 1),
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=("fsdp", "deepspeed"), required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--zero-stage", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    before = _logprobs(_model().state_dict())
    kwargs = dict(algorithm=AlgorithmConfig(), optim=OptimConfig(lr=1e-2), total_steps=args.steps)
    if args.backend == "fsdp":
        learner = FSDPLearner(_model(), **kwargs)
    else:
        learner = DeepSpeedLearner(_model(), zero_stage=args.zero_stage, **kwargs)
    # 5 samples over 2 ranks: one rank gets a zero-advantage filler.
    samples = [_sample(GOOD), _sample(BAD), _sample(GOOD), _sample(BAD), _sample(GOOD)]
    advantages = [1.0, -1.0, 1.0, -1.0, 1.0]
    start = time.perf_counter()
    losses = [learner.train_step(samples, advantages).loss for _ in range(args.steps)]
    train_s = time.perf_counter() - start
    weights = learner.engine_weights()
    digests: list[str | None] = [None] * learner.world_size
    dist.all_gather_object(digests, _digest(weights))
    if learner.rank == 0:
        after = _logprobs(weights)
        report = {
            "backend": args.backend,
            "world_size": learner.world_size,
            "version": learner.version,
            "train_s": train_s,
            "losses": losses,
            "good_logprob": [before[0], after[0]],
            "bad_logprob": [before[1], after[1]],
            "same_weights_on_all_ranks": len(set(digests)) == 1,
        }
        args.out.write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
