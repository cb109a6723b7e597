"""Ray mode: short async runs with the learner (one actor, or FSDP2 / DeepSpeed ranks), the
engine and the envs as Ray actors; checkpoints resume into fresh ranks; env errors raised in an
env actor end episodes with ENV_ERROR as in one process; no actor process outlives its run.
"""

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray not installed (extra `ray`)")

import skyrl_gym  # noqa: E402
from skyrl_sdk.trainer.config import build_config  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("multiprocess")]

PROBE_ENV = "ray-probe"

TINY_RUN = [
    "trainer.groups_per_step=2",
    "trainer.max_staleness=1",
    "trainer.step_timeout_s=90",
    "rollout.group_size=4",
    "model.source=lookup-tiny",
    "model.pretrain_steps=10",
    "logging.console=false",
]


@pytest.fixture(scope="module")
def local_ray():
    from skyrl_sdk.trainer.backends.ray import init_local_ray

    init_local_ray(num_cpus=2)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def probe_env():
    """`lookup`, plus: every reset logs the process it runs in (`pid_file`); replies with an
    odd number of words earn 0.5 (a learning signal from the first step); with `fail`, the
    first step always continues and the second raises, naming the process."""
    from skyrl_gym.envs.lookup import LookupEnv

    # Defined here, not at module level, so Ray pickles the class by value into the actors.
    class ProbeEnv(LookupEnv):
        def __init__(self, pid_file: str = "", fail: bool = False, **kwargs):
            super().__init__(**kwargs)
            self.pid_file = pid_file
            self.fail = fail
            self.steps = 0

        def start(self, task):
            self.steps = 0
            if self.pid_file:
                with open(self.pid_file, "a") as f:
                    f.write(f"{os.getpid()}\n")
            return super().start(task)

        def step(self, action):
            self.steps += 1
            shaped = 0.5 * (len(action.split()) % 2)
            if self.fail:
                if self.steps > 1:
                    raise RuntimeError(f"probe env failed in process {os.getpid()}")
                info = {"tool_calls": [], "parse_error": None}
                return [{"role": "tool", "content": "value 1"}], shaped, False, False, info
            observation, reward, terminated, truncated, info = super().step(action)
            return observation, reward + shaped, terminated, truncated, info

    skyrl_gym.register(PROBE_ENV, ProbeEnv, max_turns=2)
    yield
    skyrl_gym.deregister(PROBE_ENV)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _assert_gone(pids, timeout: float = 30.0) -> None:
    """Every process in `pids` exits within `timeout` (nothing is left behind)."""
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if _alive(p)], "actor processes left behind"


def _actor_pids(trainer) -> list[int]:
    actors = [*trainer.learner.actors, *trainer.engine.actors]
    pids = ray.get([a.pid.remote() for a in actors])
    if trainer.env_pool is not None:
        pids += [s.pid for s in trainer.env_pool.stats()]
    return pids


def _trajectories(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]


