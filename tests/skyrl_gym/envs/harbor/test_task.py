"""The task-folder parser, the Dockerfile reader and the reward-file rules (no sandboxes)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from skyrl_gym.envs.harbor.dockerfile import StepKind, plan_dockerfile
from skyrl_gym.envs.harbor.env import BUNDLED_TASKS, task_rows
from skyrl_gym.envs.harbor.runtime import (
    RewardFileError,
    VerifierError,
    primary_reward,
    read_rewards,
)
from skyrl_gym.envs.harbor.task import (
    MAX_TIMEOUT_S,
    TEXT_FILE_MAX_BYTES,
    TREE_MAX_BYTES,
    NetworkMode,
    TaskFormatError,
    find_task_dirs,
    load_task,
    strip_canary,
)
from tests.skyrl_gym.envs.harbor.conftest import make_task


def test_bundled_tasks_parse_across_schema_versions():
    tasks = [load_task(p) for p in find_task_dirs(BUNDLED_TASKS)]
    assert len(tasks) >= 8
    assert {t.schema_version for t in tasks} >= {"1.0", "1.1", "1.4"}
    for t in tasks:
        assert "canary" not in t.instruction.lower()
        assert t.solution_dir is not None and t.dockerfile is not None
        assert t.environment.network_mode is NetworkMode.NO_NETWORK or t.schema_version == "1.0"
    legacy = next(t for t in tasks if t.schema_version == "1.0")
    assert legacy.environment.memory_mb == 1024 and legacy.environment.storage_mb == 2048
    assert legacy.agent.timeout_s == 300.0


def test_schema_1_1_and_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("HB_KEY", "secret")
    task = make_task(
        tmp_path,
        "t",
        toml="""\
        schema_version = "1.1"
        unknown_top = 1
        [agent]
        timeout_sec = 900.0
        [verifier]
        env = { KEY = "${HB_KEY}", OTHER = "${HB_MISSING:-fallback}" }
        [environment]
        docker_image = "alexgshaw/x:20251031"
        allow_internet = true
        memory_mb = 2048
        mcp_servers = []
        [environment.env]
        [solution.env]
        """,
        solve_sh=None,
    )
    t = load_task(task, pass_env=["HB_KEY"])
    assert t.verifier.timeout_s == 600.0  # Harbor's default
    assert dict(t.verifier.env) == {"KEY": "secret", "OTHER": "fallback"}
    # Not allowed (the default): empty, with a note naming the variable, never its value.
    withheld = load_task(task)
    assert dict(withheld.verifier.env) == {"KEY": "", "OTHER": "fallback"}
    assert len(withheld.notes) == 1 and "${HB_KEY}" in withheld.notes[0]
    assert "--pass-env HB_KEY" in withheld.notes[0] and "secret" not in withheld.notes[0]
    with pytest.raises(ValueError, match="not an environment variable name"):
        load_task(task, pass_env=["HB KEY"])
    twice = make_task(
        tmp_path,
        "twice",
        toml="""\
        [verifier]
        env = { A = "${HB_KEY}", B = "x${HB_KEY}y" }
        [environment]
        env = { C = "${HB_KEY}" }
        """,
    )
    both = load_task(twice)
    assert dict(both.verifier.env) == {"A": "", "B": "xy"} and both.environment.env == {"C": ""}
    assert len(both.notes) == 1, both.notes  # one note per variable, wherever it appears
    assert t.environment.network_mode is NetworkMode.PUBLIC
    assert t.environment.docker_image == "alexgshaw/x:20251031"
    assert t.solution_dir is None
    minimal = make_task(tmp_path, "m", toml="", dockerfile=None)
    assert load_task(minimal).agent.timeout_s is None  # no [agent].timeout_sec: no limit


def test_canary_lines_are_stripped():
    text = "<!-- BENCHMARK DATA ... canary GUID 123 -->\n# harbor-canary 456\n\nDo the thing.\n# not a canary\n"
    assert strip_canary(text) == "Do the thing.\n# not a canary\n"
    assert strip_canary("Plain.\n") == "Plain.\n"


@pytest.mark.parametrize(
    ("kwargs", "file", "field", "words"),
    [
        ({"test_sh": None}, "tests/test.sh", None, "missing"),
        ({"toml": "schema_version = [oops\n"}, "task.toml", None, "invalid TOML"),
        ({"toml": 'schema_version = "9.9"\n'}, "task.toml", "schema_version", "unknown schema"),
        ({"toml": 'version = "0.3"\n'}, "task.toml", "version", "unknown schema"),
        ({"toml": "[agent]\ntimeout_sec = 'soon'\n"}, "task.toml", "[agent].timeout_sec", "number"),
        (
            {"toml": "[environment]\nnetwork_mode = 'lan'\n"},
            "task.toml",
            "[environment].network_mode",
            "one of",
        ),
        ({"toml": "[environment]\nmemory = 'lots'\n"}, "task.toml", "[environment].memory", "size"),
        ({"toml": None}, "task.toml", None, "missing"),
        ({"instruction": None}, "instruction.md", None, "missing"),
    ],
)
def test_malformed_tasks_name_file_and_field(tmp_path, kwargs, file, field, words):
    task = make_task(tmp_path, "bad", **kwargs)
    with pytest.raises(TaskFormatError) as info:
        load_task(task)
    err = info.value
    assert err.file == file and err.field == field
    assert words in str(err) and str(err).startswith(f"bad/{file}")


def test_find_task_dirs_lists_malformed_folders_too(tmp_path):
    make_task(tmp_path, "good")
    make_task(tmp_path, "no-toml", toml=None)
    (tmp_path / "not-a-task").mkdir()
    assert [p.name for p in find_task_dirs(tmp_path)] == ["good", "no-toml"]
    assert [p.name for p in find_task_dirs(tmp_path / "good")] == ["good"]


def test_a_suite_of_suites_is_refused_in_one_line_naming_the_nested_tasks(tmp_path):
    """A task's id is its folder's name (as in Harbor): `suite/a/hello` and `suite/b/hello`
    would both be `hello`, so `suite` is not read as one dataset; its error names the nested
    folders to load instead, and each of those keeps the ids it has."""
    suite = tmp_path / "suite"
    for rel in ("a/hello", "b/hello", "b/other"):
        make_task(suite / rel.split("/")[0], rel.split("/")[1])
    (suite / ".hidden").mkdir()
    make_task(suite / ".hidden", "secret")
    with pytest.raises(FileNotFoundError) as info:
        find_task_dirs(suite)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{suite} holds no task folders (folders with a task.toml); ")
    assert "task folders one level down: a/hello, b/hello, b/other (load one folder" in message
    assert "a task's id is its folder's name" in message and "secret" not in message
    # One folder of tasks at a time: the ids are the folder names, as before.
    assert [r["task_id"] for r in task_rows(suite / "a")] == ["hello"]
    assert [r["task_id"] for r in task_rows(suite / "b")] == ["hello", "other"]
    assert task_rows(suite / "b" / "hello") == [
        {"task_id": "hello", "path": str((suite / "b" / "hello").resolve())}
    ]
    # Many nested tasks: the first four named, the rest counted.
    for i in range(3):
        make_task(suite / "c", f"t{i}")
    with pytest.raises(FileNotFoundError, match=r"b/other, c/t0 and 2 more \(load"):
        find_task_dirs(suite)
    # No task anywhere near: the error is as it was.
    (tmp_path / "empty" / "x").mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as info:
        find_task_dirs(tmp_path / "empty")
    assert str(info.value).endswith("holds no task folders (folders with a task.toml)")


def test_dockerfile_plan_applies_what_it_can(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(
        "FROM ubuntu:24.04\n"
        "ARG GREETING=hi\n"
        "RUN apt-get update && \\\n    apt-get install -y curl\n"
        "WORKDIR /srv\n"
        "WORKDIR app\n"
        "ENV MODE=test NAME=$GREETING\n"
        "ENV LEGACY value with spaces\n"
        "# a comment\n"
        "COPY files/ ./files/\n"
        "COPY --from=builder /out /opt/out\n"
        "ADD https://example.com/x.tgz /tmp/\n"
        "RUN echo built > built.txt\n"
        "USER agent\n"
        'CMD ["bash"]\n'
    )
    plan = plan_dockerfile(dockerfile)
    assert plan.base_image == "ubuntu:24.04" and plan.workdir == "/srv/app"
    assert dict(plan.env) == {"MODE": "test", "NAME": "hi", "LEGACY": "value with spaces"}
    assert [s.kind for s in plan.steps] == [StepKind.COPY, StepKind.RUN]
    assert (
        plan.steps[0].dest == "/srv/app/files/"
        and plan.steps[1].command == "echo built > built.txt"
    )
    reasons = "\n".join(plan.not_applied)
    for expected in ("FROM ubuntu:24.04", "apt-get", "registry", "--from", "URL", "USER"):
        assert expected in reasons, expected
    assert "CMD" not in reasons


def _write(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / name).write_text(text)
    return tmp_path


def test_reward_files_follow_harbor(tmp_path):
    assert read_rewards(_write(tmp_path, "reward.txt", " 0.75\n")) == {"reward": 0.75}
    _write(tmp_path, "reward.json", json.dumps({"reward": 0.75, "speed": 0.5}))
    assert read_rewards(tmp_path) == {"reward": 0.75, "speed": 0.5}  # json's metrics kept
    _write(tmp_path, "reward.json", json.dumps({"reward": 1, "speed": 0.5}))
    with pytest.raises(RewardFileError) as info:  # stricter than Harbor: both must agree
        read_rewards(tmp_path)
    assert info.value.kind is VerifierError.REWARD_FILES_DISAGREE
    for text, kind in [
        ("", VerifierError.REWARD_FILE_EMPTY),
        ('{"reward": "1"}', VerifierError.REWARD_PARSE_ERROR),
        ('{"reward": NaN}', VerifierError.REWARD_PARSE_ERROR),
        ("[1]", VerifierError.REWARD_PARSE_ERROR),
        ('{"a": {"b": 1}}', VerifierError.REWARD_PARSE_ERROR),
    ]:
        _write(tmp_path, "reward.json", text)
        with pytest.raises(RewardFileError) as info:
            read_rewards(tmp_path)
        assert info.value.kind is kind, text
    (tmp_path / "reward.json").unlink()
    for text, kind in [
        ("", VerifierError.REWARD_FILE_EMPTY),
        ("yes", VerifierError.REWARD_PARSE_ERROR),
        ("inf", VerifierError.REWARD_PARSE_ERROR),
    ]:
        _write(tmp_path, "reward.txt", text)
        with pytest.raises(RewardFileError) as info:
            read_rewards(tmp_path)
        assert info.value.kind is kind, text
    (tmp_path / "reward.txt").unlink()
    with pytest.raises(RewardFileError) as info:
        read_rewards(tmp_path)
    assert info.value.kind is VerifierError.REWARD_FILE_NOT_FOUND
    assert primary_reward({"speed": 0.5}) == 0.5
    assert math.isclose(primary_reward({"a": 1.0, "b": 0.0}), 0.5)


def test_timeouts_above_a_day_are_clamped_with_a_note(tmp_path):
    toml = """\
    [agent]
    timeout_sec = 1e12
    [verifier]
    timeout_sec = 90000.0
    [environment]
    build_timeout_sec = 60.0
    """
    t = load_task(make_task(tmp_path, "slow", toml=toml))
    assert t.agent.timeout_s == MAX_TIMEOUT_S and t.verifier.timeout_s == MAX_TIMEOUT_S
    assert t.environment.build_timeout_s == 60.0
    assert any("[agent].timeout_sec=1e+12 clamped to 86400" in n for n in t.notes), t.notes
    assert any("[verifier].timeout_sec=90000 clamped" in n for n in t.notes), t.notes


@pytest.mark.parametrize(
    ("rel", "size", "words"),
    [
        ("instruction.md", TEXT_FILE_MAX_BYTES + 1, "larger than"),
        ("task.toml", TEXT_FILE_MAX_BYTES + 1, "larger than"),
        ("environment/Dockerfile", TEXT_FILE_MAX_BYTES + 1, "larger than"),
        ("tests/data.bin", TREE_MAX_BYTES + 1, "holds more than"),
        ("solution/data.bin", TREE_MAX_BYTES + 1, "holds more than"),
    ],
)
def test_oversized_task_files_are_refused(tmp_path, rel, size, words):
    """Sparse files (they cost nothing to make): refused from their size, never read."""
    task = make_task(tmp_path, "big")
    path = task / rel
    with open(path, "ab") as f:
        f.truncate(size)
    with pytest.raises(TaskFormatError, match=words) as info:
        load_task(task)
    assert rel.split("/")[0] in str(info.value)


def test_tests_dir_with_a_fifo_or_a_link_out_is_refused(tmp_path):
    import os

    fifo = make_task(tmp_path, "fifo")
    os.mkfifo(fifo / "tests" / "pipe")
    with pytest.raises(TaskFormatError, match="not a regular file"):
        load_task(fifo)
    link = make_task(tmp_path, "link")
    (link / "tests" / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(TaskFormatError, match="link out of the task folder"):
        load_task(link)
    instruction = make_task(tmp_path, "instruction-link", instruction=None)
    (instruction / "instruction.md").symlink_to("/etc/passwd")
    with pytest.raises(TaskFormatError, match="link out of the task folder"):
        load_task(instruction)


def test_deeply_nested_task_toml_is_an_invalid_task(tmp_path):
    """tomllib recurses per nesting level: a RecursionError would escape the job's trial."""
    task = make_task(tmp_path, "nested", toml="a = " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(TaskFormatError, match="nested too deeply"):
        load_task(task)
