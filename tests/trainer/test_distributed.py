"""FSDP2 and DeepSpeed learners: a short training of a tiny model at world size 2 (gloo, CPU).

Each test runs `torchrun --standalone --nproc_per_node 2 -m trainer.distributed_smoke` and
checks rank 0's report: the rewarded reply became likelier, the penalised one less likely,
and both ranks hold the same full weights afterwards.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("multiprocess")]


def _train(tmp_path: Path, backend: str, *extra: str) -> dict:
    out = tmp_path / f"{backend}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_BUILD_OPS": "0"}
    proc = subprocess.run(
        [
            *TORCHRUN,
            "-m",
            "trainer.distributed_smoke",
            "--backend",
            backend,
            "--out",
            str(out),
            *extra,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def _check(report: dict) -> None:
    assert report["world_size"] == 2 and report["version"] == 8
    good, bad = report["good_logprob"], report["bad_logprob"]
    assert good[1] > good[0] + 1.0, good
    assert bad[1] < bad[0], bad
    assert report["same_weights_on_all_ranks"]
    assert report["losses"][-1] < report["losses"][0]


def test_fsdp2_learner_trains_at_world_size_2(tmp_path):
    _check(_train(tmp_path, "fsdp"))


@pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="deepspeed not installed (extra `deepspeed`: DS_BUILD_OPS=0 pip install -e '.[deepspeed]')",
)
def test_deepspeed_zero1_learner_trains_at_world_size_2(tmp_path):
    _check(_train(tmp_path, "deepspeed", "--zero-stage", "1"))


def test_shard_batch_pads_short_ranks_with_zero_advantage():
    from trainer.distributed_learner import shard_batch
    from trainer.distributed_smoke import _sample

    samples = [_sample(t) for t in (9, 10, 11)]
    local0, adv0 = shard_batch(samples, [1.0, 2.0, 3.0], 0, 2)
    local1, adv1 = shard_batch(samples, [1.0, 2.0, 3.0], 1, 2)
    assert [s.input_ids[-1] for s in local0] == [9, 11] and adv0 == [1.0, 3.0]
    assert [s.input_ids[-1] for s in local1] == [10, 10] and adv1 == [2.0, 0.0]
    with pytest.raises(ValueError):
        shard_batch(samples, [1.0], 0, 2)
