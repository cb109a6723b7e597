"""Evaluate SWE-bench predictions in sandboxes, the way the official harness does.

Per instance: a workspace holding the repository at `base_commit` (bwrap/local: fetched from a
local git repository or GitHub into a host directory; docker: the instance image's `/testbed`),
then in a sandbox with no network:

1. the model patch is applied with the official fallbacks (`git apply`, `git apply --3way`,
   `git apply --reject`, `patch --batch --forward --fuzz=5`), the tree reset between tries,
   and "already applied" accepted (`git apply --check --reverse`);
2. the eval script resets the files the test patch touches to `base_commit`, applies the
   test patch, runs the tests between the official output markers and records their exit code;
3. `swebench`'s `get_eval_report` grades the log (FAIL_TO_PASS must pass, PASS_TO_PASS must
   keep passing).

The tests run the patched code, so a patch can always change what they report from inside
the test process (as in the official harness); what the harness closes is every *other*
route. The test runner belongs to the harness, not to the patch:

- just before the test command, every file that configures or hooks it (`is_runner_file`:
  pytest.ini, .pytest.ini, pyproject.toml, tox.ini, setup.cfg, conftest.py,
  sitecustomize.py, usercustomize.py, `*.pth`, a distribution's `entry_points.txt`) is put
  back as `base_commit` has it, read on the host before the patch touched the tree, or
  removed when the commit has none; the test patch's own files are left as it made them
  (`restore_runner_script`). So a patch's `addopts = "-p plugin"`, its conftest.py outside
  the test patch, its sitecustomize.py or its `pytest11` entry point never load;
- bwrap/local: the repository is not on the interpreter's start-up path (`PYTHONPATH` holds
  only the harness's read-only directories), pytest auto-loads no plugin, and the harness's
  `skyrl_swe_runner` plugin puts the repository on `sys.path` once pytest is parsing its
  options, as a development install would (`grading_command_env`);
- the model patch cannot make git run its commands: after it is applied (the `patch -p1`
  fallback writes paths git apply refuses), `.git/config`, `.git/info/attributes` and
  `.git/objects/info/alternates` are put back as the checkout had them (no filter or diff
  driver of the patch's), replace refs are ignored, and on bwrap every process a step left
  is killed when it ends (`end_all`), so no writer survives into the tests;
- the commands run with `grading_env` (`HOME=/tmp`, the sandbox's fresh tmpfs, so a
  `.local/.../usercustomize.py` the patch adds is never loaded; user site-packages off; no
  agent-writable directory on `PATH`), git runs no hooks or fsmonitor, pytest comes from a
  read-only package directory that is first on `PYTHONPATH` (bwrap: `sandbox_packages`, never
  the project's venv; a `pytest.py` in the repository does not shadow it);
- the sandbox is a grading one (`SandboxSpec(grading=True)`: read-only /proc; a `single_uid`
  note on the instance where it has no second uid), and the test output is read back only
  after it is closed (nothing left running can rewrite it), without following symlinks,
  size-capped.

What stays open, as in the official harness: the code under test runs inside pytest. A
module the tests import (the patched source, a package `__init__.py`) can reach the running
session (e.g. register a plugin through `gc` or `sys.modules`) and rewrite its reports. The
patch's changes to the runner files above are not graded (the commit's versions are used).
The workspace is a `Workspace` (size-capped, reaped after a SIGKILL).

`run_evaluation` writes `OUT/report.json` with the official summary keys and, per instance,
`OUT/logs/<instance_id>/` (`patch.diff`, `eval.sh`, `test_output.txt`, `run_instance.log`,
`report.json`). Each instance has its own timeout, and a failing instance never stops the run.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import json
import os
import secrets
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from skyrl_gym.envs.swe import grading
from skyrl_gym.envs.swe.instances import Prediction, SWEInstance
from skyrl_gym.envs.swe.packages import (
    DEFAULT_PACKAGES,
    RUNNER_PLUGIN,
    pytest_plugins_in,
    runner_plugin_dir,
    sandbox_packages,
)
from skyrl_gym.envs.swe.repos import RepoError, materialize, path_exists_at
from skyrl_gym.stages import StageStop
from skyrl_sdk.sandboxes import (
    DEFAULT_DISK_BYTES,
    Backend,
    BackendUnavailable,
    ExecResult,
    GradingIsolation,
    Sandbox,
    SandboxSpec,
    UnsafeFileError,
    Workspace,
    create_sandbox,
    grading_env,
    read_regular_file,
)
from skyrl_sdk.sandboxes.bwrap import BwrapSandbox
from skyrl_sdk.sandboxes.grading import GIT_HARDENING, GRADING_HOME
from skyrl_sdk.sandboxes.spec import DEFAULT_PATH

APPLY_COMMANDS = (
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
)
"""Ways to apply a model patch, tried in order (the official harness's chain)."""

RESET_TREE = "git checkout -- . ; git clean -fdq"
SINGLE_UID_NOTE = (
    "single_uid: the evaluation sandbox had no second uid (not root, no exec shim, or another "
    "backend); the tests' programs had the grader's uid"
)
"""An instance's note when its evaluation sandbox had `GradingIsolation.SINGLE_UID`."""
DEFAULT_TEST_CMD = "python3 -m pytest --no-header -rA --tb=no -p no:cacheprovider"
"""Test command for repositories without a known command: pytest with the `-rA` summary the
pytest log parser reads."""
TESTBED = "/testbed"
SCHEMA_VERSION = 2
TEST_OUTPUT_MAX_BYTES = 32 << 20
"""The most of a test log the host reads back (the start: the parsers need the markers)."""

# Test commands of repositories whose suites do not run under plain pytest (their parsers
# expect these runners' output). Directives for django are dotted test modules.
_KNOWN_TEST_CMDS = {
    "django/django": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
    "sympy/sympy": "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose",
}


class Outcome(enum.StrEnum):
    """How the evaluation of one instance ended."""

    RESOLVED = "resolved"
    """The patch applied and every FAIL_TO_PASS and PASS_TO_PASS test passed."""
    UNRESOLVED = "unresolved"
    """The patch applied and the tests ran, but not all required tests passed."""
    EMPTY_PATCH = "empty_patch"
    """The prediction had no patch; nothing was run."""
    PATCH_APPLY_FAILED = "patch_apply_failed"
    """No way of applying the patch worked."""
    TIMEOUT = "timeout"
    """The instance ran past its time limit."""
    ERROR = "error"
    """Infrastructure or harness failure (repository missing, sandbox failed, ...)."""
    SKIPPED = "skipped"
    """Not run: the backend or the instance's image is not available here."""

    @property
    def completed(self) -> bool:
        """True when the tests ran and were graded (the official `completed_ids`)."""
        return self in (Outcome.RESOLVED, Outcome.UNRESOLVED)


@dataclass(frozen=True)
class HarnessConfig:
    """How instances are evaluated."""

    backend: str = Backend.BWRAP.value
    """Sandbox backend: `bwrap` (default), `local` (trusted code only) or `docker`."""
    repos_dir: str | None = None
    """Directory of local git repositories (`<owner>__<name>` or `<name>`); bwrap/local."""
    allow_clone: bool = False
    """Fetch repositories missing from `repos_dir` from GitHub (needs network)."""
    timeout_s: float = 1800.0
    """Wall-clock limit per instance (workspace, patch, tests)."""
    apply_timeout_s: float = 120.0
    """Limit for each patch-apply command."""
    workers: int = 2
    """Instances evaluated at once."""
    python: str = sys.executable
    """bwrap: the interpreter whose installed `packages` are copied into the sandbox's package
    directory (the sandbox's own `python3` runs the tests); local: the interpreter (with
    pytest) that runs them, see `host_python_env`."""
    packages: tuple[str, ...] = DEFAULT_PACKAGES
    """bwrap: the distributions (with their requirements) the tests need inside the sandbox,
    copied from `python`'s environment into a read-only directory on `PYTHONPATH`
    (`sandbox_packages`). Never the project's venv, which the sandbox must not see."""
    disk_bytes: int | None = DEFAULT_DISK_BYTES
    """Size cap of each evaluation workspace (a `Workspace`: a tmpfs as root); None: no cap
    (still reaped after a SIGKILL)."""
    memory_bytes: int | None = 4 << 30
    """Memory cap of an evaluation sandbox."""
    pids: int | None = 1024
    """Process cap of an evaluation sandbox."""
    keep_workspaces: bool = False
    """Keep each host workspace after its evaluation (for debugging)."""


@dataclass(frozen=True)
class InstanceResult:
    """The evaluation of one prediction."""

    instance_id: str
    """The instance evaluated."""
    outcome: Outcome
    """How it ended."""
    model_name_or_path: str = ""
    """The prediction's system name."""
    apply_command: str | None = None
    """The command that applied the patch (None when none did)."""
    report: dict[str, Any] = field(default_factory=dict)
    """`swebench`'s per-instance report (empty when the tests never ran)."""
    error: str | None = None
    """What went wrong, for errors, timeouts, skips and failed applies."""
    duration_s: float = 0.0
    """Wall-clock seconds spent on the instance."""
    log_dir: str | None = None
    """Where its logs are."""
    notes: tuple[str, ...] = ()
    """What the grading could not do here, e.g. `SINGLE_UID_NOTE`."""
    stop_reason: StageStop | None = None
    """Which stage's limit ended the instance: `verifier_timeout` (the evaluation ran past
    its time, `Outcome.TIMEOUT`), `agent_timeout` (`skyrl swebench run`: the episode ran
    past `--timeout` before it submitted); None when no limit did."""

    @property
    def resolved(self) -> bool:
        """True when the instance is resolved."""
        return self.outcome is Outcome.RESOLVED

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> InstanceResult:
        """Read back what `to_json` wrote (the full report is not kept)."""
        return cls(
            instance_id=data["instance_id"],
            outcome=Outcome(data["outcome"]),
            model_name_or_path=data.get("model_name_or_path", ""),
            apply_command=data.get("apply_command"),
            report={"tests_status": data.get("tests_status") or {}},
            error=data.get("error"),
            duration_s=float(data.get("duration_s", 0.0)),
            notes=tuple(data.get("notes") or ()),
            stop_reason=StageStop(data["stop_reason"]) if data.get("stop_reason") else None,
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable summary."""
        tests = self.report.get("tests_status") or {}
        return {
            "instance_id": self.instance_id,
            "outcome": self.outcome.value,
            "model_name_or_path": self.model_name_or_path,
            "resolved": self.resolved,
            "apply_command": self.apply_command,
            "error": self.error,
            "duration_s": round(self.duration_s, 3),
            "tests_status": tests,
            "notes": list(self.notes),
            "stop_reason": self.stop_reason.value if self.stop_reason else None,
        }


# ---- the host Python (local backend) ------------------------------------------------------


def host_python_env(python: str = sys.executable) -> dict[str, str]:
    """The local backend's command environment: `python3` is the host interpreter `python`
    (its directory first on PATH). The local backend runs on the host: trusted code only."""
    return {
        "PATH": f"{os.path.dirname(python)}:{DEFAULT_PATH}",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


# ---- the test runner belongs to the harness -------------------------------------------------

RUNNER_CONFIG_NAMES = frozenset(
    {
        # pytest's configuration files (each may hold [pytest] / [tool.pytest...] / addopts)
        "pytest.ini",
        ".pytest.ini",
        "pyproject.toml",
        "tox.ini",
        "setup.cfg",
        # code pytest or the interpreter runs before any test
        "conftest.py",
        "sitecustomize.py",
        "usercustomize.py",
    }
)
"""File names that configure or hook the test runner: taken from `base_commit` (or removed)
before the tests run, wherever they are in the tree, unless the test patch touches them.
Also every `*.pth` file and every `*.dist-info/entry_points.txt` or
`*.egg-info/entry_points.txt` (a `pytest11` entry point is a plugin pytest loads itself)."""


def is_runner_file(path: str) -> bool:
    """True for a repository path that configures or hooks the test runner
    (`RUNNER_CONFIG_NAMES`, `*.pth`, a distribution's `entry_points.txt`)."""
    p = PurePosixPath(path)
    if p.name in RUNNER_CONFIG_NAMES or p.suffix == ".pth":
        return True
    return p.name == "entry_points.txt" and p.parent.suffix in (".dist-info", ".egg-info")


@dataclass(frozen=True)
class RunnerFile:
    """A test-runner file of the repository at `base_commit` (`is_runner_file`)."""

    path: str
    """Path relative to the repository root (POSIX)."""
    data: bytes | None
    """The file's content; None for a symbolic link."""
    link: str | None = None
    """A symbolic link's target (the link is restored as a link)."""


RUNNER_FILE_MAX_BYTES = 4 << 20
"""The largest test-runner file kept from `base_commit` (a bigger one is an error)."""


def runner_files(tree: str | Path) -> tuple[RunnerFile, ...]:
    """The test-runner files of a repository work tree that nothing has written since it was
    checked out (`.git` skipped; nothing followed)."""
    root = Path(tree)
    found: list[RunnerFile] = []
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root and ".git" in dirnames:
            dirnames.remove(".git")
        for name in filenames:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if not is_runner_file(rel):
                continue
            if full.is_symlink():
                found.append(RunnerFile(rel, None, os.readlink(full)))
            elif full.is_file():
                if full.stat().st_size > RUNNER_FILE_MAX_BYTES:
                    raise RepoError(f"{rel}: over {RUNNER_FILE_MAX_BYTES} bytes")
                found.append(RunnerFile(rel, full.read_bytes()))
    return tuple(sorted(found, key=lambda f: f.path))


def _find_runner_files() -> str:
    """A `find` over the work tree (not `.git`) printing every test-runner file, NUL-ended."""
    names = [*sorted(RUNNER_CONFIG_NAMES), "*.pth"]
    tests = " -o ".join(f"-name {shlex.quote(n)}" for n in names)
    tests += " -o -path '*.dist-info/entry_points.txt' -o -path '*.egg-info/entry_points.txt'"
    return f"find . -path ./.git -prune -o \\( -type f -o -type l \\) \\( {tests} \\) -print0"


def restore_runner_script(
    pristine: Sequence[RunnerFile], keep: Sequence[str], reset_failed: str
) -> str:
    """Shell lines (run in the repository root, just before the test command) that put every
    test-runner file back as it was at `base_commit`: those the commit has are rewritten from
    `pristine`, every other one is deleted. Paths in `keep` (the test patch's files) are left
    as the test patch made them. A failure prints `reset_failed` and exits 1."""
    kept = {f"./{p}" for p in keep}
    lines = [
        "# SWE grading owns its test runner: pytest's configuration, conftest.py files outside",
        "# the test patch, sitecustomize/usercustomize, .pth files and entry points come from",
        "# base_commit, whatever the model patch did to them.",
        "while IFS= read -r -d '' f; do",
    ]
    if kept:
        patterns = "|".join(shlex.quote(p) for p in sorted(kept))
        lines.append(f'  case "$f" in {patterns}) continue ;; esac')
    lines += [
        f'  rm -f -- "$f" || {{ echo {shlex.quote(reset_failed)}; exit 1; }}',
        f"done < <({_find_runner_files()})",
    ]
    fail = f"{{ echo {shlex.quote(reset_failed)}; exit 1; }}"
    for item in pristine:
        if f"./{item.path}" in kept:
            continue
        path = shlex.quote(item.path)
        parent = shlex.quote(str(PurePosixPath(item.path).parent))
        lines.append(f"mkdir -p -- {parent} && rm -rf -- {path} || {fail}")
        if item.data is None:
            lines.append(f"ln -s -- {shlex.quote(item.link or '')} {path} || {fail}")
            continue
        encoded = base64.b64encode(item.data).decode()
        tag = _heredoc(encoded)
        lines.append(f"base64 -d > {path} <<'{tag}' || {fail}\n{encoded}\n{tag}")
    return "\n".join(lines) + "\n"


GIT_METADATA = (".git/config", ".git/info/attributes", ".git/objects/info/alternates")
"""Text files of a repository's git directory that make git run commands (config: filters,
diff drivers, includes) or read other objects (alternates): put back as the checkout had them
after the model patch is applied (`patch -p1` writes paths git apply refuses)."""


def git_metadata(tree: str | Path) -> tuple[RunnerFile, ...]:
    """The `GIT_METADATA` files of a work tree nothing has written since its checkout."""
    root = Path(tree)
    found = []
    for rel in GIT_METADATA:
        path = root / rel
        if path.is_file() and not path.is_symlink():
            if path.stat().st_size > RUNNER_FILE_MAX_BYTES:
                raise RepoError(f"{rel}: over {RUNNER_FILE_MAX_BYTES} bytes")
            found.append(RunnerFile(rel, path.read_bytes()))
    return tuple(found)


def restore_git_metadata_script(pristine: Sequence[RunnerFile]) -> str:
    """Shell lines (in the repository root) that rewrite the `GIT_METADATA` files from
    `pristine` and delete those it lacks; exit status non-zero on failure."""
    have = {f.path: f for f in pristine}
    lines = ["set -e"]
    for rel in GIT_METADATA:
        path = shlex.quote(rel)
        lines.append(f"rm -rf -- {path}")
        item = have.get(rel)
        if item is not None and item.data is not None:
            encoded = base64.b64encode(item.data).decode()
            tag = _heredoc(encoded)
            lines += [
                f"mkdir -p -- {shlex.quote(str(PurePosixPath(rel).parent))}",
                f"base64 -d > {path} <<'{tag}'\n{encoded}\n{tag}",
            ]
    return "\n".join(lines) + "\n"


def with_runner_restore(script: str, restore: str, start_marker: str) -> str:
    """`script` with `restore` inserted just before its start-of-test-output marker line (at
    the end when it has none)."""
    lines = script.split("\n")
    for i, line in enumerate(lines):
        if start_marker in line:
            return "\n".join([*lines[:i], restore.rstrip("\n"), *lines[i:]])
    return script.rstrip("\n") + "\n" + restore


# ---- eval script ------------------------------------------------------------------------


def _heredoc(text: str) -> str:
    while True:
        tag = f"EOF_{secrets.token_hex(6)}"
        if tag not in text:
            return tag


def instance_test_command(instance: SWEInstance) -> str:
    """The command line that runs the instance's tests (without output redirection)."""
    cmd = instance.test_cmd or _KNOWN_TEST_CMDS.get(instance.repo, DEFAULT_TEST_CMD)
    directives = instance.test_directives
    if directives is None:
        directives = instance.test_targets
        if instance.repo == "django/django" and instance.test_cmd is None:
            directives = [
                d.removeprefix("tests/").removesuffix(".py").replace("/", ".") for d in directives
            ]
    return " ".join([cmd, *(shlex.quote(d) for d in directives)])


def build_eval_script(
    instance: SWEInstance,
    *,
    workdir: str,
    existing_test_files: Sequence[str] | None = None,
    activate: str = "",
) -> str:
    """The bash script that resets the test files, applies the test patch, and runs the tests.

    `existing_test_files` are the test-patch files present at `base_commit` (reset with
    `git checkout`); the others are deleted before the test patch creates them. None: all
    are taken to exist.
    """
    c = grading.constants()
    files = instance.test_files
    existing = list(files if existing_test_files is None else existing_test_files)
    new = [f for f in files if f not in existing]
    quoted = " ".join(shlex.quote(f) for f in existing)
    base = shlex.quote(instance.base_commit)
    lines = [
        "#!/bin/bash",
        "set -uo pipefail",
        f"cd {shlex.quote(workdir)}",
        *([activate] if activate else []),
        "git -c core.fileMode=false status --short",
        f"git -c core.fileMode=false diff --stat {base}",
    ]
    if existing:
        lines.append(
            f"git checkout -q {base} -- {quoted} || {{ echo '{c.RESET_FAILED}'; exit 1; }}"
        )
    if new:
        lines.append("rm -rf -- " + " ".join(shlex.quote(f) for f in new))
    if instance.test_patch.strip():
        tag = _heredoc(instance.test_patch)
        patch = (
            instance.test_patch
            if instance.test_patch.endswith("\n")
            else instance.test_patch + "\n"
        )
        lines += [
            f"git apply -v - <<'{tag}' || {{ echo '{c.RESET_FAILED}'; exit 1; }}",
            patch + tag,
        ]
    lines += [
        f"echo '{c.START_TEST_OUTPUT}'",
        instance_test_command(instance),
        "status=$?",
        f"echo '{c.END_TEST_OUTPUT}'",
        f'echo "{c.TEST_EXIT_CODE}: $status"',
    ]
    if existing:
        lines.append(f"git checkout -q {base} -- {quoted}")
    return "\n".join(lines) + "\n"


_CONDA = (
    "if [ -f /opt/miniconda3/bin/activate ]; then "
    "source /opt/miniconda3/bin/activate && conda activate testbed; fi"
)


def docker_image(instance: SWEInstance) -> str:
    """The instance's image: its `image` field, else the official Docker Hub name."""
    if instance.image:
        return instance.image
    return (
        f"swebench/sweb.eval.x86_64.{instance.instance_id.replace('__', '_1776_')}:latest".lower()
    )


# ---- one instance -----------------------------------------------------------------------


class _Log:
    def __init__(self, log_dir: Path | None):
        self.dir = log_dir
        self.lines: list[str] = []
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)

    def __call__(self, message: str) -> None:
        self.lines.append(f"[{time.strftime('%H:%M:%S')}] {message}")
        self.write("run_instance.log", "\n".join(self.lines) + "\n")

    def write(self, name: str, text: str) -> Path | None:
        if self.dir is None:
            return None
        path = self.dir / name
        path.write_text(text, encoding="utf-8", errors="replace")
        return path


class _Skip(BackendUnavailable):
    pass


def _docker_workspace(image: str, dest: Path) -> None:
    """Copy `/testbed` out of a local image into `dest` (nothing is pulled)."""
    import io
    import tarfile

    from skyrl_sdk.sandboxes.docker_backend import docker_client

    try:
        client = docker_client()
    except BackendUnavailable as e:
        raise _Skip(f"docker backend unavailable: {e}") from None
    import docker.errors

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise _Skip(f"docker image {image} is not on the engine (nothing is pulled)") from None
    container = client.containers.create(image, "true")
    try:
        stream, _ = container.get_archive(TESTBED)
        data = b"".join(stream)
    finally:
        container.remove(force=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            member.name = member.name.partition("/")[2]
        tar.extractall(dest, members=[m for m in tar.getmembers() if m.name], filter="tar")


def prepare_workspace(
    instance: SWEInstance, workspace: str | Path, config: HarnessConfig
) -> tuple[SandboxSpec, str]:
    """Fill the host directory `workspace` with the repository at `base_commit`.

    Returns the spec of a sandbox that mounts it at /testbed, and the shell line that
    activates the tests' environment (docker images: their conda env; else empty).
    Raises `RepoError`, or `BackendUnavailable` when the backend or image is missing.
    """
    common: dict[str, Any] = {
        "workspace_dir": str(workspace),
        "workdir": TESTBED,
        "network": False,
        "memory_bytes": config.memory_bytes,
        "pids": config.pids,
        "timeout_s": config.apply_timeout_s,
        "start_timeout_s": 60.0,
    }
    if config.backend == Backend.DOCKER:
        _docker_workspace(docker_image(instance), Path(workspace))
        return SandboxSpec(image=docker_image(instance), **common), _CONDA
    materialize(instance, workspace, repos_dir=config.repos_dir, allow_clone=config.allow_clone)
    if config.backend == Backend.LOCAL:  # trusted code only: the host's own interpreter
        return SandboxSpec(env=host_python_env(config.python), **common), ""
    # The sandbox's own python3 with a read-only directory of just the packages the tests
    # need: the project's venv (and the checkout it may point to) is never visible.
    packages = str(sandbox_packages(config.packages, config.python))
    runner = str(runner_plugin_dir())
    env = {"PYTHONPATH": packages, "PYTHONDONTWRITEBYTECODE": "1"}
    return SandboxSpec(env=env, ro_binds=(packages, runner), **common), ""


def grading_command_env(
    config: HarnessConfig, spec: SandboxSpec, workdir: str, test_command: str | None = None
) -> dict[str, str]:
    """The environment of the patch-apply and test commands (see the module docstring).

    bwrap: `grading_env` over the spec's variables. `PYTHONPATH` holds only the harness's
    read-only directories (the packages, then the runner plugin), never the repository, so
    nothing in it runs at interpreter start-up; pytest auto-loads no plugin
    (`PYTEST_DISABLE_PLUGIN_AUTOLOAD`), and `PYTEST_ADDOPTS` loads, by name, the package
    directory's own `pytest11` plugins and the harness's `skyrl_swe_runner`, which puts the repository (`SKYRL_SWE_REPO`) at the end of
    `sys.path` as a development install would, and turns the cache provider off. A
    `test_command` that is not pytest (django's and sympy's runners import the repository
    from their own path) keeps the repository on `PYTHONPATH`, as before.
    docker: the image's PATH is kept (its root is read-only; the eval script activates its
    conda env, whose installed plugins the repository's configuration may need); `HOME`
    moves off the repository and user site-packages are off.
    local (trusted code only): as bwrap, with the host interpreter's PATH kept.
    All: git runs no hooks or fsmonitor (`GIT_HARDENING`) and honours no replace refs.
    """
    spec_env = dict(spec.env)
    if config.backend == Backend.DOCKER:
        return {
            "HOME": GRADING_HOME,
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            **GIT_HARDENING,
            "GIT_NO_REPLACE_OBJECTS": "1",
        }
    env = grading_env(spec_env)
    env["GIT_NO_REPLACE_OBJECTS"] = "1"  # base_commit is base_commit, whatever refs/replace says
    for name in ("PYTEST_PLUGINS", "PYTEST_ADDOPTS", "PYTHONSTARTUP", "PYTHONHOME"):
        env.pop(name, None)
    paths = [spec_env.get("PYTHONPATH"), str(runner_plugin_dir())]
    if test_command is not None and "pytest" not in test_command:
        paths.append(workdir)
    env["PYTHONPATH"] = ":".join(p for p in paths if p)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    # The package directory's own plugins (HarnessConfig.packages may add some) by name.
    plugins = pytest_plugins_in(spec_env["PYTHONPATH"]) if spec_env.get("PYTHONPATH") else ()
    loads = " ".join(f"-p {m}" for m in (RUNNER_PLUGIN, *plugins))
    env["PYTEST_ADDOPTS"] = f"{loads} -p no:cacheprovider"
    env["SKYRL_SWE_REPO"] = workdir
    if config.backend == Backend.LOCAL:
        env["PATH"] = spec_env.get("PATH", DEFAULT_PATH)
    return env


async def _run(sb: Sandbox, argv: list[str], **kwargs: Any) -> ExecResult:
    """`sb.exec`; on bwrap every other process of the sandbox is killed the moment the command
    exits (`end_all`), so nothing a git filter or the patch tools started lives on into the
    next step."""
    if isinstance(sb, BwrapSandbox):
        return await sb.exec(argv, end_all=True, **kwargs)
    return await sb.exec(argv, **kwargs)


async def _apply_patch(
    sb: Sandbox, patch_path: str, timeout: float, log: _Log, env: dict[str, str] | None = None
) -> str | None:
    """Apply the patch at `patch_path` with the fallback chain; the command that worked."""
    last = ""
    for attempt, command in enumerate(APPLY_COMMANDS):
        if attempt:
            await _run(sb, ["bash", "-c", RESET_TREE], timeout=timeout, env=env)
        result = await _run(sb, ["bash", "-c", f"{command} {patch_path}"], timeout=timeout, env=env)
        if result.ok:
            log(f"applied with `{command}`:\n{result.output.strip()}")
            return command
        last = result.output.strip()
        log(f"`{command}` failed (exit {result.exit_code}):\n{last[-3000:]}")
    await _run(sb, ["bash", "-c", RESET_TREE], timeout=timeout, env=env)
    check = await _run(
        sb, ["git", "apply", "--check", "--reverse", patch_path], timeout=timeout, env=env
    )
    if check.ok:
        log("patch already applied (git apply --check --reverse)")
        return "already applied"
    return None


async def evaluate_instance(
    instance: SWEInstance,
    prediction: Prediction,
    config: HarnessConfig | None = None,
    log_dir: str | Path | None = None,
) -> InstanceResult:
    """Evaluate one prediction; never raises for the instance's own failures."""
    config = config or HarnessConfig()
    t0 = time.perf_counter()
    log = _Log(Path(log_dir) if log_dir is not None else None)
    iid = instance.instance_id

    def done(outcome: Outcome, **kw: Any) -> InstanceResult:
        if kw.get("error"):
            log(f"{outcome.value}: {kw['error']}")
        return InstanceResult(
            iid,
            outcome,
            prediction.model_name_or_path,
            duration_s=time.perf_counter() - t0,
            log_dir=str(log.dir) if log.dir else None,
            **kw,
        )

    if prediction.is_empty:
        return done(Outcome.EMPTY_PATCH)
    log.write("patch.diff", prediction.model_patch or "")
    prefix = f"skyrl-swe-{safe_name(iid)[:40]}-"
    owned: Workspace | None = None
    if config.keep_workspaces:  # for debugging: a plain directory that outlives the run
        workspace = Path(tempfile.mkdtemp(prefix=prefix))
    else:  # size-capped, and reaped even if this process is SIGKILLed
        owned = Workspace.create(prefix, disk_bytes=config.disk_bytes)
        workspace = owned.path
    try:
        # The tests get what is left of the instance's time; the outer limit adds a grace
        # period so a timed-out test run is still graded and logged.
        deadline = t0 + config.timeout_s
        async with asyncio.timeout(config.timeout_s + 30):
            return await _evaluate_in_sandbox(
                instance, prediction, config, workspace, log, done, deadline
            )
    except TimeoutError:
        log.write("test_output.txt", f"{grading.constants().TESTS_TIMEOUT}\n")
        return done(
            Outcome.TIMEOUT,
            error=f"instance exceeded {config.timeout_s:g}s",
            stop_reason=StageStop.VERIFIER_TIMEOUT,
        )
    except _Skip as e:
        return done(Outcome.SKIPPED, error=str(e))
    except BackendUnavailable as e:
        return done(Outcome.SKIPPED, error=f"{config.backend} backend unavailable: {e}")
    except RepoError as e:
        return done(Outcome.ERROR, error=str(e))
    except Exception as e:  # an instance's failure never stops the run
        return done(Outcome.ERROR, error=f"{type(e).__name__}: {e}")
    finally:
        if owned is not None:
            owned.close()


def _eval_script(
    instance: SWEInstance,
    config: HarnessConfig,
    workdir: str,
    existing: Sequence[str] | None,
    activate: str,
    pristine: Sequence[RunnerFile],
    log: _Log,
) -> str:
    """The eval script run in the grading sandbox (written to the log as eval.sh): the
    instance's tests, preceded by the restore of the test runner's pristine files."""
    c = grading.constants()
    script = build_eval_script(
        instance, workdir=workdir, existing_test_files=existing, activate=activate
    )
    if config.backend == Backend.DOCKER and instance.eval_script:
        script = instance.eval_script
        if c.TEST_EXIT_CODE not in script:
            log("note: the instance's eval script does not record the test exit code")
    restore = restore_runner_script(pristine, instance.test_files, c.RESET_FAILED)
    script = with_runner_restore(script, restore, c.START_TEST_OUTPUT)
    log.write("eval.sh", script)
    return script


async def _report(
    instance: SWEInstance,
    prediction: Prediction,
    workspace: Path,
    out_rel: str,
    result: ExecResult,
    log: _Log,
) -> dict[str, Any]:
    """Grade the test output the closed sandbox left at `out_rel` (read as a regular file,
    size-capped, never through a link); written to the log as test_output.txt and report.json."""
    c = grading.constants()
    try:
        raw = await asyncio.to_thread(
            read_regular_file, out_rel, max_bytes=TEST_OUTPUT_MAX_BYTES, under=workspace
        )
        output = raw.decode("utf-8", "replace")
    except (UnsafeFileError, OSError) as e:
        output = f"[test output unreadable: {type(e).__name__}: {e.strerror or e}]\n"
    if result.timed_out:
        output += f"\n{c.TESTS_TIMEOUT}\n"
    path = log.write("test_output.txt", output)
    if path is None:
        tmp = workspace.parent / f"{workspace.name}.test_output.txt"
        tmp.write_text(output, encoding="utf-8")
        path = tmp
    try:
        report = await asyncio.to_thread(grading.eval_report, instance, prediction, path)
    finally:
        if log.dir is None:
            path.unlink(missing_ok=True)
    if log.dir is not None:
        log.write("report.json", json.dumps({instance.instance_id: report}, indent=2) + "\n")
    return report


async def _prepare(
    instance: SWEInstance, config: HarnessConfig, workspace: Path, log: _Log
) -> tuple[SandboxSpec, str, tuple[RunnerFile, ...], tuple[RunnerFile, ...], list[str] | None]:
    """The workspace at `base_commit` and what is read from it before the patch touches it:
    (the grading sandbox's spec, the activate line, the runner's pristine files, the .git
    metadata, the test files that exist at base_commit; None with docker)."""
    spec, activate = await asyncio.to_thread(prepare_workspace, instance, workspace, config)
    spec = replace(spec, grading=True)
    log(f"workspace for {instance.repo}@{instance.base_commit[:12]} ready ({config.backend})")
    # Read before the patch touches the tree: the test runner's files as base_commit has them.
    pristine = await asyncio.to_thread(runner_files, workspace)
    git_meta = await asyncio.to_thread(git_metadata, workspace)
    if config.backend == Backend.DOCKER:
        existing = None
    else:
        existing = await asyncio.to_thread(
            path_exists_at, workspace, instance.base_commit, instance.test_files
        )
    return spec, activate, pristine, git_meta, existing


async def _evaluate_in_sandbox(
    instance: SWEInstance,
    prediction: Prediction,
    config: HarnessConfig,
    workspace: Path,
    log: _Log,
    done: Callable[..., InstanceResult],
    deadline: float,
) -> InstanceResult:
    c = grading.constants()
    prepared = await _prepare(instance, config, workspace, log)
    spec, activate, pristine, git_meta, existing = prepared
    # Created only after the patch is applied, under a name it could not know: the log the
    # host reads back once the sandbox is closed.
    out_rel = f".skyrl-grading-{secrets.token_hex(8)}/test_output.txt"
    notes: list[str] = []
    async with create_sandbox(spec, config.backend) as sb:
        if sb.grading_isolation is GradingIsolation.SINGLE_UID:
            notes.append(SINGLE_UID_NOTE)
        env = grading_command_env(config, spec, sb.workdir, instance_test_command(instance))
        scratch = f"/tmp/skyrl-swe-{secrets.token_hex(4)}"
        patch_path = f"{scratch}/patch.diff"
        patch = prediction.model_patch or ""
        await sb.write_file(patch_path, patch if patch.endswith("\n") else patch + "\n")
        applied = await _apply_patch(sb, patch_path, config.apply_timeout_s, log, env)
        if applied is None:
            log.write("test_output.txt", f"{c.APPLY_PATCH_FAIL}\n")
            return done(
                Outcome.PATCH_APPLY_FAILED, error="the patch does not apply", notes=tuple(notes)
            )
        # `patch -p1` writes what git apply refuses, .git/config included: its filters and
        # diff drivers would run in the eval script's git commands.
        fixed = await _run(
            sb,
            ["bash", "-c", restore_git_metadata_script(git_meta)],
            timeout=config.apply_timeout_s,
            cwd=sb.workdir,
            env=env,
        )
        if not fixed.ok:
            return done(
                Outcome.ERROR,
                error=f"cannot restore .git metadata: {fixed.output[-500:]}",
                notes=tuple(notes),
            )
        script = _eval_script(instance, config, sb.workdir, existing, activate, pristine, log)
        await sb.write_file(f"{scratch}/eval.sh", script)
        out_dir = shlex.quote(os.path.dirname(out_rel))
        result = await _run(
            sb,
            [
                "bash",
                "-c",
                f"mkdir {out_dir} && bash {scratch}/eval.sh > {shlex.quote(out_rel)} 2>&1",
            ],
            timeout=max(1.0, deadline - time.perf_counter()),
            cwd=sb.workdir,
            env=env,
        )
    # The sandbox is closed: nothing the tests started still runs to rewrite the log.
    report = await _report(instance, prediction, workspace, out_rel, result, log)
    if result.timed_out:
        return done(
            Outcome.TIMEOUT,
            apply_command=applied,
            report=report,
            error="tests timed out",
            notes=tuple(notes),
            stop_reason=StageStop.VERIFIER_TIMEOUT,
        )
    outcome = Outcome.RESOLVED if report.get("resolved") else Outcome.UNRESOLVED
    log(f"{outcome.value} (exit code {result.exit_code})")
    problem = None
    if not report.get("patch_successfully_applied"):
        problem = "the test output could not be graded (see test_output.txt)"
    return done(outcome, apply_command=applied, report=report, error=problem, notes=tuple(notes))


# ---- a run ------------------------------------------------------------------------------


def make_report(
    instances: Sequence[SWEInstance],
    predictions: Mapping[str, Prediction],
    results: Sequence[InstanceResult],
) -> dict[str, Any]:
    """The summary report: the official keys, plus outcomes and reasons per instance."""
    by_id = {r.instance_id: r for r in results}
    ids = [i.instance_id for i in instances]

    def having(*outcomes: Outcome) -> list[str]:
        return sorted(i for i in ids if i in by_id and by_id[i].outcome in outcomes)

    completed = sorted(i for i in ids if i in by_id and by_id[i].outcome.completed)
    resolved = having(Outcome.RESOLVED)
    errors = having(Outcome.ERROR, Outcome.TIMEOUT, Outcome.PATCH_APPLY_FAILED)
    skipped = having(Outcome.SKIPPED)
    incomplete = sorted({i for i in ids if i not in by_id} | set(skipped))
    empty = having(Outcome.EMPTY_PATCH)
    submitted = sorted(i for i in ids if i in predictions)
    return {
        "total_instances": len(ids),
        "submitted_instances": len(submitted),
        "completed_instances": len(completed),
        "resolved_instances": len(resolved),
        "unresolved_instances": len(having(Outcome.UNRESOLVED)),
        "empty_patch_instances": len(empty),
        "error_instances": len(errors),
        "completed_ids": completed,
        "incomplete_ids": incomplete,
        "empty_patch_ids": empty,
        "submitted_ids": submitted,
        "resolved_ids": resolved,
        "unresolved_ids": having(Outcome.UNRESOLVED),
        "error_ids": errors,
        "schema_version": SCHEMA_VERSION,
        "patch_apply_failed_ids": having(Outcome.PATCH_APPLY_FAILED),
        "timeout_ids": having(Outcome.TIMEOUT),
        "skipped_ids": skipped,
        "resolved_rate": len(resolved) / len(ids) if ids else 0.0,
        "reasons": {r.instance_id: r.error for r in results if r.error},
        # Which stage's limit ended an instance (agent_timeout, verifier_timeout).
        "stop_reasons": {r.instance_id: r.stop_reason.value for r in results if r.stop_reason},
        "instances": {r.instance_id: r.to_json() for r in results},
    }


@dataclass(frozen=True)
class RunResult:
    """What `run_evaluation` produced."""

    report: dict[str, Any]
    """The summary written to `report.json`."""
    results: list[InstanceResult]
    """One result per evaluated instance, in input order."""
    report_path: Path
    """Where the report is."""


def safe_name(text: str) -> str:
    """A file-name-safe version of an id."""
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in text) or "_"


async def run_evaluation(
    instances: Sequence[SWEInstance],
    predictions: Mapping[str, Prediction],
    out_dir: str | Path,
    config: HarnessConfig | None = None,
    *,
    on_done: Callable[[InstanceResult], None] | None = None,
) -> RunResult:
    """Evaluate every instance that has a prediction; write `out_dir/report.json` and logs."""
    config = config or HarnessConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gate = asyncio.Semaphore(max(1, config.workers))
    todo = [i for i in instances if i.instance_id in predictions]

    async def one(instance: SWEInstance) -> InstanceResult:
        async with gate:
            log_dir = out / "logs" / safe_name(instance.instance_id)
            result = await evaluate_instance(
                instance, predictions[instance.instance_id], config, log_dir
            )
        if on_done is not None:
            on_done(result)
        return result

    results = list(await asyncio.gather(*(one(i) for i in todo)))
    report = make_report(instances, predictions, results)
    path = write_json(out / "report.json", report)
    return RunResult(report, results, path)


def write_json(path: Path, data: Any) -> Path:
    """Write JSON atomically (a reader never sees half a file)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
