"""Terminal-Bench 1 task folders, converted to Harbor task folders (as `harbor task migrate`).

A Terminal-Bench 1 (TB1) folder holds:

    <task>/task.yaml            instruction, timeouts, author, difficulty, tags
    <task>/Dockerfile           the environment (its build context is the task folder)
    <task>/docker-compose.yaml  how TB1 started the container (and any extra services)
    <task>/run-tests.sh         the verifier: TB1 graded its pytest output
    <task>/solution.sh          reference solution (or solution.yaml: a list of commands)
    <task>/tests/               test files, copied with run-tests.sh to $TEST_DIR=/tests

`migrate_tb1(src, dest)` writes the Harbor folder: task.toml (`max_agent_timeout_sec` ->
`[agent].timeout_sec`, default 360; `max_test_timeout_sec` -> `[verifier].timeout_sec`,
default 60; `TEST_DIR=/tests` in `[verifier].env`; author, difficulty, category and tags in
`[metadata]`), instruction.md, environment/ (the Dockerfile, docker-compose.yaml and every
other file of the folder: the build context), tests/ (the folder's tests/, run-tests.sh, and
a test.sh that runs run-tests.sh and writes reward 1 when it exits 0, else 0: TB1's pytest
parser passed a trial when every test passed, which is pytest's exit status), and
solution/solve.sh. `load_task` reads a TB1 folder directly by converting it once into
`$SKYRL_CACHE/harbor-tb1/<hash of the folder>/<name>`.

The folder is untrusted input: it must pass the task reader's tree checks (`TREE_MAX_BYTES`,
`TREE_MAX_FILES`, no FIFO, device or link out of the folder) and each file is copied without
following a link (a link inside the folder is copied as its target's bytes).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import yaml

from skyrl_gym.cache import build_once, cache_dir
from skyrl_gym.envs.harbor.task_files import (
    TEXT_FILE_MAX_BYTES,
    TaskFormatError,
    check_task_tree,
    read_task_text,
)

TB1_TASK_FILE = "task.yaml"
"""The file that marks a Terminal-Bench 1 folder."""
DEFAULT_AGENT_TIMEOUT_S = 360.0
"""TB1's `max_agent_timeout_sec` when task.yaml sets none."""
DEFAULT_TEST_TIMEOUT_S = 60.0
"""TB1's `max_test_timeout_sec` when task.yaml sets none."""
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml")
"""TB1's compose file names."""
_TB1_ONLY = {TB1_TASK_FILE, "run-tests.sh", "solution.sh", "solution.yaml", "tests"}
"""Files of a TB1 folder that are not part of the build context."""
MIGRATED_NOTE = (
    "read as a Terminal-Bench 1 folder (task.yaml, run-tests.sh): converted as `skyrl harbor "
    "migrate` does; the reward is 1 when run-tests.sh exits 0"
)

TEST_SH = """\
#!/bin/bash
# Written by `skyrl harbor migrate` from a Terminal-Bench 1 folder: run the task's
# run-tests.sh as TB1 did ($TEST_DIR=/tests); it passes when it exits 0 (every test passed).
export TEST_DIR="${TEST_DIR:-/tests}"
bash /tests/run-tests.sh
status=$?
if [ "$status" -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
exit "$status"
"""


def is_tb1_dir(path: Path) -> bool:
    """True when `path` is a Terminal-Bench 1 folder (task.yaml, no task.toml)."""
    return (path / TB1_TASK_FILE).is_file() and not (path / "task.toml").exists()


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(float(value)) if isinstance(value, float) else str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a JSON string is a TOML basic string


def _read_yaml(src: Path) -> dict[str, Any]:
    text = read_task_text(src, TB1_TASK_FILE, "a Terminal-Bench 1 task's settings")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        problem = " ".join(str(e).split())[:300]
        raise TaskFormatError(src, TB1_TASK_FILE, f"invalid YAML ({problem})") from None
    if not isinstance(data, dict):
        raise TaskFormatError(src, TB1_TASK_FILE, "must be a mapping")
    return data


