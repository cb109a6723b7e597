"""test.sh's verdict: the reward files it leaves in /logs/verifier, how the host reads them
(the verifier's files only: no link followed, regular files only, size-capped, reward.json and
reward.txt agreeing, with two uids owned by the verifier's), and what a verifier phase gives
(`VerifierResult`, or a `VerifierError` saying why there is no valid reward)."""

from __future__ import annotations

import enum
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from skyrl_sdk.sandboxes import GradingIsolation, UnsafeFileError, read_regular_file

REWARD_MAX_BYTES = 1 << 20
"""The most of reward.json / reward.txt the host reads (a larger file is a parse error)."""


class VerifierError(enum.StrEnum):
    """Why a verifier phase gave no valid reward (Harbor's verifier errors)."""

    TIMEOUT = "verifier_timeout"
    """test.sh ran past `[verifier].timeout_sec` and was killed."""
    REWARD_FILE_NOT_FOUND = "reward_file_not_found"
    """Neither /logs/verifier/reward.json nor reward.txt exists after test.sh."""
    REWARD_FILE_EMPTY = "reward_file_empty"
    """reward.txt (or reward.json) is empty."""
    REWARD_PARSE_ERROR = "reward_parse_error"
    """The reward file is not one finite number / a flat object of finite numbers."""
    REWARD_FILE_UNSAFE = "reward_file_unsafe"
    """reward.json or reward.txt is a symlink or not a regular file; it was not read."""
    SANDBOX_ERROR = "verifier_sandbox_error"
    """The verifier's sandbox failed (could not start, died)."""
    KILLED = "verifier_killed"
    """test.sh did not end on its own: a signal killed it (not the timeout), e.g. an agent's
    program it ran, which could have written the reward file first. Its reward is void."""
    EXIT_NONZERO = "verifier_exit_nonzero"
    """`require_exit_zero`: test.sh exited with a status other than 0. Its reward is void."""
    STRAY_PROCESSES = "verifier_stray_processes"
    """`require_exit_zero`: a process test.sh started outlived its parent (still running when
    test.sh exited, or ended as an orphan before); it could have rewritten the reward file
    after the verdict. Its reward is void."""
    REWARD_FILE_FOREIGN = "reward_file_foreign"
    """Two-uid grading: a reward file is not owned by the verifier's uid, or lies in a
    directory the agent's uid can write: an agent program wrote or placed it. Void."""
    REWARD_FILES_DISAGREE = "reward_files_disagree"
    """Both reward.json and reward.txt exist and reward.json's reward (its `reward` key, else
    `primary_reward` of its values) is not reward.txt's number: one of them is not test.sh's
    verdict (an agent program wrote it). Void."""
    COMMAND_NOT_FOUND = "verifier_command_not_found"
    """test.sh could not run its own tools: a command it called is not installed (`uvx:
    command not found`, exit 127; `env: 'python3': No such file or directory`) and it left no
    reward or a reward of 0. The message names the command; the reward is void, since 0
    would say the agent failed when the verifier never ran."""


_MISSING_COMMAND = re.compile(
    # bash: "/tests/test.sh: line 3: uvx: command not found"; dash: "/tests/test.sh: 3: uvx:
    # not found"; env (a #! line or `env X`): "/usr/bin/env: 'python3': No such file or
    # directory" (GNU quotes with ' or with curly quotes).
    r"^(?:[^\n:]*: )?(?:line )?(?:\d+: )?(?P<name>[^\s:'\u2018\u2019]+): (?:command )?not found\s*$"
    r"|^(?:/usr/bin/|/bin/)?env: ['\u2018](?P<env>[^'\u2019\s]+)['\u2019]: No such file or directory\s*$",
    re.MULTILINE,
)
"""A line of test.sh's output saying a command it ran is not installed."""


def missing_commands(output: str) -> list[str]:
    """The commands test.sh's output says are not installed (in order, each once)."""
    names = (m.group("name") or m.group("env") for m in _MISSING_COMMAND.finditer(output))
    return list(dict.fromkeys(n for n in names if n))


