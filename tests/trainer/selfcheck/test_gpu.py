"""`python -m skyrl_sdk.trainer.selfcheck.gpu` (what `make test-gpu` runs), on the CPU.

Each test runs the script as a real subprocess and reads its report: the table on stdout and
the JSON line that ends it. On a machine with CUDA, `make test-gpu` runs the same path there.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

CHECK = [sys.executable, "-m", "skyrl_sdk.trainer.selfcheck.gpu"]
RAN = (
    "device",
    "process group",
    "tiny model",
    "LocalEngine",
    "FSDP2 learner",
    "async training (5 steps)",
    "weight sync",
    "logprobs agree",
)
NOT_RUN = ("vLLM engine", "Ray actors", "multi-rank NCCL")

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("multiprocess")]


def _check(tmp_path: Path, *args: str) -> tuple[int, str, dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [*CHECK, *args], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr[-3000:]
    return proc.returncode, proc.stdout, json.loads(lines[-1])


def _rows(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def test_cpu_run_passes_every_check(tmp_path):
    work = tmp_path / "work"
    code, out, report = _check(tmp_path, "--device", "cpu", "--work-dir", str(work))
    rows = _rows(report)
    assert code == 0, out
    assert report["ok"] is True
    assert report["device"] == "cpu" and report["backend"] == "gloo"
    for name in RAN:
        assert rows[name]["status"] == "pass", rows[name]
        assert name in out  # the table names every check
    for name in NOT_RUN:
        assert rows[name]["status"] == "not run"
        assert rows[name]["detail"]  # with its reason
    assert rows["time budget"]["status"] == "pass"
    assert "versions 1..5" in rows["async training (5 steps)"]["detail"]
    assert "bound 1" in rows["async training (5 steps)"]["detail"]
    # The tiny model was built in the run's own cache (nothing downloaded or reused).
    assert any((work / "cache").iterdir())
    assert (work / "run" / "summary.json").exists()
    assert json.loads((work / "run" / "summary.json").read_text())["version"] == 5


def test_failed_checks_exit_nonzero(tmp_path):
    # A zero tolerance cannot hold (float rounding) and no run fits in 0 s.
    code, out, report = _check(tmp_path, "--device", "cpu", "--tolerance", "0", "--budget-s", "0")
    rows = _rows(report)
    assert code == 1, out
    assert report["ok"] is False
    assert rows["logprobs agree"]["status"] == "fail"
    assert "max |sampler - learner|" in rows["logprobs agree"]["detail"]
    assert rows["time budget"]["status"] == "fail"
    assert rows["async training (5 steps)"]["status"] == "pass"  # failures stay in their row


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_missing_cuda_fails_clearly(tmp_path):
    code, out, report = _check(tmp_path, "--device", "cuda")
    assert code == 2, out
    assert [c["name"] for c in report["checks"]] == ["device"]  # nothing else is attempted
    assert report["checks"][0]["status"] == "fail"
    assert "CUDA is not available" in report["checks"][0]["detail"]
    assert "--device cpu" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_allow_cpu_falls_back_without_cuda(tmp_path):
    code, out, report = _check(tmp_path, "--allow-cpu", "--steps", "2", "--max-staleness", "0")
    rows = _rows(report)
    assert code == 0, out
    assert "running on the CPU (--allow-cpu)" in rows["device"]["detail"]
    detail = rows["async training (2 steps)"]["detail"]
    assert "versions 1..2" in detail and "staleness max per step [0, 0]" in detail