def _instruction(src: Path, data: dict[str, Any]) -> str:
    text = data.get("instruction")
    if text is None:  # older TB1: descriptions: [{key: base, description: ...}]
        for item in data.get("descriptions") or ():
            if isinstance(item, dict) and item.get("key", "base") == "base":
                text = item.get("description")
                break
    if not isinstance(text, str) or not text.strip():
        raise TaskFormatError(src, TB1_TASK_FILE, "missing or empty", "instruction")
    return text.strip() + "\n"


def _timeout(src: Path, data: dict[str, Any], key: str, default: float) -> float:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise TaskFormatError(src, TB1_TASK_FILE, f"must be a positive number, got {value!r}", key)
    return float(value)


def _solution(src: Path) -> str | None:
    if (src / "solution.sh").is_file():
        return read_task_text(src, "solution.sh", "the reference solution")
    if not (src / "solution.yaml").is_file():
        return None
    text = read_task_text(src, "solution.yaml", "the reference solution")
    try:
        steps = yaml.safe_load(text) or []
    except yaml.YAMLError:
        raise TaskFormatError(src, "solution.yaml", "invalid YAML") from None
    if not isinstance(steps, list):
        raise TaskFormatError(src, "solution.yaml", "must be a list of commands")
    lines = ["#!/bin/bash", "# From solution.yaml (each command as TB1 typed it)."]
    for step in steps:
        command = step.get("command") if isinstance(step, dict) else step
        if not isinstance(command, str):
            raise TaskFormatError(src, "solution.yaml", f"not a command: {step!r}")
        lines.append(command.rstrip("\n"))
    return "\n".join(lines) + "\n"


def _copy_file(src: Path, dest: Path) -> None:
    """Copy one regular file without following a link at `src`'s last component; a link
    inside the task folder (checked by `check_task_tree`) is copied as its target's bytes."""
    path = src.resolve(strict=True) if src.is_symlink() else src
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{src}: not a regular file")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(os.dup(fd), "rb") as fin, dest.open("wb") as fout:
            shutil.copyfileobj(fin, fout)
        dest.chmod(0o755 if info.st_mode & 0o111 else 0o644)
    finally:
        os.close(fd)


def _copy_tree(src: Path, dest: Path, *, skip: frozenset[str] = frozenset()) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        if entry.name in skip:
            continue
        here = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            _copy_tree(here, dest / entry.name)
        else:
            _copy_file(here, dest / entry.name)


