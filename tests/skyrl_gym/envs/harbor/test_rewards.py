"""Reward files come from the verifier alone (issue 23, item 2).

The runtime starts test.sh with no reward file in /logs/verifier; afterwards reward.json's
reward must equal reward.txt's number when both exist (`reward_files_disagree`), and in a
two-uid grading sandbox a reward file counts only if the verifier's uid owns it in a
directory the agent's uid cannot write (`reward_file_foreign`). Without a second uid the
trial says so (`single_uid` note). The rules are tested on `read_rewards` directly and end
to end through `HarborRuntime` with test.sh scripts that break them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from skyrl_gym.envs.harbor.runtime import (
    SINGLE_UID_NOTE,
    HarborRuntime,
    RewardFileError,
    VerifierError,
    VerifierResult,
    read_rewards,
)
from skyrl_gym.envs.harbor.task import load_task
from skyrl_sdk.sandboxes import (
    AGENT_UID,
    VERIFIER_HOST_UID,
    GradingIsolation,
    SandboxSpec,
    create_sandbox,
)
from tests.skyrl_gym.envs.harbor.conftest import arun, make_task, needs_bwrap

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")


def _write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _kind(folder: Path, **options) -> VerifierError:
    with pytest.raises(RewardFileError) as caught:
        read_rewards(folder, **options)
    return caught.value.kind


# ---- read_rewards -----------------------------------------------------------------------------


def test_reward_json_and_reward_txt_must_agree(tmp_path):
    agree = _write(
        tmp_path / "agree", {"reward.json": '{"reward": 1, "m": 0.5}', "reward.txt": "1"}
    )
    assert read_rewards(agree) == {"reward": 1.0, "m": 0.5}  # reward.json's metrics kept
    differ = _write(tmp_path / "differ", {"reward.json": '{"reward": 1.0}', "reward.txt": "0\n"})
    assert _kind(differ) is VerifierError.REWARD_FILES_DISAGREE
    # Without a `reward` key, reward.json's reward is its only value (or the mean).
    unnamed = _write(tmp_path / "unnamed", {"reward.json": '{"score": 1}', "reward.txt": "0"})
    assert _kind(unnamed) is VerifierError.REWARD_FILES_DISAGREE
    # The same verdict printed with fewer digits agrees.
    digits = _write(
        tmp_path / "digits", {"reward.json": '{"reward": 0.3333333333}', "reward.txt": "0.333333"}
    )
    assert read_rewards(digits) == {"reward": 0.3333333333}


def test_either_file_alone_is_harbors_reward(tmp_path):
    json_only = _write(tmp_path / "j", {"reward.json": '{"reward": 0.25, "k": 2}'})
    assert read_rewards(json_only) == {"reward": 0.25, "k": 2.0}
    txt_only = _write(tmp_path / "t", {"reward.txt": "0.5\n"})
    assert read_rewards(txt_only) == {"reward": 0.5}
    assert _kind(_write(tmp_path / "none", {})) is VerifierError.REWARD_FILE_NOT_FOUND
    bad_txt = _write(tmp_path / "b", {"reward.json": '{"reward": 1}', "reward.txt": "yes"})
    assert _kind(bad_txt) is VerifierError.REWARD_PARSE_ERROR


@AS_ROOT
def test_a_reward_file_counts_only_from_the_verifiers_uid_in_its_own_directory(tmp_path):
    def folder(name: str, *, dir_uid: int, file_uid: int, mode: int = 0o755) -> Path:
        path = _write(tmp_path / name, {"reward.txt": "1"})
        os.chown(path, dir_uid, dir_uid)
        os.chown(path / "reward.txt", file_uid, file_uid)
        path.chmod(mode)
        return path

    v = VERIFIER_HOST_UID
    ok = folder("ok", dir_uid=v, file_uid=v)
    assert read_rewards(ok, verifier_uid=v) == {"reward": 1.0}
    cases = {
        "agent-file": folder("agent-file", dir_uid=v, file_uid=AGENT_UID),
        "agent-dir": folder("agent-dir", dir_uid=AGENT_UID, file_uid=v),
        "open-dir": folder("open-dir", dir_uid=v, file_uid=v, mode=0o777),
        "group-dir": folder("group-dir", dir_uid=v, file_uid=v, mode=0o775),
    }
    for name, path in cases.items():
        assert _kind(path, verifier_uid=v) is VerifierError.REWARD_FILE_FOREIGN, name
        assert read_rewards(path) == {"reward": 1.0}, name  # without the rule: counted


# ---- end to end ------------------------------------------------------------------------------


def _grade(task_dir: Path, agent: str = "bash /solution/solve.sh") -> tuple[VerifierResult, list]:
    async def go() -> tuple[VerifierResult, list]:
        runtime = HarborRuntime(load_task(task_dir))
        try:
            sandbox = await runtime.start(with_solution=True)
            await sandbox.exec([runtime.shell, "-c", agent], timeout=60)
            return await runtime.verify(), list(runtime.notes)
        finally:
            await runtime.close()

    return arun(go(), 120)


@needs_bwrap
def test_a_test_sh_whose_two_reward_files_disagree_is_void(tmp_path):
    task = make_task(
        tmp_path,
        "disagree",
        test_sh="echo 0 > /logs/verifier/reward.txt\necho '{\"reward\": 1.0}' > /logs/verifier/reward.json",
    )
    result, _ = _grade(task)
    assert result.reward is None and result.error is VerifierError.REWARD_FILES_DISAGREE, result
    agree = make_task(
        tmp_path,
        "agree",
        test_sh='echo 1 > /logs/verifier/reward.txt\necho \'{"reward": 1, "n": 3}\' > /logs/verifier/reward.json',
    )
    result, _ = _grade(agree)
    assert result.rewards == {"reward": 1.0, "n": 3.0} and result.error is None, result


@needs_bwrap
def test_reward_files_left_by_the_agent_phase_never_count(tmp_path):
    """The agent writes both reward files under /logs/verifier; test.sh writes none."""
    task = make_task(
        tmp_path,
        "stale",
        solve_sh="echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 1}' > /logs/verifier/reward.json",
        test_sh="ls /logs/verifier",
    )
    result, _ = _grade(task)
    assert result.error is VerifierError.REWARD_FILE_NOT_FOUND, result
    assert "reward" not in result.output_tail


def _isolation() -> GradingIsolation:
    """What a grading sandbox gets on this machine (one probe)."""

    async def go() -> GradingIsolation:
        async with create_sandbox(SandboxSpec(grading=True)) as sandbox:
            return sandbox.grading_isolation

    return arun(go(), 60)


@needs_bwrap
def test_agent_programs_cannot_write_the_verifiers_reward_files(tmp_path):
    """Two-uid grading: /logs/verifier is the verifier's (mode 0755), so the agent's program
    that test.sh runs cannot write reward.json there; test.sh's own 0 stands. A test.sh that
    opens the directory to everyone and lets the program write reward.txt: the file is the
    agent uid's, `reward_file_foreign`."""
    if _isolation() is not GradingIsolation.TWO_UID:
        pytest.skip("no two-uid grading here")
    writer = (
        "cat > /app/w.sh <<'W'\n"
        "echo '{\"reward\": 1.0}' > /logs/verifier/reward.json 2>/dev/null && echo planted || echo refused\n"
        "echo 1 > /logs/verifier/reward.txt 2>/dev/null\n"
        "W"
    )
    task = make_task(
        tmp_path,
        "refused",
        solve_sh=writer,
        test_sh="bash /app/w.sh\necho 0 > /logs/verifier/reward.txt",
    )
    result, notes = _grade(task)
    assert (result.reward, result.error) == (0.0, None), result
    assert "refused" in result.output_tail and result.isolation is GradingIsolation.TWO_UID
    assert SINGLE_UID_NOTE not in notes
    opened = make_task(
        tmp_path,
        "opened",
        solve_sh=writer,
        test_sh="chmod 755 /logs\nchmod 777 /logs/verifier\nbash /app/w.sh",
    )
    result, _ = _grade(opened)
    assert result.reward is None and result.error is VerifierError.REWARD_FILE_FOREIGN, result
    assert "planted" in result.output_tail


@needs_bwrap
def test_single_uid_grading_notes_it_and_still_voids_disagreeing_files(tmp_path, monkeypatch):
    """Without a second uid the agent's program writes reward.json with the verifier's uid:
    the owner rule cannot tell, the trial carries the `single_uid` note, and a reward.json
    that disagrees with test.sh's reward.txt is still void."""
    monkeypatch.setenv("SKYRL_GRADING_UIDS", "off")
    task = make_task(
        tmp_path,
        "one-uid",
        solve_sh=(
            "cat > /app/w.sh <<'W'\necho '{\"reward\": 1.0}' > /logs/verifier/reward.json\nW"
        ),
        test_sh="bash /app/w.sh\necho 0 > /logs/verifier/reward.txt",
    )
    result, notes = _grade(task)
    assert result.error is VerifierError.REWARD_FILES_DISAGREE, result
    assert result.isolation is GradingIsolation.SINGLE_UID
    assert SINGLE_UID_NOTE in notes and SINGLE_UID_NOTE.startswith("single_uid: ")
    assert json.loads(json.dumps(notes))  # notes stay JSON (result.json)