class RewardFileError(ValueError):
    """A reward file is missing or malformed; `kind` says which."""

    def __init__(self, kind: VerifierError, message: str):
        super().__init__(message)
        self.kind = kind


REWARD_FILES = ("reward.json", "reward.txt")
"""The reward files test.sh may write in /logs/verifier (Harbor's)."""
REWARD_AGREEMENT_TOLERANCE = 1e-6
"""How far reward.json's reward and reward.txt's number may differ and still agree (the same
verdict printed with fewer digits)."""


def _read_reward_file(verifier_dir: Path, name: str) -> str | None:
    """The text of `verifier_dir/name`, or None when there is none. Never follows a symlink
    (the verifier could have left one to a host file) and never reads more than
    `REWARD_MAX_BYTES`."""
    try:
        data = read_regular_file(name, max_bytes=REWARD_MAX_BYTES + 1, under=verifier_dir)
    except FileNotFoundError:
        return None
    except UnsafeFileError:
        # The target is neither read nor named: the message may end up in result.json.
        raise RewardFileError(
            VerifierError.REWARD_FILE_UNSAFE,
            f"{name} is a symlink or not a regular file; it was not read",
        ) from None
    if len(data) > REWARD_MAX_BYTES:
        raise RewardFileError(
            VerifierError.REWARD_PARSE_ERROR, f"{name} is larger than {REWARD_MAX_BYTES} bytes"
        )
    return data.decode("utf-8", errors="replace")


def _parse_reward_json(raw: str) -> dict[str, float]:
    if not raw.strip():
        raise RewardFileError(VerifierError.REWARD_FILE_EMPTY, "reward.json is empty")
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise RewardFileError(
            VerifierError.REWARD_PARSE_ERROR, f"reward.json is not JSON: {e}"
        ) from None
    if not isinstance(data, dict) or not data:
        raise RewardFileError(
            VerifierError.REWARD_PARSE_ERROR, "reward.json must be a non-empty flat object"
        )
    rewards = {}
    for key, value in data.items():
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise RewardFileError(
                VerifierError.REWARD_PARSE_ERROR,
                f"reward.json: {key!r} must be a finite number, got {value!r}",
            )
        rewards[str(key)] = float(value)
    return rewards


def _parse_reward_txt(raw: str) -> float:
    if not raw.strip():
        raise RewardFileError(VerifierError.REWARD_FILE_EMPTY, "reward.txt is empty")
    try:
        value = float(raw.strip())
    except ValueError:
        raise RewardFileError(
            VerifierError.REWARD_PARSE_ERROR, f"reward.txt is not a number: {raw[:80]!r}"
        ) from None
    if not math.isfinite(value):
        raise RewardFileError(
            VerifierError.REWARD_PARSE_ERROR, f"reward.txt is not finite: {raw[:80]!r}"
        )
    return value


def check_reward_owner(verifier_dir: Path, verifier_uid: int) -> None:
    """Two-uid grading: every reward file in `verifier_dir` must be owned by `verifier_uid`
    and `verifier_dir` itself owned by it and writable by nobody else (so no agent program,
    which runs under another uid, wrote or placed it there). `REWARD_FILE_FOREIGN` otherwise.

    Call it once no process of the grading sandbox runs (nothing can change what is seen)."""
    info = os.lstat(verifier_dir)
    if info.st_uid != verifier_uid or info.st_mode & 0o022:
        raise RewardFileError(
            VerifierError.REWARD_FILE_FOREIGN,
            f"/logs/verifier is owned by uid {info.st_uid} with mode {info.st_mode & 0o777:o}: "
            f"a uid other than the verifier's ({verifier_uid}) could write its reward files",
        )
    for name in REWARD_FILES:
        try:
            owner = os.lstat(verifier_dir / name).st_uid
        except FileNotFoundError:
            continue
        if owner != verifier_uid:
            raise RewardFileError(
                VerifierError.REWARD_FILE_FOREIGN,
                f"{name} is owned by uid {owner}, not the verifier's ({verifier_uid}): "
                "a program test.sh ran wrote it",
            )