def _task_toml(src: Path, data: dict[str, Any]) -> str:
    agent_s = _timeout(src, data, "max_agent_timeout_sec", DEFAULT_AGENT_TIMEOUT_S)
    test_s = _timeout(src, data, "max_test_timeout_sec", DEFAULT_TEST_TIMEOUT_S)
    meta = {"source": "terminal-bench-1"}
    for key in ("author_name", "author_email", "difficulty", "category", "parser_name"):
        if isinstance(data.get(key), str | int | float) and not isinstance(data.get(key), bool):
            meta[key] = data[key]
    for key in ("expert_time_estimate_min", "junior_time_estimate_min"):
        if isinstance(data.get(key), int | float) and not isinstance(data.get(key), bool):
            meta[key] = data[key]
    tags = data.get("tags")
    lines = ['version = "1.0"', "", "[metadata]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in meta.items()]
    if isinstance(tags, list) and all(isinstance(t, str) for t in tags):
        lines.append(f"tags = {_toml_value(tags)}")
    lines += [
        "",
        "[agent]",
        f"timeout_sec = {agent_s!r}",
        "",
        "[verifier]",
        f"timeout_sec = {test_s!r}",
        'env = { TEST_DIR = "/tests" }',
        "",
        "[environment]",
        "build_timeout_sec = 600.0",
        "",
    ]
    return "\n".join(lines)


def migrate_tb1(src: str | os.PathLike[str], dest: str | os.PathLike[str]) -> Path:
    """Write the Harbor task folder for the TB1 folder `src` at `dest` (which must not exist)
    and return it. Raises `TaskFormatError` naming the file and field of any problem."""
    source = Path(src).resolve()
    target = Path(dest)
    if not (source / TB1_TASK_FILE).is_file():
        raise TaskFormatError(source, TB1_TASK_FILE, "missing (not a Terminal-Bench 1 folder)")
    if target.exists():
        raise FileExistsError(f"{target} already exists")
    data = _read_yaml(source)
    instruction = _instruction(source, data)
    toml = _task_toml(source, data)
    if not (source / "run-tests.sh").is_file():
        raise TaskFormatError(source, "run-tests.sh", "missing (the verifier's entry point)")
    run_tests = read_task_text(source, "run-tests.sh", "the verifier's entry point")
    solve = _solution(source)
    if (source / "Dockerfile").is_file():
        read_task_text(source, "Dockerfile", "the environment's Dockerfile")
    check_task_tree(source, ".")  # sizes, entry count, no FIFO/device, no link out
    target.mkdir(parents=True)
    (target / "task.toml").write_text(toml)
    (target / "instruction.md").write_text(instruction)
    _copy_tree(source, target / "environment", skip=frozenset(_TB1_ONLY))
    tests = target / "tests"
    if (source / "tests").is_dir() and not (source / "tests").is_symlink():
        _copy_tree(source / "tests", tests)
    tests.mkdir(exist_ok=True)
    (tests / "run-tests.sh").write_text(run_tests)
    (tests / "run-tests.sh").chmod(0o755)
    (tests / "test.sh").write_text(TEST_SH)
    (tests / "test.sh").chmod(0o755)
    if solve is not None:
        (target / "solution").mkdir()
        (target / "solution" / "solve.sh").write_text(solve)
        (target / "solution" / "solve.sh").chmod(0o755)
    return target


def _folder_digest(src: Path) -> str:
    """A hash of every file's path, mode and bytes (the folder is checked first)."""
    check_task_tree(src, ".")
    digest = hashlib.sha256()
    for here, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            path = Path(here) / name
            digest.update(str(path.relative_to(src)).encode() + b"\0")
            real = path.resolve(strict=True) if path.is_symlink() else path
            with real.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()[:16]


def converted_tb1(src: str | os.PathLike[str]) -> Path:
    """The Harbor folder for the TB1 folder `src`, converted once into
    `$SKYRL_CACHE/harbor-tb1/<hash>/<name>` (a changed folder converts anew)."""
    source = Path(src).resolve()
    if (source / TB1_TASK_FILE).stat().st_size > TEXT_FILE_MAX_BYTES:
        read_task_text(source, TB1_TASK_FILE, "a Terminal-Bench 1 task's settings")  # raises
    key = _folder_digest(source)
    holder = build_once(
        cache_dir() / "harbor-tb1" / key,
        lambda staged: migrate_tb1(source, Path(staged) / source.name),
    )
    return holder / source.name


def compose_services(task_dir: Path) -> list[str]:
    """The service names of environment/docker-compose.yaml (empty when there is none or it
    cannot be read: only notes depend on it)."""
    for name in COMPOSE_FILES:
        path = task_dir / "environment" / name
        if path.is_file() and path.stat().st_size <= TEXT_FILE_MAX_BYTES:
            try:
                data = yaml.safe_load(path.read_text())
            except (yaml.YAMLError, OSError, UnicodeDecodeError):
                return []
            services = data.get("services") if isinstance(data, dict) else None
            return [str(s) for s in services] if isinstance(services, dict) else []
    return []


__all__ = [
    "MIGRATED_NOTE",
    "TB1_TASK_FILE",
    "compose_services",
    "converted_tb1",
    "is_tb1_dir",
    "migrate_tb1",
]
