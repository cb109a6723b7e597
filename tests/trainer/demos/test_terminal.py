"""`skyrl demo --task terminal`: the demo's env and its report machinery, with a tiny model.

The real demo (SmolLM2, ~25 minutes) is not run here; `run_terminal_demo` with a tiny model
and a few episodes runs the same code path: the async trainer, the loop's held-out
evaluations in real bwrap sandboxes, the report, `results.json` and the viewer.
"""

from __future__ import annotations

import json
import shutil

import pytest

import skyrl_gym
from skyrl_gym.envs.terminal_gen.families import make_spec
from skyrl_sdk.trainer.demos.terminal import ENV_ID, WORKED_EXAMPLES, run_terminal_demo

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")


def _play(env, reply: str) -> float:
    env.reset()
    _, reward, terminated, _, _ = env.step(reply)
    assert terminated
    return reward


def test_episodes_open_with_the_worked_examples_and_only_the_verifier_rewards():
    env = skyrl_gym.make(ENV_ID, split="heldout", families=["echo-word"], per_family=1)
    try:
        messages, _ = env.reset()
        assert messages[1:5] == WORKED_EXAMPLES
        assert messages[-1]["role"] == "user" and "Write the word" in messages[-1]["content"]
        task = env.unwrapped.task
        solution = make_spec(task["family"], task["seed"]).solution.strip()
        assert _play(env, f"<bash>{solution}</bash><answer>done</answer>") == 1.0
        # Copying the worked example's command solves nothing: the examples show no task.
        copied = WORKED_EXAMPLES[-1]["content"]
        assert _play(env, copied) == 0.0
    finally:
        env.close()


def test_run_writes_report_results_and_viewer_with_heldout_curve(tmp_path):
    out = tmp_path / "demo"
    summary = run_terminal_demo(
        steps=2,
        out_dir=out,
        seed=0,
        overrides={
            "model": {
                "source": "tiny",
                "lora": {"enabled": True, "target_modules": ["q_proj", "v_proj"]},
            },
            "env": {"kwargs": {"families": ["echo-word", "make-dirs"], "per_family": 2}},
            "rollout": {"group_size": 2, "max_tokens": 6},
            "trainer": {"groups_per_step": 1, "max_staleness": 0},
            "heldout": {"env_kwargs": {"per_family": 2}, "episodes": 4, "every_steps": 1},
        },
    )
    results = json.loads((out / "results.json").read_text())
    assert results == json.loads(json.dumps(summary))
    for key in ("heldout_success_start", "heldout_success_end"):
        assert 0.0 <= results[key] <= 1.0
    assert results["heldout_episodes"] == 4
    assert [p["step"] for p in results["heldout_curve"]] == [0, 1, 2]
    assert set(results["heldout_families_end"]) == {"echo-word", "make-dirs"}
    assert len(results["rewards"]) == 2
    report = (out / "report.md").read_text()
    assert "Held-out success" in report
    assert (
        "| step | policy version | episodes | success | 95% interval | echo-word | make-dirs |"
        in (report)
    )
    assert report.count("\n| 0 | ") + report.count("\n| 1 | ") + report.count("\n| 2 | ") >= 3
    assert "(trajectories.html)" in report and "(heldout_curve.svg)" in report
    assert (out / "heldout_curve.svg").read_text().startswith("<svg")
    html = (out / "trajectories.html").read_text()
    assert "heldout/" in html  # held-out episodes are in the viewer too
    # Every held-out episode's reward is its verifier's: 0 or 1, success iff reward 1.
    rows = [json.loads(line) for line in (out / "heldout_trajectories.jsonl").open()]
    assert len(rows) == 3 * 4
    assert all(r["reward"] in (0.0, 1.0) and r["success"] == (r["reward"] == 1.0) for r in rows)
