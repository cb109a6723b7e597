"""A learning test on generated terminal tasks: GRPO raises held-out success (issue 18 item 5).

The tiny `echo-word` model (`terminal_tiny.py` beside this file, test-only: warmed up on
train-split tasks only, by a demonstrator that writes the oracle's command in 30% of replies
and a plausible wrong one otherwise) is trained by the project's trainer on the train split,
and the loop's held-out evaluation plays 128 tasks with held-out seeds before and after, at
temperature 1. What GRPO has to learn is the behaviour that solves the task (write the word
into the named file), and it must carry over to tasks the run never saw.
"""

from __future__ import annotations

import json
import shutil

import pytest

from skyrl_gym.envs.terminal_gen.generate import SPLITS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),  # a first run also builds the model (about 3 minutes, cached)
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap"),
]
pytest.importorskip("tokenizers")

SEED = 0
HELDOUT_EPISODES = 128
STEPS = 20


def _config(out, model_dir):
    from skyrl_sdk.trainer.config import build_config

    return build_config(
        {
            "seed": SEED,
            "out_dir": str(out),
            "model": {"source": "pretrained", "path": str(model_dir)},
            "env": {
                "id": "terminal-gen",
                "kwargs": {
                    "split": "train",
                    "families": ["echo-word"],
                    "per_family": 256,
                    "brief": True,
                },
                "max_turns": 1,  # one reply: the command and the answer
            },
            "rollout": {"group_size": 8, "max_tokens": 32, "temperature": 1.0},
            "algorithm": {"filter_zero_variance": True},
            "optim": {"lr": 3e-4},
            "trainer": {
                "steps": STEPS,
                "groups_per_step": 4,
                "max_staleness": 0,
                "torch_threads": 1,
            },
            "logging": {"console": False},
            "heldout": {
                "env_kwargs": {"split": "heldout", "per_family": HELDOUT_EPISODES},
                "episodes": HELDOUT_EPISODES,
                "temperature": 1.0,
            },
        }
    )


def test_grpo_raises_heldout_success_on_generated_echo_word_tasks(tmp_path):
    from skyrl_sdk.trainer.async_trainer import AsyncTrainer
    from skyrl_sdk.trainer.heldout import TRAJECTORIES_FILE, read_results

    from .terminal_tiny import terminal_tiny_dir

    result = AsyncTrainer(_config(tmp_path, terminal_tiny_dir())).run()
    assert result.steps == STEPS
    evaluations = read_results(tmp_path)
    start, end = evaluations[0], evaluations[-1]
    print(f"held-out success {start.success:.3f} -> {end.success:.3f}")
    assert (start.step, end.step) == (0, STEPS)
    assert start.episodes == end.episodes == HELDOUT_EPISODES
    # The warmed-up model succeeds sometimes (GRPO needs signal), not always...
    assert 0.05 <= start.success <= 0.6
    # ...and training raises success on tasks it never saw by a clear margin: at least 15
    # points, and the 95% intervals do not overlap (each is about +-8 points at N=128).
    assert end.success - start.success >= 0.15
    assert end.ci_low > start.ci_high

    # Held-out episodes are held-out tasks, the same ones before and after, and every
    # reward is the verifier's (0 or 1; success exactly when it is 1).
    held = [json.loads(line) for line in (tmp_path / TRAJECTORIES_FILE).open()]
    assert len(held) == 2 * HELDOUT_EPISODES
    heldout_ids = {f"echo-word-s{s}" for s in SPLITS["heldout"].seeds(HELDOUT_EPISODES)}
    ids = [row["task_id"] for row in held]
    assert ids[:HELDOUT_EPISODES] == ids[HELDOUT_EPISODES:] and set(ids) == heldout_ids
    assert all(r["reward"] in (0.0, 1.0) and r["success"] == (r["reward"] == 1.0) for r in held)
    trained = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").open()]
    assert trained and all(r["reward"] in (0.0, 1.0) for r in trained)
    assert not {r["task_id"] for r in trained} & heldout_ids
