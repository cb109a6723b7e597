"""SWE-bench instances and predictions: loading, validation, and the facts derived from them.

Instances follow the SWE-bench schema (`instance_id`, `repo`, `base_commit`, `patch`,
`test_patch`, `FAIL_TO_PASS`, `PASS_TO_PASS`, `version`, ...) from a JSON list, a JSONL file,
or a JSON object keyed by id. `FAIL_TO_PASS`/`PASS_TO_PASS` may be lists or JSON-encoded
strings (as on the Hugging Face hub). Predictions are `instance_id`, `model_name_or_path`,
`model_patch` rows in the same containers.

Optional per-instance overrides understood by this package: `test_cmd` (the test command),
`test_directives` (its arguments), `log_parser` (a `swebench` parser name), `eval_type`,
`image` (Docker image) and `eval_script` (a full SWE-bench 5.x eval script; Docker only).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)$", re.M)


class InstanceError(ValueError):
    """An instance or prediction file is malformed; the message names the file and row."""


def _id_list(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a list of test ids (or its JSON encoding)")
    return list(value)


class SWEInstance(BaseModel):
    """One SWE-bench task instance (unknown fields are kept in `extra`)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    instance_id: str
    """Unique id, e.g. `owner__name-123`."""
    repo: str
    """Repository as `owner/name`."""
    base_commit: str
    """Commit the model patch and the test patch apply to."""
    patch: str = ""
    """The gold patch (non-test files)."""
    test_patch: str = ""
    """The patch adding or updating the tests that grade the instance."""
    problem_statement: str = ""
    """The issue text shown to an agent."""
    hints_text: str = ""
    """Comments on the issue before the fix (not shown by default)."""
    version: str = ""
    """Repository version label (keys the official environment specs)."""
    created_at: str = ""
    """When the fixing pull request was created."""
    environment_setup_commit: str = ""
    """Commit the official environment was built from."""
    FAIL_TO_PASS: list[str] = Field(default_factory=list)
    """Tests that fail before the gold patch and must pass after it."""
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    """Tests that pass before and must keep passing."""
    test_cmd: str | None = None
    """Override: the test command (default: from the repo, else pytest -rA)."""
    test_directives: list[str] | None = None
    """Override: the test command's arguments (default: the test patch's test files)."""
    log_parser: str | None = None
    """Override: a `swebench` parser name (default: the repo's parser, else pytest's)."""
    eval_type: str | None = None
    """Override: `pass_and_fail` or `fail_only` (default: from the repo)."""
    image: str | None = None
    """Docker image holding the repository at /testbed (default: the official name)."""
    eval_script: str | None = None
    """A full SWE-bench 5.x eval script (used as is on the Docker backend)."""

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _decode_ids(cls, value: Any) -> list[str]:
        return _id_list(value)

    @field_validator("instance_id", "repo", "base_commit")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("repo")
    @classmethod
    def _owner_name(cls, value: str) -> str:
        if value.count("/") != 1 or ".." in value or value.startswith("/"):
            raise ValueError(f"must be 'owner/name', got {value!r}")
        return value

    @property
    def owner(self) -> str:
        """The repository owner."""
        return self.repo.split("/")[0]

    @property
    def name(self) -> str:
        """The repository name."""
        return self.repo.split("/")[1]

    @property
    def test_files(self) -> list[str]:
        """Files the test patch touches (reset before it is applied, and after the run)."""
        return patch_files(self.test_patch)

    @property
    def test_targets(self) -> list[str]:
        """Default test command arguments: the Python files the test patch touches (all
        touched files when it touches none, for non-Python suites)."""
        files = self.test_files
        return [f for f in files if f.endswith(".py")] or files

    def to_row(self) -> dict[str, Any]:
        """A JSON-serialisable task row (with `task_id` = `instance_id`) for envs."""
        row = self.model_dump(exclude_none=True)
        row["task_id"] = self.instance_id
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SWEInstance:
        """An instance from a row (`task_id` is dropped)."""
        return cls.model_validate({k: v for k, v in row.items() if k != "task_id"})


