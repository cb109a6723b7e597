"""`skyrl harbor run --agent command:CMD` on a multi-step task: CMD runs once per step in the
step's sandbox with the step's instruction, through the model server's port forwarded into
every step's sandbox (not into any verifier's); per-step rewards and stop rules as for the
oracle; one trajectory per step in trajectories.jsonl, graded with its step's reward."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyrl_sdk.agents.trajectory import read_trajectories
from tests.skyrl_gym.envs.harbor.conftest import needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="forwarded ports (pasta) need root"),
]
pytest.importorskip("skyrl_sdk.agents.serving", reason="agents.serving not built yet")

MULTI = Path(__file__).parent / "real_format" / "multi-step-notes"
HARNESS = Path(__file__).parents[3] / "agents" / "harnesses" / "http_agent.py"
SKYRL = Path(sys.executable).with_name("skyrl")
# The same script plays every step (each step is a session of its own, from turn 0): the
# shell call keeps the instruction it was given and does the step's work.
STEP_WORK = (
    'printf "%s\\n" "$SKYRL_INSTRUCTION" >> /logs/agent/told.txt; '
    "if [ -f /app/notes.txt ]; then echo second >> /app/notes.txt; "
    "else echo first > /app/notes.txt; fi"
)


@pytest.fixture(scope="module")
def harness_dir() -> Iterator[Path]:
    """The http harness in a directory the sandbox's user can read (bound read-only)."""
    d = Path(tempfile.mkdtemp(prefix="skyrl-harnesses-"))
    d.chmod(0o755)
    shutil.copy(HARNESS, d / HARNESS.name)
    (d / HARNESS.name).chmod(0o644)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _run(tmp_path: Path, harness_dir: Path, task: Path, script: list[str]) -> dict:
    (tmp_path / "script.json").write_text(json.dumps(script))
    env = {"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": "/tmp", "HF_HUB_OFFLINE": "1"}
    env.update({k: v for k, v in os.environ.items() if k.startswith("SKYRL_HARBOR_")})
    out = subprocess.run(
        [
            *(str(SKYRL), "harbor", "run", "--path", str(task), "-o", "job"),
            *("--agent", f"command:python3 {harness_dir}/http_agent.py"),
            *("--agent-bind", str(harness_dir), "--policy", "scripted:script.json"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads((tmp_path / "job" / "job.json").read_text())


def _call(command: str) -> str:
    body = json.dumps({"name": "shell", "arguments": {"command": command}})
    return f"<tool_call>\n{body}\n</tool_call>"


def test_command_agent_runs_once_per_step_with_that_steps_instruction(
    harness_dir: Path, tmp_path: Path
) -> None:
    job = _run(tmp_path, harness_dir, MULTI, [_call(STEP_WORK), "Done."])
    (trial,) = job["trials"]
    assert job["agent"] == "command" and trial["reward"] == 1.0, trial
    assert trial["error"] is None, trial
    assert [(s["name"], s["reward"]) for s in trial["steps"]] == [
        ("01-create", 1.0),
        ("02-append", 1.0),
    ]
    # Step 2's CMD was told step 2's instruction, after step 1 (files persist, /logs/agent too).
    told = (tmp_path / "job" / trial["trial_name"] / "agent" / "told.txt").read_text()
    assert told.startswith("Create /app/notes.txt") and "\nAppend the line `second`" in told
    trajectories = read_trajectories(tmp_path / "job" / "trajectories.jsonl")
    assert [(t.episode_id, t.reward) for t in trajectories] == [
        ("multi-step-notes/01-create", 1.0),
        ("multi-step-notes/02-append", 1.0),
    ]
    assert all(len(t.turns) == 2 and t.trainable for t in trajectories)


def test_command_agent_stops_at_the_first_steps_min_reward(
    harness_dir: Path, tmp_path: Path
) -> None:
    job = _run(tmp_path, harness_dir, MULTI, [_call("true"), "Done."])
    (trial,) = job["trials"]
    assert trial["reward"] == 0.0 and trial["error"] is None, trial
    assert [(s["name"], s["reward"]) for s in trial["steps"]] == [("01-create", 0.0)]
    (t,) = read_trajectories(tmp_path / "job" / "trajectories.jsonl")
    assert t.episode_id == "multi-step-notes/01-create" and t.reward == 0.0
