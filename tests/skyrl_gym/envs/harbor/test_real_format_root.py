"""Issue 25, difference 1: a real-format task's Dockerfile layout behaves as in its container.

Each fixture under `tests/skyrl_gym/envs/harbor/real_format/` is a task folder in Harbor's format, run end to
end through the real CLI (`skyrl harbor run -a oracle`) on the bwrap backend:

- `nested-workdir`: `WORKDIR /app`, `COPY x /app/`, `WORKDIR /app/sub`, a RUN that writes in
  the nested directory: the files copied above the last WORKDIR stay, the agent starts in it;
- `copy-outside`: COPY to `/data`, `/build` and `/protected` (outside the working directory)
  and a RUN that writes there: all of it is present for the agent and the verifier.

The nop agent still scores 0 on both (the tests check work the solution does).

Difference 10: `prebuilt-image` names a prebuilt `docker_image` (Terminal-Bench 2's norm) and
has the Dockerfile it was built from: the bwrap backend applies the Dockerfile and says, in a
note naming the image, that the image was not pulled.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import needs_bwrap

pytestmark = needs_bwrap

REPO = Path(__file__).parents[4]
FIXTURES = Path(__file__).parent / "real_format"


def _harbor_run(task: str, out: Path, agent: str = "oracle") -> tuple[dict, dict]:
    """`skyrl harbor run -a AGENT -p FIXTURE`: (the job's summary, its only trial's result)."""
    cli = [sys.executable, "-m", "skyrl_gym", "harbor", "run", "-a", agent]
    done = subprocess.run(
        [*cli, "-p", str(FIXTURES / task), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert (out / "job.json").is_file(), done.stdout + done.stderr
    job = json.loads((out / "job.json").read_text())
    (trial,) = job["trials"]
    return job, json.loads((out / trial["trial_name"] / "result.json").read_text())


@pytest.mark.parametrize("task", ["nested-workdir", "copy-outside"])
def test_oracle_scores_one(task: str, tmp_path: Path) -> None:
    _, result = _harbor_run(task, tmp_path / "out")
    notes = json.dumps(result, indent=1)
    assert result["rewards"] == {"reward": 1.0}, notes
    assert result["error"] is None, notes
    assert not any("outside the writable" in n for n in result["environment_notes"]), notes


@pytest.mark.parametrize("task", ["nested-workdir", "copy-outside"])
def test_nop_scores_zero(task: str, tmp_path: Path) -> None:
    _, result = _harbor_run(task, tmp_path / "out", agent="nop")
    assert result["rewards"] == {"reward": 0.0}, json.dumps(result, indent=1)


def test_docker_image_with_dockerfile_is_noted(tmp_path: Path) -> None:
    _, result = _harbor_run("prebuilt-image", tmp_path / "out")
    notes = result["environment_notes"]
    assert result["rewards"] == {"reward": 1.0}, json.dumps(result, indent=1)
    image = "registry.example.invalid/tb2/prebuilt-image:20250101"
    assert any(image in n and "Dockerfile is applied" in n for n in notes), notes


def test_writable_roots_keep_a_container_layout() -> None:
    from skyrl_gym.envs.harbor.dockerfile import writable_roots

    roots, refused = writable_roots(
        ["/app/sub", "/app", "/app/config", "/data", "/build/x", "/etc", "/root", "/opt/tool"]
    )
    # /app, not /app/sub: what was copied to /app survives the nested WORKDIR.
    assert roots == ("/app", "/build", "/data", "/opt/tool", "/root")
    assert refused == ("/etc",)  # never mounted over the system's /etc
    # An image root that has /app: the directory itself, not its top.
    assert writable_roots(["/app/sub"], {"app"}) == (("/app/sub",), ())


def test_agent_written_root_is_not_the_verifiers_path(tmp_path: Path) -> None:
    """/build is writable by the agent now: a `python3` it plants there (first on the task's
    PATH) is not the one test.sh runs, so the wrong answer scores 0."""
    _, result = _harbor_run("path-shadow", tmp_path / "out")
    assert result["agent_error"] is None, json.dumps(result, indent=1)
    assert result["rewards"] == {"reward": 0.0}, json.dumps(result, indent=1)