def read_rewards(verifier_dir: Path, *, verifier_uid: int | None = None) -> dict[str, float]:
    """Harbor's reward parse, with the verifier's own files only: reward.json (a flat object
    of finite numbers: its reward, and other keys as metrics) or reward.txt (one finite
    float, which becomes `{"reward": x}`).

    Stricter than Harbor: when both exist, reward.json's reward (its `reward` key, else
    `primary_reward` of its values) must equal reward.txt's number
    (`REWARD_FILES_DISAGREE`): a task writes one verdict, so a second one that differs was
    written by someone else (an agent program test.sh ran). With `verifier_uid` (two-uid
    grading), a reward file counts only if that uid owns it in a directory no other uid can
    write (`check_reward_owner`, `REWARD_FILE_FOREIGN`).

    Both are read without following symlinks, as regular files only, size-capped
    (`REWARD_FILE_UNSAFE` otherwise)."""
    raw_json = _read_reward_file(verifier_dir, "reward.json")
    raw_txt = _read_reward_file(verifier_dir, "reward.txt")
    if raw_json is None and raw_txt is None:
        raise RewardFileError(
            VerifierError.REWARD_FILE_NOT_FOUND,
            "test.sh wrote neither /logs/verifier/reward.json nor /logs/verifier/reward.txt",
        )
    if verifier_uid is not None:
        check_reward_owner(verifier_dir, verifier_uid)
    rewards = _parse_reward_json(raw_json) if raw_json is not None else None
    number = _parse_reward_txt(raw_txt) if raw_txt is not None else None
    if rewards is None:
        assert number is not None
        return {"reward": number}
    if number is not None:
        reward = primary_reward(rewards)
        if abs(reward - number) > REWARD_AGREEMENT_TOLERANCE:
            raise RewardFileError(
                VerifierError.REWARD_FILES_DISAGREE,
                f"reward.json says {reward:g} and reward.txt says {number:g}: one of them is "
                "not test.sh's verdict",
            )
    return rewards


def primary_reward(rewards: Mapping[str, float]) -> float:
    """The trial's reward: the `reward` key, else the only value, else the mean of all."""
    if "reward" in rewards:
        return rewards["reward"]
    values = list(rewards.values())
    return values[0] if len(values) == 1 else sum(values) / len(values)


@dataclass(frozen=True)
class VerifierResult:
    """What the verifier phase gave."""

    rewards: dict[str, float] | None
    """Every key of reward.json (or `{"reward": x}` from reward.txt); None without a reward."""
    error: VerifierError | None
    """Why there is no valid reward (None when there is one)."""
    message: str = ""
    """Details of the error."""
    exit_code: int | None = None
    """test.sh's exit status (ignored for the reward, as in Harbor)."""
    duration_s: float = 0.0
    """Wall time of the verifier phase."""
    output_tail: str = ""
    """The end of test.sh's combined output (the full text is test-stdout.txt)."""
    left_running: int | None = None
    """How many processes test.sh left running when it exited; all were killed at that moment,
    before anything was read (None where not counted: the docker backend)."""
    orphaned: int | None = None
    """How many processes test.sh started outlived their parent but ended before test.sh did
    (None where not counted)."""
    isolation: GradingIsolation | None = None
    """What kept the programs test.sh ran from the verifier's powers (`TWO_UID`: their own
    uid, and the reward files' owner was checked; `SINGLE_UID`: the verifier's uid, so the
    owner check could not tell them apart); None when the verifier sandbox did not start."""

    @property
    def reward(self) -> float | None:
        """`primary_reward(rewards)`, or None when the verifier failed."""
        return None if self.rewards is None else primary_reward(self.rewards)
