"""The one RL loop (`trainer.loop`) with the local backend: what it publishes and generates."""

import json

from skyrl_sdk.trainer.async_trainer import AsyncTrainer
from skyrl_sdk.trainer.backends.base import PolicyEngine
from skyrl_sdk.trainer.config import build_config
from skyrl_sdk.trainer.loop import TrainingLoop

STEPS, GROUPS, GROUP_SIZE = 3, 2, 4


class RecordingEngine:
    """A real engine whose `update_weights` calls are recorded (versions, in order)."""

    def __init__(self, engine: PolicyEngine):
        self.inner = engine
        self.name = engine.name
        self.published: list[int] = []

    @property
    def policy_version(self) -> int:
        return self.inner.policy_version

    @property
    def renderer(self):
        return self.inner.renderer

    async def generate(self, prompt_token_ids, sampling, *, context=None):
        return await self.inner.generate(prompt_token_ids, sampling, context=context)

    def update_weights(self, weights, version: int) -> None:
        self.published.append(version)
        self.inner.update_weights(weights, version)

    def wait_for_version(self, version: int, timeout: float | None = 30.0) -> bool:
        return self.inner.wait_for_version(version, timeout)

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_synchronous_run_publishes_every_version_and_plays_only_trained_groups(tmp_path):
    cfg = build_config(
        {},
        [
            f"out_dir={tmp_path}",
            "env.id=lookup",
            "model.source=lookup-tiny",
            f"trainer.steps={STEPS}",
            "trainer.max_staleness=0",
            f"trainer.groups_per_step={GROUPS}",
            f"rollout.group_size={GROUP_SIZE}",
            "model.pretrain_steps=10",
            "logging.console=false",
        ],
    )
    trainer = AsyncTrainer(cfg)
    assert isinstance(trainer, TrainingLoop)
    engine = RecordingEngine(trainer.engine)
    trainer.engine = engine
    result = trainer.run()

    assert (result.steps, result.version) == (STEPS, STEPS)
    assert engine.published == list(range(1, STEPS + 1))  # after every step, in order
    assert engine.policy_version == STEPS  # the run ends with the final weights loaded
    assert [m["version"] for m in result.history] == list(range(1, STEPS + 1))
    # No group is admitted past the last batch: every episode played was trained on.
    lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == STEPS * GROUPS * GROUP_SIZE
    groups = {int(json.loads(line)["episode_id"][1:].split("/")[0]) for line in lines}
    assert groups == {g for m in result.history for g in m["groups"]} == set(range(STEPS * GROUPS))
    assert json.loads((tmp_path / "summary.json").read_text()) == {
        "steps": STEPS,
        "version": STEPS,
        "resumed_from": None,
    }


def test_dynamic_sampling_trains_only_groups_with_a_signal(tmp_path):
    cfg = build_config(
        {},
        [
            f"out_dir={tmp_path}",
            "env.id=lookup",
            "model.source=lookup-tiny",
            "trainer.steps=2",
            "trainer.max_staleness=0",
            f"trainer.groups_per_step={GROUPS}",
            f"rollout.group_size={GROUP_SIZE}",
            "model.pretrain_steps=10",
            "algorithm.dynamic_sampling=true",
            "algorithm.max_set_aside=64",
            "logging.console=false",
        ],
    )
    result = AsyncTrainer(cfg).run()
    rewards: dict[int, list[float]] = {}
    for line in (tmp_path / "trajectories.jsonl").read_text().splitlines():
        row = json.loads(line)
        rewards.setdefault(int(row["episode_id"][1:].split("/")[0]), []).append(row["reward"])
    trained = {g for m in result.history for g in m["groups"]}
    assert len(trained) == 2 * GROUPS
    assert all(len(set(rewards[g])) > 1 for g in trained)  # each had a signal
    set_aside = set(rewards) - trained
    assert sum(m["groups/set_aside"] for m in result.history) == len(set_aside)
    assert all(len(set(rewards[g])) == 1 for g in set_aside)
