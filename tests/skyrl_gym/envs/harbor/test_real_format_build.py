"""Issue 25: real Terminal-Bench 2 task folders, built on the bwrap backend as in their images.

Each fixture under `tests/skyrl_gym/envs/harbor/real_format/` reproduces one way a real task's Dockerfile
behaved differently on our copy-on-write root than in the image it was written for, run end to
end through the real CLI (`skyrl harbor run`), oracle 1 and nop 0:

- `pip-install-build`: a plain `RUN pip install ...` (no `--break-system-packages`), fine in a
  `python:3.x` image, whose pip has no EXTERNALLY-MANAGED marker, and refused by a Debian
  host's pip (PEP 668). Build sandboxes set `PIP_BREAK_SYSTEM_PACKAGES=1` unless the
  Dockerfile's ENV says otherwise: what pip installs lands in the task's built layer, never the
  host's, so the marker protects nothing there.
- `verifier-pip-install`: test.sh pip-installs its own tools into the system's Python (as
  Terminal-Bench 2's `pip install pytest ... --break-system-packages` does, root in the
  container), then runs the installed command and imports the package. The verifier's uid 0
  is not the host's root, so the interpreters' install directories (`/usr/local/bin`,
  `/usr/local/lib/python3.X/{dist,site}-packages`) are the verifier's in the built layer: its
  writes land in the trial's own upper layer; the agent (another uid) still cannot write there.
- `var-log-build`: a RUN that writes `/var/log/setup.log` and `/var/lib/...` with a shell
  redirect: every Debian or Ubuntu image has those directories; the host's minimal system's
  skeleton has them too (root's 0755, as in the image).
- `python-alias`: `FROM python:3.x`, and test.sh runs `python` (Terminal-Bench 2's
  `python -m pytest`): the image has `python` beside `python3`; the host's Debian python3 has
  not. On the host's minimal system, a `python:*` base gets `/usr/local/bin/python` (and
  `pip`, where missing) pointing at the root's python3, with a note naming its version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_sdk.sandboxes import cow_root
from tests.conftest import needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(cow_root.supported() is not None, reason="no copy-on-write roots here"),
]

REPO = Path(__file__).parents[4]
FIXTURES = Path(__file__).parent / "real_format"


def _harbor_run(task: Path, out: Path, agent: str, cache: Path) -> dict:
    """`skyrl harbor run -a AGENT -p TASK` with its own root cache: its only trial's result."""
    cli = [sys.executable, "-m", "skyrl_gym", "harbor", "run", "-a", agent]
    done = subprocess.run(
        [*cli, "-p", str(task), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**_environ(), "SKYRL_CACHE": str(cache)},
    )
    assert (out / "job.json").is_file(), done.stdout + done.stderr
    (trial,) = json.loads((out / "job.json").read_text())["trials"]
    return json.loads((out / trial["trial_name"] / "result.json").read_text())


def _environ() -> dict[str, str]:
    # The host's own pip settings must not be what makes the build pass.
    return {k: v for k, v in os.environ.items() if k != "PIP_BREAK_SYSTEM_PACKAGES"}


@pytest.mark.parametrize(("agent", "reward"), [("oracle", 1.0), ("nop", 0.0)])
def test_plain_pip_install_at_build(agent: str, reward: float, tmp_path: Path) -> None:
    result = _harbor_run(FIXTURES / "pip-install-build", tmp_path / "out", agent, tmp_path / "c")
    notes = json.dumps(result, indent=1)
    assert not any("failed at build" in n for n in result["environment_notes"]), notes
    assert result["rewards"] == {"reward": reward}, notes