class Prediction(BaseModel):
    """A model's answer for one instance."""

    model_config = ConfigDict(frozen=True, extra="allow")

    instance_id: str
    """The instance it answers."""
    model_name_or_path: str = "unknown"
    """Name of the system that produced it (names its log folder)."""
    model_patch: str | None = None
    """A unified diff to apply at `base_commit`; None or empty means no answer."""

    @property
    def is_empty(self) -> bool:
        """True when there is no patch to apply."""
        return not (self.model_patch or "").strip()


def patch_files(patch: str) -> list[str]:
    """Paths a unified git diff touches (post-image names), in order, without duplicates."""
    seen: dict[str, None] = {}
    for _a, b in _DIFF_HEADER.findall(patch or ""):
        seen.setdefault(b, None)
    return list(seen)


def split_patch(patch: str) -> list[tuple[str, str]]:
    """A git diff cut into (path, that file's diff text) pieces."""
    pieces: list[tuple[str, str]] = []
    starts = [m.start() for m in re.finditer(r"^diff --git ", patch, re.M)]
    for i, start in enumerate(starts):
        chunk = patch[start : starts[i + 1] if i + 1 < len(starts) else len(patch)]
        header = _DIFF_HEADER.match(chunk)
        pieces.append((header.group(2) if header else "", chunk))
    return pieces


def is_test_path(path: str) -> bool:
    """True for files that belong to a test suite: test dirs, `test_*.py`, `conftest.py`, ..."""
    p = PurePosixPath(path)
    if any(part in ("test", "tests", "testing") for part in p.parts[:-1]):
        return True
    name = p.name
    return (
        name == "conftest.py"
        or (name.startswith("test_") and name.endswith(".py"))
        or name.endswith("_test.py")
        or name in ("pytest.ini", "tox.ini")
    )


def _rows(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if not stripped:
        return []
    if stripped[0] in "[{" and path.suffix != ".jsonl":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, list):
            return data
        if isinstance(data, dict):
            if "instance_id" in data:
                return [data]
            return [
                {"instance_id": key, **value} if isinstance(value, dict) else value
                for key, value in data.items()
            ]
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise InstanceError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
    return rows


def _validate(rows: Iterable[Any], model: type[BaseModel], where: str) -> list[Any]:
    out, seen = [], set()
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise InstanceError(f"{where}: row {i} is not a JSON object")
        try:
            item = model.model_validate(row)
        except ValueError as e:
            raise InstanceError(f"{where}: row {i} ({row.get('instance_id')!r}): {e}") from None
        if item.instance_id in seen:  # type: ignore[attr-defined]
            raise InstanceError(f"{where}: duplicate instance_id {item.instance_id!r}")  # type: ignore[attr-defined]
        seen.add(item.instance_id)  # type: ignore[attr-defined]
        out.append(item)
    return out


def load_instances(
    source: str | Path | Sequence[Mapping[str, Any]], ids: Sequence[str] | None = None
) -> list[SWEInstance]:
    """Instances from a JSON/JSONL file or a list of rows; `ids` keeps only those (in order)."""
    if isinstance(source, str | Path):
        path = Path(source)
        if not path.is_file():
            raise InstanceError(f"instances file not found: {path}")
        instances = _validate(_rows(path), SWEInstance, str(path))
    else:
        instances = _validate(
            [{k: v for k, v in r.items() if k != "task_id"} for r in source],
            SWEInstance,
            "instances",
        )
    if ids:
        by_id = {i.instance_id: i for i in instances}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise InstanceError(f"unknown instance ids: {', '.join(missing)}")
        instances = [by_id[i] for i in ids]
    return instances


def load_predictions(
    source: str | Path | Sequence[Mapping[str, Any]],
    instances: Sequence[SWEInstance] | None = None,
) -> dict[str, Prediction]:
    """Predictions by instance id, from a JSON/JSONL file or rows.

    The source `gold` (with `instances`) predicts every instance's own `patch`.
    """
    if str(source) == "gold":
        if instances is None:
            raise InstanceError("'gold' predictions need the instances")
        return {
            i.instance_id: Prediction(
                instance_id=i.instance_id, model_name_or_path="gold", model_patch=i.patch
            )
            for i in instances
        }
    if isinstance(source, str | Path):
        path = Path(source)
        if not path.is_file():
            raise InstanceError(f"predictions file not found: {path}")
        preds = _validate(_rows(path), Prediction, str(path))
    else:
        preds = _validate(list(source), Prediction, "predictions")
    return {p.instance_id: p for p in preds}
