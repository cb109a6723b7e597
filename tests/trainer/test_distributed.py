"""FSDP2 and DeepSpeed learners: a short training of a tiny model at world size 2 (gloo, CPU).

Each test runs `torchrun --standalone --nproc_per_node 2 -m skyrl_sdk.trainer.selfcheck.distributed
--check-state` and checks rank 0's report: the rewarded reply became likelier, the penalised
one less likely, both ranks hold the same full weights afterwards, and checkpoints round-trip
(a fresh learner loads `state_dict()` unchanged and its next step matches; a single-process
`Learner` loads the same state). Also: stats combination and the `distributed` config section.
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
            "skyrl_sdk.trainer.selfcheck.distributed",
            "--backend",
            backend,
            "--out",
            str(out),
            "--check-state",
            *extra,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=360,  # a hang guard only: two ranks on a loaded 2-core box can take minutes
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
    assert report["state_round_trip"]
    assert report["resumed_step_matches"]
    assert report["single_process_loads_state"]


def test_fsdp2_learner_trains_at_world_size_2(tmp_path):
    _check(_train(tmp_path, "fsdp"))


@pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="deepspeed not installed (extra `deepspeed`: DS_BUILD_OPS=0 pip install -e '.[deepspeed]')",
)
def test_deepspeed_zero1_learner_trains_at_world_size_2(tmp_path):
    _check(_train(tmp_path, "deepspeed", "--zero-stage", "1"))


def test_shard_batch_pads_short_ranks_with_zero_advantage():
    from skyrl_sdk.trainer.distributed_learner import shard_batch
    from skyrl_sdk.trainer.selfcheck.distributed import _sample

    samples = [_sample(t) for t in (9, 10, 11)]
    local0, adv0 = shard_batch(samples, [1.0, 2.0, 3.0], 0, 2)
    local1, adv1 = shard_batch(samples, [1.0, 2.0, 3.0], 1, 2)
    assert [s.input_ids[-1] for s in local0] == [9, 11] and adv0 == [1.0, 3.0]
    assert [s.input_ids[-1] for s in local1] == [10, 10] and adv1 == [2.0, 0.0]
    with pytest.raises(ValueError):
        shard_batch(samples, [1.0], 0, 2)


def _stats(**overrides):
    from skyrl_sdk.trainer.learner import LearnerStats

    values = dict(
        loss=1.0,
        policy_loss=1.0,
        kl_ref=0.0,
        kl_sampler=0.1,
        entropy=2.0,
        clip_fraction=0.0,
        tis_clip_fraction=0.0,
        ratio_mean=1.0,
        grad_norm=0.5,
        lr=1e-3,
        tokens=10,
        sequences=2,
        staleness_mean=0.0,
        staleness_max=0,
        duration_s=1.0,
    )
    return LearnerStats(**{**values, **overrides})


def test_combine_stats_means_losses_over_ranks_and_weights_token_averages():
    from skyrl_sdk.trainer.distributed_learner import combine_stats

    a = _stats(loss=1.0, entropy=2.0, tokens=30, staleness_max=1, duration_s=2.0)
    b = _stats(loss=3.0, entropy=4.0, tokens=10, staleness_max=2, duration_s=1.0, grad_norm=9.0)
    out = combine_stats([a, b], tokens=37, sequences=5)
    assert out.loss == 2.0  # the gradient is the ranks' mean
    assert out.entropy == (2.0 * 30 + 4.0 * 10) / 40
    assert out.grad_norm == 0.5  # global: rank 0's
    assert (out.tokens, out.sequences, out.staleness_max, out.duration_s) == (37, 5, 2, 2.0)
    with pytest.raises(ValueError):
        combine_stats([], tokens=0, sequences=0)


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        (["distributed.strategy=fsdp", "model.lora.enabled=true"], "distributed.strategy"),
        (
            [
                "distributed.strategy=deepspeed",
                "backend=tinker",
                "tinker.base_url=http://x",
                "tinker.base_model=m",
            ],
            "distributed.strategy",
        ),
        (["distributed.strategy=megatron"], "distributed.strategy"),
        (["distributed.world_size=0"], "distributed.world_size"),
        (["distributed.zero_stage=3"], "distributed.zero_stage"),
        (["distributed.env_workers=-1"], "distributed.env_workers"),
    ],
)
def test_distributed_config_errors_name_the_field(overrides, names):
    from skyrl_sdk.trainer.config import ConfigError, build_config

    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        build_config({}, overrides)


def test_distributed_config_defaults_and_values():
    from skyrl_sdk.trainer.config import DistributedStrategy, build_config

    cfg = build_config({}, [])
    assert cfg.distributed.strategy is DistributedStrategy.NONE
    cfg = build_config({}, ["distributed.strategy=deepspeed", "distributed.world_size=4"])
    assert cfg.distributed.strategy is DistributedStrategy.DEEPSPEED
    assert cfg.distributed.world_size == 4


def test_cli_rejects_a_distributed_strategy_without_ray(tmp_path):
    from typer.testing import CliRunner

    from skyrl_gym import cli

    out = CliRunner().invoke(
        cli.app,
        ["train", "-", "env.id=lookup", "distributed.strategy=fsdp", f"out_dir={tmp_path}"],
    )
    assert out.exit_code == 2
    assert "distributed.strategy=fsdp needs --ray" in out.output
    assert not (tmp_path / "config.yaml").exists()  # nothing started


def test_distributed_learners_refuse_lora():
    from skyrl_sdk.trainer.config import LoRAConfig
    from skyrl_sdk.trainer.distributed_learner import _check_supported

    with pytest.raises(ValueError, match="LoRA is not supported by the distributed learners"):
        _check_supported(LoRAConfig(enabled=True))
