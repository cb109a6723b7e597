"""`skyrl compare RUN_A RUN_B` on real runs: `skyrl eval` runs of one scripted policy with
seeded mistakes under two sampling seeds (no detectable difference), a copy of a run with 30%
of its tasks flipped to success (B better), Harbor jobs (nop against oracle), and the one-line
errors for runs of two kinds or without a common task. The command is loaded the way the
`skyrl` frame loads every command."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

import skyrl_sdk.benchmarks.compare as compare_module
from skyrl_gym.cli import CommandEntry, load_command
from skyrl_gym.envs.harbor.env import BUNDLED_TASKS
from tests.conftest import needs_bwrap

SKYRL = Path(sys.executable).with_name("skyrl")
TASKS = 20
COMPARE = load_command(CommandEntry("compare", "skyrl_sdk.benchmarks.compare:compare_command"))

ENV_MODULE = textwrap.dedent(
    f'''
    from skyrl_gym import TextEnv

    TASKS = [{{"task_id": f"t{{i}}", "answer": str(i)}} for i in range({TASKS})]


    class Say(TextEnv):
        """Say the task's answer: reward 1 when right, 0 when wrong; one turn."""

        tasks = TASKS

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.task = (options or {{}}).get("task") or TASKS[0]
            return [{{"role": "user", "content": "Say " + self.task["answer"]}}], {{}}

        def step(self, action):
            return [], float(action.strip() == self.task["answer"]), True, False, {{}}
    '''
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two `skyrl eval` runs of one policy, sampling seeds 1 and 2."""
    root = tmp_path_factory.mktemp("compare")
    (root / "say_env.py").write_text(ENV_MODULE)
    script = {
        "actions": {f"t{i}": [str(i)] for i in range(TASKS)},
        "mistakes": {"rate": 0.5, "action": "no idea"},
    }
    (root / "policy.json").write_text(json.dumps(script))
    for seed in (1, 2):
        done = subprocess.run(
            [
                *(str(SKYRL), "eval", "say_env:Say", "-p", "scripted:policy.json"),
                *("--seed", str(seed), "-o", f"seed{seed}"),
            ],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
            env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": "/tmp"},
        )
        assert done.returncode == 0, done.stdout + done.stderr
    return root


def compare(a: Path, b: Path) -> tuple[int, str, dict | None]:
    result = CliRunner().invoke(COMPARE, [str(a), str(b)])
    last = result.output.strip().splitlines()[-1]
    payload = json.loads(last) if last.startswith("{") else None
    return result.exit_code, result.output, payload


def outcomes(run: Path) -> dict[str, bool]:
    data = json.loads((run / "results.json").read_text())
    return {e["task_id"]: e["success"] for e in data["episodes"]}


def test_two_sampling_seeds_of_one_policy_show_no_difference(runs: Path) -> None:
    a, b = outcomes(runs / "seed1"), outcomes(runs / "seed2")
    differ = [t for t in a if a[t] != b[t]]
    assert len(differ) >= 3  # the runs do disagree, task by task
    code, output, payload = compare(runs / "seed1", runs / "seed2")
    assert code == 0, output
    assert payload is not None and payload["verdict"] == "no_difference"
    assert payload["flipped"] == len(differ)
    assert payload["improved"] == sum(b[t] and not a[t] for t in a)
    assert payload["regressed"] == sum(a[t] and not b[t] for t in a)
    assert payload["difference"] == pytest.approx((sum(b.values()) - sum(a.values())) / TASKS)
    assert payload["tasks"] == TASKS and payload["pairs"] == TASKS
    low, high = payload["ci95"]
    assert low <= 0 <= high
    text = " ".join(output.split())
    assert f"no detectable difference with {TASKS} tasks; about " in text
    assert f"tasks would be needed to detect {abs(payload['difference']) * 100:.1f} points" in text
    assert "at 80% power" in text and "McNemar" in text


def test_a_copy_with_30_percent_of_tasks_flipped_to_success_is_better(
    runs: Path, tmp_path: Path
) -> None:
    data = json.loads((runs / "seed1" / "results.json").read_text())
    failed = [e for e in data["episodes"] if not e["success"]]
    assert len(failed) >= 6
    for e in failed[: TASKS * 3 // 10]:
        e["success"] = True
    (tmp_path / "better").mkdir()
    (tmp_path / "better" / "results.json").write_text(json.dumps(data))
    code, output, payload = compare(runs / "seed1", tmp_path / "better")
    assert code == 0, output
    assert payload is not None and payload["verdict"] == "b_better"
    assert payload["difference"] == pytest.approx(0.3)
    assert (payload["improved"], payload["regressed"]) == (6, 0)
    assert "verdict: B is better than A at 95%" in output
    assert "+30.0 points" in output
    # And the other way round.
    code, output, payload = compare(tmp_path / "better", runs / "seed1")
    assert payload is not None and payload["verdict"] == "a_better"


@needs_bwrap
def test_harbor_jobs_pair_on_task_and_trial(tmp_path: Path) -> None:
    task = BUNDLED_TASKS / "find-file"
    for agent in ("nop", "oracle"):
        done = subprocess.run(
            [
                *(str(SKYRL), "harbor", "run", "-p", str(task), "-a", agent),
                *("-k", "3", "-o", str(tmp_path / agent)),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    code, output, payload = compare(tmp_path / "nop", tmp_path / "oracle" / "job.json")
    assert code == 0, output
    assert payload is not None
    assert (payload["tasks"], payload["pairs"]) == (1, 3)
    assert payload["difference"] == 1.0 and payload["flipped"] == 1
    assert payload["a"]["kind"] == payload["b"]["kind"] == "harbor"


def test_runs_of_two_kinds_or_without_a_common_task_are_one_line_errors(
    runs: Path, tmp_path: Path
) -> None:
    job = {"agent": "oracle", "backend": "bwrap", "trials": [{"task": "t0", "reward": 1.0}]}
    (tmp_path / "job.json").write_text(json.dumps(job))
    code, output, payload = compare(runs / "seed1", tmp_path / "job.json")
    assert code == 2 and payload is None
    assert len(output.strip().splitlines()) == 1
    assert "cannot compare runs of two kinds: A is an eval run" in output
    assert "B is a harbor run" in output

    data = json.loads((runs / "seed1" / "results.json").read_text())
    for e in data["episodes"]:
        e["task_id"] = "other-" + e["task_id"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "results.json").write_text(json.dumps(data))
    code, output, payload = compare(runs / "seed1", tmp_path / "other")
    assert code == 2 and len(output.strip().splitlines()) == 1
    assert "have no task (and trial) in common" in output

    code, output, _ = compare(runs / "seed1", tmp_path / "missing")
    assert code == 2 and "no such file or folder" in output


def eval_run(folder: Path, successes: list[bool]) -> Path:
    """A `skyrl eval` results.json in `folder` with one episode per success."""
    folder.mkdir()
    episodes = [{"task_id": f"t{i}", "success": ok} for i, ok in enumerate(successes)]
    (folder / "results.json").write_text(json.dumps({"episodes": episodes, "summary": {}}))
    return folder


def test_a_run_file_over_the_size_cap_is_refused_unread_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = eval_run(tmp_path / "a", [True, True, True])
    b = eval_run(tmp_path / "b", [True, False, True])  # the bigger file ("false")
    size = (b / "results.json").stat().st_size
    assert (a / "results.json").stat().st_size < size
    # At the cap a run is read; one byte over, refused with the file, its size and the cap.
    monkeypatch.setattr(compare_module, "MAX_RUN_FILE_BYTES", size)
    code, output, payload = compare(a, b)
    assert code == 0 and payload is not None and payload["regressed"] == 1, output
    monkeypatch.setattr(compare_module, "MAX_RUN_FILE_BYTES", size - 1)
    before = (b / "results.json").read_bytes()
    code, output, payload = compare(a, b)
    assert code == 2 and payload is None
    assert len(output.strip().splitlines()) == 1, output
    assert str(b / "results.json") in output
    assert f"{size:,} bytes, over the {size - 1:,} bytes a run file may hold" in output
    assert (b / "results.json").read_bytes() == before
    # The real cap, 256 MiB, on a sparse file one byte over it: refused by its size, unread.
    monkeypatch.undo()
    assert compare_module.MAX_RUN_FILE_BYTES == 256 << 20
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate((256 << 20) + 1)
    code, output, payload = compare(a, big)
    assert code == 2 and len(output.strip().splitlines()) == 1, output
    assert f"{big}: 268,435,457 bytes, over the 256 MiB a run file may hold" in output


def test_a_malformed_run_file_is_one_line_naming_the_file_and_line(tmp_path: Path) -> None:
    a = eval_run(tmp_path / "a", [True, False])
    (tmp_path / "b").mkdir()
    broken = tmp_path / "b" / "results.json"
    broken.write_text('{\n  "episodes": [\n    {"task_id": "t0", "success": tru}\n  ]\n}\n')
    code, output, payload = compare(a, tmp_path / "b")
    assert code == 2 and payload is None
    assert len(output.strip().splitlines()) == 1, output
    assert f"{broken}: not a JSON run file (JSONDecodeError: " in output
    assert "line 3 column" in output
    # JSON lines (an episodes log, say) are not a run file: the second line is named.
    lines = tmp_path / "episodes.json"
    lines.write_text('{"task_id": "t0", "success": true}\n{"task_id": "t1", "success": false}\n')
    code, output, _ = compare(a, lines)
    assert code == 2 and len(output.strip().splitlines()) == 1, output
    assert f"{lines}: not a JSON run file" in output and "line 2 column 1" in output
    # Bytes that are not UTF-8: one line too.
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "results.json").write_bytes(b'{"episodes": "\xff"}')
    code, output, _ = compare(a, tmp_path / "c")
    assert code == 2 and len(output.strip().splitlines()) == 1, output
    assert "not a JSON run file (UnicodeDecodeError: " in output
