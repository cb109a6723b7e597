"""Ray mode: the same short async run with the learner and the engine as Ray actors."""

import os

import pytest

ray = pytest.importorskip("ray", reason="ray not installed (extra `ray`)")

from trainer.config import build_config  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("multiprocess")]


@pytest.fixture(scope="module")
def local_ray():
    from trainer.ray_mode import init_local_ray

    init_local_ray(num_cpus=2)
    yield
    ray.shutdown()


def test_short_async_run_completes_with_ray_actors(local_ray, tmp_path):
    from trainer.ray_mode import make_ray_trainer

    cfg = build_config(
        {},
        [
            f"out_dir={tmp_path}",
            "trainer.steps=4",
            "trainer.groups_per_step=2",
            "trainer.max_staleness=1",
            "trainer.checkpoint_every=2",
            "trainer.step_timeout_s=60",
            "rollout.group_size=4",
            "model.pretrain_steps=10",
            "logging.console=false",
            "logging.trajectories=false",
        ],
    )
    trainer = make_ray_trainer(cfg)
    learner_pid = ray.get(trainer.learner.actor.pid.remote())
    engine_pid = ray.get(trainer.engine.actors[0].pid.remote())
    assert len({learner_pid, engine_pid, os.getpid()}) == 3  # three processes
    result = trainer.run()
    assert result.steps == 4 and result.version == 4
    lags = [m["staleness/max"] for m in result.history]
    assert max(lags) <= 1  # the staleness bound holds across processes
    assert (tmp_path / "checkpoints" / "latest").exists()
    assert (tmp_path / "summary.json").exists()
    # Every step's batch came from the actors' generations with fresh groups.
    groups = [g for m in result.history for g in m["groups"]]
    assert len(groups) == len(set(groups)) == 8