def test_the_dockerfile_env_wins_over_the_default(tmp_path: Path) -> None:
    """A Dockerfile that sets PIP_BREAK_SYSTEM_PACKAGES=0 gets pip's refusal, as it asked."""
    task = tmp_path / "tasks" / "pip-env-wins"
    task.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-r", str(FIXTURES / "pip-install-build"), str(task)], check=True)
    dockerfile = task / "environment" / "Dockerfile"
    text = dockerfile.read_text().replace(
        "WORKDIR /app\n", "WORKDIR /app\nENV PIP_BREAK_SYSTEM_PACKAGES=0\n"
    )
    dockerfile.write_text(text)
    result = _harbor_run(task, tmp_path / "out", "oracle", tmp_path / "c")
    notes = json.dumps(result, indent=1)
    assert any(
        "pip install" in n and "failed at build" in n for n in result["environment_notes"]
    ), notes
    assert result["rewards"] == {"reward": 0.0}, notes


@pytest.mark.parametrize(("agent", "reward"), [("oracle", 1.0), ("nop", 0.0)])
def test_verifier_pip_installs_into_the_system(agent: str, reward: float, tmp_path: Path) -> None:
    result = _harbor_run(FIXTURES / "verifier-pip-install", tmp_path / "out", agent, tmp_path / "c")
    trial = tmp_path / "out" / result["trial_name"]
    log = (trial / "verifier" / "test-stdout.txt").read_text()
    assert "Successfully installed answercheck" in log, log
    assert result["rewards"] == {"reward": reward}, json.dumps(result, indent=1) + log


def test_the_agent_cannot_plant_in_the_verifiers_install_dirs(tmp_path: Path) -> None:
    """The directories handed to the verifier stay closed to the agent: a checker planted in
    `/usr/local/bin` or a `.pth` start-up hook in site-packages (which test.sh's own Python
    would run) never gets there, and the host's directories are untouched."""
    from tests.skyrl_gym.envs.harbor.conftest import make_task

    dirs = "/usr/local/bin /usr/local/lib/python3*/*-packages"
    make_task(
        tmp_path / "tasks",
        "plant",
        solve_sh=(
            f"for d in {dirs}; do\n"
            "  printf '#!/bin/sh\\nexit 0\\n' > $d/answer-check-planted 2>/dev/null\n"
            "  chmod +x $d/answer-check-planted 2>/dev/null\n"
            "  echo 'import os; os.system(\"echo 1 > /logs/verifier/reward.txt\")' "
            "> $d/zz-planted.pth 2>/dev/null\n"
            "done; true"
        ),
        test_sh=(
            "echo 0 > /logs/verifier/reward.txt\n"
            f"ls {dirs} | grep -q planted && echo 1 > /logs/verifier/reward.txt\n"
            "python3 -c pass"
        ),
    )
    host_before = {p: os.stat(p) for p in ("/usr/local/bin", "/usr/local/lib")}
    result = _harbor_run(tmp_path / "tasks" / "plant", tmp_path / "out", "oracle", tmp_path / "c")
    assert result["rewards"] == {"reward": 0.0}, json.dumps(result, indent=1)
    for path, info in host_before.items():
        after = os.stat(path)
        assert (after.st_uid, after.st_mode) == (info.st_uid, info.st_mode), path
    assert not list(Path("/usr/local").glob("**/*planted*"))


@pytest.mark.parametrize(("agent", "reward"), [("oracle", 1.0), ("nop", 0.0)])
def test_build_writes_var_log(agent: str, reward: float, tmp_path: Path) -> None:
    result = _harbor_run(FIXTURES / "var-log-build", tmp_path / "out", agent, tmp_path / "c")
    notes = json.dumps(result, indent=1)
    assert not any("failed at build" in n for n in result["environment_notes"]), notes
    assert result["rewards"] == {"reward": reward}, notes


@pytest.mark.parametrize(("agent", "reward"), [("oracle", 1.0), ("nop", 0.0)])
def test_python_image_has_python(agent: str, reward: float, tmp_path: Path) -> None:
    result = _harbor_run(FIXTURES / "python-alias", tmp_path / "out", agent, tmp_path / "c")
    notes = json.dumps(result, indent=1)
    assert result["error"] is None, notes
    assert result["rewards"] == {"reward": reward}, notes