def _digest_of(weights) -> str:
    import hashlib

    h = hashlib.sha1()
    for key in sorted(weights):
        h.update(key.encode())
        h.update(weights[key].detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


def _same(a, b) -> bool:
    import torch

    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if torch.is_tensor(a) and torch.is_tensor(b):
        return a.shape == b.shape and bool(torch.equal(a, b))
    return a == b


def test_short_async_run_completes_with_ray_actors(local_ray, tmp_path):
    from skyrl_sdk.trainer.ray_mode import RayTrainer

    cfg = build_config(
        {},
        [
            f"out_dir={tmp_path}",
            "env.id=lookup",
            "trainer.steps=4",
            "trainer.checkpoint_every=2",
            "logging.trajectories=false",
            "distributed.env_workers=0",  # envs on the driver, as in one process
            *TINY_RUN,
        ],
    )
    trainer = RayTrainer(cfg)
    learner_pid = ray.get(trainer.learner.actor.pid.remote())
    engine_pid = ray.get(trainer.engine.actors[0].pid.remote())
    assert len({learner_pid, engine_pid, os.getpid()}) == 3  # three processes
    result = trainer.run()
    assert result.steps == 4 and result.version == 4
    # Every sync was checked across processes: the engine actor's scores are the learner's.
    assert trainer.sync_check.active and len(trainer.sync_check.gaps) == 4
    assert all(m["sync/logprob_gap_max"] <= trainer.sync_check.max_gap for m in result.history)
    lags = [m["staleness/max"] for m in result.history]
    assert max(lags) <= 1  # the staleness bound holds across processes
    assert (tmp_path / "checkpoints" / "latest").exists()
    assert (tmp_path / "summary.json").exists()
    # Every step's batch came from the actors' generations with fresh groups.
    groups = [g for m in result.history for g in m["groups"]]
    assert len(groups) == len(set(groups)) == 8
    _assert_gone([learner_pid, engine_pid])  # run() stops its actors


def test_fsdp_ranks_train_feed_the_engine_and_resume(local_ray, probe_env, tmp_path):
    """FSDP2 at world size 2 in two learner actors, envs in two env actors; then --resume."""
    from skyrl_sdk.trainer.checkpoint import Checkpointer
    from skyrl_sdk.trainer.ray_mode import RayTrainer

    pid_file = tmp_path / "env_pids.txt"
    data = {"env": {"id": PROBE_ENV, "kwargs": {"pid_file": str(pid_file)}}}
    overrides = [
        f"out_dir={tmp_path}",
        "trainer.checkpoint_every=1",
        "distributed.strategy=fsdp",
        "distributed.world_size=2",
        "distributed.env_workers=2",
        *TINY_RUN,
    ]
    trainer = RayTrainer(build_config(data, [*overrides, "trainer.steps=2"]))
    try:
        rank_pids = trainer.learner.pids()
        env_pids = {s.pid for s in trainer.env_pool.stats()}
        assert len({*rank_pids, os.getpid()}) == 3  # two rank processes besides the driver
        assert len(env_pids) == 2 and os.getpid() not in env_pids
        all_pids = _actor_pids(trainer)
        initial = _digest_of(ray.get(trainer.learner.engine_weights()))
        result = asyncio.run(trainer.train())
        assert result.steps == 2 and [m["version"] for m in result.history] == [1, 2]
        assert any(m["optim/grad_norm"] > 0 for m in result.history)  # the ranks stepped
        # Every episode's env ran in an env actor, none on the driver.
        episode_pids = {int(p) for p in pid_file.read_text().split()}
        assert episode_pids and episode_pids <= env_pids
        # The engine sampled with the ranks' weights: later tokens carry versions >= 1, and
        # rank 0's full weights load (strictly) into the engine model and are what it holds.
        versions = [
            v
            for t in _trajectories(tmp_path)
            for turn in t["turns"]
            for v in turn["policy_versions"]
        ]
        assert max(versions) >= 1
        final = trainer.learner.engine_weights()
        trainer.engine.update_weights(final, trainer.learner.version)  # decoding has stopped

        def engine_digest(actor):
            import hashlib

            h = hashlib.sha1()
            state = actor.engine.model.state_dict()
            for key in sorted(state):
                h.update(key.encode())
                h.update(state[key].detach().float().contiguous().numpy().tobytes())
            return h.hexdigest(), actor.engine.policy_version

        engine = trainer.engine.actors[0]
        assert ray.get(engine.__ray_call__.remote(engine_digest)) == (_digest_of(ray.get(final)), 2)
        assert _digest_of(ray.get(final)) != initial
    finally:
        trainer.close()
    _assert_gone(all_pids)

    # --resume: fresh ranks load the checkpoint (unsharded, single-process layout) exactly.
    saved = Checkpointer(tmp_path).load()
    assert saved is not None and saved.step == 2
    resumed = RayTrainer(build_config(data, [*overrides, "trainer.steps=3"]), resume=True)
    pids = _actor_pids(resumed)
    try:
        assert _same(resumed.learner.state_dict(), saved.learner)
    except BaseException:
        resumed.close()
        raise
    result = resumed.run()
    assert (result.resumed_from, result.steps, result.version) == (2, 3, 3)
    _assert_gone(pids)


def test_deepspeed_ranks_train_while_env_errors_in_an_actor_end_episodes(
    local_ray, probe_env, tmp_path
):
    """DeepSpeed ZeRO-1 at world size 2; every episode's env raises at its second step inside
    its env actor: the episodes end with ENV_ERROR (the env's own exception, as locally) and
    keep their first turn, which trains, so the run completes."""
    from skyrl_sdk.trainer.ray_mode import RayTrainer

    cfg = build_config(
        {"env": {"id": PROBE_ENV, "kwargs": {"fail": True}}},
        [
            f"out_dir={tmp_path}",
            "trainer.steps=2",
            "distributed.strategy=deepspeed",
            "distributed.zero_stage=1",
            "distributed.world_size=2",
            "distributed.env_workers=1",
            *TINY_RUN,
        ],
    )
    trainer = RayTrainer(cfg)
    pids = _actor_pids(trainer)
    env_pid = trainer.env_pool.stats()[0].pid
    assert len(set(trainer.learner.pids())) == 2
    result = trainer.run()
    assert result.steps == 2 and result.version == 2
    assert all(m["stop/env_error"] == 1.0 for m in result.history)
    errors = {t["error"] for t in _trajectories(tmp_path)}
    assert errors == {f"step: RuntimeError: probe env failed in process {env_pid}"}
    assert env_pid != os.getpid()
    _assert_gone(pids)


def test_an_env_that_cannot_be_built_in_its_actor_fails_the_pool_start(local_ray):
    from skyrl_gym.envs.lookup import LookupEnv
    from skyrl_sdk.trainer.ray_envs import EnvPool

    driver = os.getpid()

    def make_env(**kwargs):  # builds on the driver only (a dependency missing on workers)
        if os.getpid() != driver:
            raise ImportError("no such module on this node")
        return LookupEnv(**kwargs)

    skyrl_gym.register("ray-driver-only", make_env)
    try:
        with pytest.raises(RuntimeError, match="ImportError: no such module on this node"):
            EnvPool.start("ray-driver-only", size=1)
    finally:
        skyrl_gym.deregister("ray-driver-only")
