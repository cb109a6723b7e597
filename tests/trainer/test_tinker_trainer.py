"""`skyrl train` with `backend: tinker`: the RL loop through the tinker SDK, against our server.

The end-to-end test starts `skyrl tinker serve` as a real process on 127.0.0.1, trains a few
steps through the CLI, resumes one more step from the tinker:// checkpoint, and checks what a
user would: metrics per step, sampled tokens with logprobs, and weights that changed on the
server. The other tests need no server.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from typer.testing import CliRunner

from skyrl_gym import cli
from skyrl_sdk.agents.policy import PolicyError, SamplingParams
from skyrl_sdk.agents.trajectory import TrainingSample
from skyrl_sdk.trainer.config import AlgorithmConfig, Backend, ConfigError, build_config
from skyrl_sdk.trainer.metrics import read_metrics

MODEL = "skyrl/lookup-tiny"
GROUPS, GROUP_SIZE = 2, 8


def _tinker_args(url: str, run_dir: Path, steps: int) -> list[str]:
    return [
        "train",
        "-",
        "env.id=lookup",
        "backend=tinker",
        f"tinker.base_url={url}",
        f"tinker.base_model={MODEL}",
        "tinker.lora_rank=8",
        f"trainer.steps={steps}",
        f"trainer.groups_per_step={GROUPS}",
        f"rollout.group_size={GROUP_SIZE}",
        # Eight words per turn: a random policy says `lookup` often enough for a reward signal.
        "rollout.max_tokens=8",
        f"out_dir={run_dir}",
        "logging.console=false",
    ]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`skyrl tinker serve` in its own process (one torch thread: the box is shared)."""
    pytest.importorskip("tinker")
    from tests.trainer.tinker.conftest import _free_port

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    state = tmp_path_factory.mktemp("tinker-server")
    env = {**os.environ, "TINKER_TELEMETRY": "0", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "skyrl_gym.cli", "tinker", "serve", "--port", str(port)]
    proc = subprocess.Popen([*cmd, "--state-dir", str(state)], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, "the server exited"
            assert time.monotonic() < deadline, "the server did not come up"
            try:
                if httpx.get(f"{url}/api/v1/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.slow
@pytest.mark.xdist_group("multiprocess")
def test_a_stale_sampling_adapter_fails_the_sync_check(
    server_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine is told of each new version but keeps sampling from the first adapters
    saved for sampling (a stale LoRA adapter after a sync): the first sync whose step
    changed the adapters stops the run, naming the gap."""
    from skyrl_sdk.agents.tinker_policy import TinkerPolicy
    from skyrl_sdk.trainer.sync_check import SyncCheckFailed

    keep_first = TinkerPolicy.use

    def stale_use(self: TinkerPolicy, sampling_client: object, version: int) -> None:
        if self._client is None:
            keep_first(self, sampling_client, version)
        self.version = version  # the version moves on; the adapters do not

    monkeypatch.setattr(TinkerPolicy, "use", stale_use)
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    run_dir = tmp_path / "run"
    out = CliRunner().invoke(cli.app, _tinker_args(server_url, run_dir, steps=3))
    assert isinstance(out.exception, SyncCheckFailed), out.output
    assert "differ by up to" in str(out.exception)


@pytest.mark.slow
@pytest.mark.xdist_group("multiprocess")
def test_skyrl_train_through_our_tinker_server(
    server_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tinker

    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    monkeypatch.delenv("TINKER_API_KEY", raising=False)  # loopback: a placeholder key is used
    run_dir = tmp_path / "run"
    runner = CliRunner()
    out = runner.invoke(cli.app, _tinker_args(server_url, run_dir, steps=3))
    assert out.exit_code == 0, out.output + repr(out.exception)
    assert "trained 3 steps (policy version 3)" in out.output

    # The local trainer's run directory, metrics and data order.
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [sorted(r["groups"]) for r in rows] == [[0, 1], [2, 3], [4, 5]]
    for r in rows:
        for key in ("reward/mean", "loss/total", "advantage/std", "policy/kl_sampler"):
            assert math.isfinite(r[key]), (key, r)
        assert r["staleness/max"] == 0
        # The endpoint's own summed loss is the locally reduced loss: the datums are right.
        assert r["tinker/loss_sum"] == pytest.approx(r["loss/total"], abs=1e-4)
        # Sampler and trainer agree on the sampled tokens (same weights, on-policy).
        assert r["policy/kl_sampler"] < 1e-3
    assert any(r["optim/grad_norm"] > 0 for r in rows), "no step had a learning signal"
    # The sync check ran after every publish: the adapters saved for sampling at each version
    # score the probe as the training client's adapters do.
    assert rows[0]["sync/floor"] <= rows[0]["sync/max_gap"]
    assert all(r["sync/logprob_gap_max"] <= rows[0]["sync/max_gap"] for r in rows)
    paths = [r["tinker/sampler_path"] for r in rows]
    assert [p.rsplit("/", 1)[1] for p in paths] == ["step_000000", "step_000001", "step_000002"]
    assert all(p.startswith("tinker://") and "/sampler_weights/" in p for p in paths)

    # Every sampled token came with the sampler's logprob and the version that sampled it.
    episodes = [json.loads(line) for line in (run_dir / "trajectories.jsonl").open()]
    assert len(episodes) == 3 * GROUPS * GROUP_SIZE
    for ep in episodes:
        version = int(ep["episode_id"][1:].split("/")[0]) // GROUPS
        assert ep["policy"] == f"tinker:{MODEL}" and ep["turns"]
        for turn in ep["turns"]:
            assert turn["logprobs"] is not None
            assert len(turn["logprobs"]) == len(turn["token_ids"]) > 0
            assert all(math.isfinite(x) and x <= 0 for x in turn["logprobs"])
            assert set(turn["policy_versions"]) == {version}

    # The weights changed on the server: the first and the trained sampler score differently.
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["tinker_sampler_path"].endswith("/sampler_weights/step_000003")
    service = tinker.ServiceClient(base_url=server_url, api_key="tml-test")
    probe = tinker.types.ModelInput.from_ints(list(episodes[0]["segments"][0]["prompt_ids"]))
    scores = []
    for path in (paths[0], summary["tinker_sampler_path"]):
        sampler = service.create_sampling_client(model_path=path).result()
        scores.append(sampler.compute_logprobs(probe).result()[1:])
    assert scores[0] != pytest.approx(scores[1], abs=1e-6)

    # The state is saved on the endpoint and recorded in the run directory.
    assert summary["tinker_state_path"].endswith("/weights/step_000003")
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000003"
    logged = json.loads((run_dir / "tinker_checkpoints.jsonl").read_text().splitlines()[-1])
    assert logged == {"step": 3, "state_path": summary["tinker_state_path"]}

    # --resume continues from that state: one more step, on the next groups of the data order.
    out = runner.invoke(cli.app, [*_tinker_args(server_url, run_dir, steps=4), "--resume"])
    assert out.exit_code == 0, out.output + repr(out.exception)
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert sorted(rows[-1]["groups"]) == [6, 7]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed_from"] == 3 and summary["steps"] == 4


# -- no server needed ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        (["backend=tinker"], "tinker.base_url is required"),
        (["backend=tinker", "tinker.base_url=http://h:1"], "tinker.base_model is required"),
        (
            [
                "backend=tinker",
                "tinker.base_url=http://h:1",
                "tinker.base_model=m",
                "trainer.max_staleness=2",
            ],
            "trainer.max_staleness must be 0",
        ),
        (["backend=remote"], "backend"),
        (["tinker.lora_rank=0"], "tinker.lora_rank"),
    ],
)
def test_config_errors_name_the_field(overrides: list[str], names: str) -> None:
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        build_config({}, overrides)


def test_config_defaults_to_the_local_backend() -> None:
    assert build_config({}).backend is Backend.LOCAL
    cfg = build_config({}, ["backend=tinker", "tinker.base_url=http://h:1", "tinker.base_model=m"])
    assert cfg.backend is Backend.TINKER and cfg.tinker.api_key_env == "TINKER_API_KEY"


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("algorithm.kl_coef=0.1", "algorithm.kl_coef"),
        ("algorithm.entropy_coef=0.01", "algorithm.entropy_coef"),
        ("algorithm.mini_batches=2", "algorithm.dual_clip"),
        ("algorithm.loss=dro", "algorithm.loss: Tinker's dro has no loss mask"),
    ],
)
def test_settings_tinker_cannot_honour_are_rejected(override: str, names: str) -> None:
    from skyrl_sdk.trainer.backends.tinker import check_config

    base = ["backend=tinker", "tinker.base_url=http://h:1", "tinker.base_model=m"]
    check_config(build_config({}, base))
    check_config(build_config({}, [*base, "algorithm.mini_batches=2", "algorithm.dual_clip=null"]))
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        check_config(build_config({}, [*base, override, "algorithm.dro_beta=0.1"]))


def test_cli_reports_config_errors_with_exit_code_2() -> None:
    out = CliRunner().invoke(cli.app, ["train", "-", "backend=tinker"])
    assert out.exit_code == 2
    assert "tinker.base_url is required" in out.output


def test_endpoint_problems_fail_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tinker")
    from tests.trainer.tinker.conftest import _free_port

    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    runner = CliRunner()
    dead = f"http://127.0.0.1:{_free_port()}"
    out = runner.invoke(
        cli.app,
        [
            "train",
            "-",
            "env.id=lookup",
            "backend=tinker",
            f"tinker.base_url={dead}",
            "tinker.base_model=m",
        ],
    )
    assert out.exit_code == 2 and "unreachable" in out.output
    remote = [
        "train",
        "-",
        "env.id=lookup",
        "backend=tinker",
        "tinker.base_url=https://tinker.example",
        "tinker.base_model=m",
    ]
    out = runner.invoke(cli.app, remote)
    assert out.exit_code == 2 and "set $TINKER_API_KEY" in out.output


def _sample(mask: list[int]) -> TrainingSample:
    n = len(mask)
    return TrainingSample(tuple(range(n)), tuple(mask), (0.0,) * n, (0,) * n)


@pytest.mark.parametrize(
    ("reduction", "expected"),
    [
        # 5 generated target tokens in all: each weighs 1/5.
        ("token_mean", [[0, 0.2, 0.2, 0], [0.2, 0.2, 0.2]]),
        # Each sequence's tokens share 1/2.
        ("sequence_mean", [[0, 0.25, 0.25, 0], [1 / 6, 1 / 6, 1 / 6]]),
        # Sum / (normalizer 4 x 2 sequences).
        ("constant", [[0, 0.125, 0.125, 0], [0.125, 0.125, 0.125]]),
    ],
)
def test_reduction_becomes_per_token_advantage_weights(
    reduction: str, expected: list[list[float]]
) -> None:
    from skyrl_sdk.trainer.backends.tinker import reduction_weights

    samples = [_sample([0, 0, 1, 1, 0]), _sample([0, 1, 1, 1])]
    algorithm = AlgorithmConfig(reduction=reduction, normalizer=4.0)
    got = reduction_weights(samples, algorithm)
    assert [len(w) for w in got] == [4, 3]  # one weight per target token (ids[1:])
    for row, want in zip(got, expected, strict=True):
        assert row == pytest.approx(want)


def test_sampling_params_map_to_tinker() -> None:
    pytest.importorskip("tinker")
    from skyrl_sdk.agents.tinker_policy import to_tinker_params

    params = to_tinker_params(SamplingParams(max_tokens=5, top_k=0, stop_token_ids=(2, 7), seed=3))
    assert (params.max_tokens, params.top_k, list(params.stop), params.seed) == (5, -1, [2, 7], 3)
    assert to_tinker_params(SamplingParams()).stop is None  # EOS
    with pytest.raises(PolicyError, match="not both"):
        to_tinker_params(SamplingParams(stop=("x",), stop_token_ids=(2,)))


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from skyrl_sdk.agents.tinker_policy import import_tinker

    monkeypatch.setitem(sys.modules, "tinker", None)
    with pytest.raises(ImportError, match=r"skyrl-sdk\[tinker\]"):
        import_tinker()


@pytest.mark.parametrize(
    ("loss", "reduction"),
    [
        ("importance_sampling", "sequence_mean"),
        ("ppo", "token_mean"),
        ("cispo", "token_mean"),
        ("gspo", "constant"),
        ("cross_entropy", "sequence_mean"),
    ],
)
def test_every_tinker_loss_the_trainer_sends_is_its_local_loss(
    loss: str, reduction: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The datums and `loss_fn_config` `TinkerLearner` sends for `algorithm.loss` make the
    endpoint's summed loss the locally reduced one (clip bounds active: sampler logprobs are
    shifted off the endpoint's)."""
    tinker = pytest.importorskip("tinker")
    from skyrl_sdk.trainer import losses
    from skyrl_sdk.trainer.backends.tinker import _reduce_locally, build_datums
    from skyrl_sdk.trainer.tinker.cli import TINY_NAME, default_models
    from skyrl_sdk.trainer.tinker.server import ServerConfig, ServerThread

    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    algorithm = AlgorithmConfig(loss=loss, reduction=reduction, normalizer=4.0, clip_high=0.1)
    config = ServerConfig(models=default_models(), state_dir=tmp_path, api_key="tml-t")
    with ServerThread(config) as server:
        service = tinker.ServiceClient(base_url=server.base_url, api_key="tml-t")
        training = service.create_lora_training_client(TINY_NAME, rank=4, seed=0).result()
        ids = [(5, 6, 7, 8, 9, 10), (11, 12, 13, 14)]
        masks = [(0, 0, 1, 1, 1, 0), (0, 1, 1, 1)]
        probe = [
            TrainingSample(i, m, (0.0,) * len(i), (0,) * len(i))
            for i, m in zip(ids, masks, strict=True)
        ]
        first = training.forward(build_datums(probe, [1.0, 1.0], AlgorithmConfig()), "ppo").result()
        own = [o["logprobs"].tolist() for o in first.loss_fn_outputs]
        # the sampler's logprobs: the endpoint's, shifted by -0.5 .. +0.5 per token
        samples = [
            TrainingSample(
                i,
                m,
                (0.0, *[lp + 0.5 - k / 2 for k, lp in enumerate(row)]),
                (0,) * len(i),
            )
            for i, m, row in zip(ids, masks, own, strict=True)
        ]
        advantages = [1.5, -0.75]
        loss_config = losses.tinker_loss_config(losses.config_for(algorithm, dual_clip=False))
        datums = build_datums(samples, advantages, algorithm)
        out = training.forward(datums, loss, loss_config).result()
    logprobs = [torch.tensor(o["logprobs"].tolist()) for o in out.loss_fn_outputs]
    local = _reduce_locally(samples, advantages, logprobs, algorithm, out.metrics, False, None)
    assert local.endpoint_loss == pytest.approx(local.loss, abs=1e-5)
    assert local.loss != 0.0
    if loss in ("ppo", "cispo", "gspo"):
        assert local.clip > 0  # the clip bounds were active
