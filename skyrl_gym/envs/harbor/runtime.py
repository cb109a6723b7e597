"""Run one Harbor trial's environment in our sandboxes: agent phase, then verifier phase.

Inside the environment the usual Harbor paths exist: the task's working directory (`/app`
by convention), `/logs/agent`, `/logs/verifier`, `/logs/artifacts`, `/solution` (oracle only)
and, for the verifier phase only, `/tests`.

Grading follows Harbor's verifier, with stricter rules, because an agent trained with RL will
find any way to raise its reward:

- The agent's sandbox is closed first (every process it left is killed), then a fresh sandbox
  opens on the same working directory with an empty `/logs/verifier` and the task's `tests/`
  uploaded only now, so nothing the agent wrote under `/logs/verifier` (or leaves running)
  can count.
- `test.sh` runs from a process environment the agent never wrote (`verifier_env`): `HOME` is
  the verifier sandbox's fresh `/tmp`, not the working directory (so a `usercustomize.py` or
  `.pth` left in `~/.local/lib/python3.X/site-packages` is never loaded), user site-packages
  are off (`PYTHONNOUSERSITE`), `PYTHONSAFEPATH` keeps the current directory (`/app`) and a
  script's directory off `sys.path` (so `/app/json.py` does not shadow the standard library),
  and every directory the agent could write (the working directory, `/logs`, `/tmp`) is
  dropped from the task's `PATH`, `PYTHONPATH`, `LD_LIBRARY_PATH` and similar variables.
- When `test.sh` ends, the verifier sandbox is closed (whatever it started is killed) before
  the host reads anything back; the reward files and `test-stdout.txt` are read without
  following symlinks, as regular files only, size-capped (a `reward.txt` that is a symlink to
  a host file is an error, `reward_file_unsafe`, and its target is never read), and
  `copy_logs` copies symlinks as links.
- The trial's scratch directory (working directory, logs, tests) is a `Workspace`: capped at
  `[environment].storage_mb` (else `DEFAULT_DISK_BYTES`), recorded so it is reaped after a
  SIGKILL.
- A task folder cannot harm the host (`harbor.host`): `memory_mb`, `storage_mb` and `cpus`
  are clamped to host-sized maxima (timeouts to a day, by `load_task`), each with a note;
  Dockerfile COPY and /solution are copied by a child process that joins the started
  sandbox's cgroups first (the tmpfs pages it writes count against the sandbox's memory
  cap), keep sparse files sparse and follow no link a RUN step left in the workspace.

Reward files come from the verifier alone. No `reward.json` or `reward.txt` is in
`/logs/verifier` when test.sh starts (bwrap binds a fresh host folder; docker removes them
in the container first). The reward comes from `reward.json` (a flat object of numbers: its
`reward`, other keys as metrics) or `reward.txt` (one number); when both exist they must
agree (reward.json's reward within `REWARD_AGREEMENT_TOLERANCE` of reward.txt's number),
else the trial is void, `reward_files_disagree`: a task writes one verdict, so a second that
differs was written by an agent program test.sh ran.

With two-uid grading (`GradingIsolation.TWO_UID`: bwrap as root, the exec shim built) the
verifier is uid 0 of its own user namespace (host `VERIFIER_HOST_UID`) and the programs it
execs from the agent's paths (an interpreter given such a script, git and make in the
agent's tree) run as `AGENT_UID`. `/tests` and `/logs/verifier` are the verifier's before
test.sh starts (0755), so those programs can write neither; afterwards a reward file counts
only if the verifier's uid owns it in a directory no other uid can write, else the trial is
void, `reward_file_foreign` (e.g. a test.sh that opened /logs/verifier to everyone). Without
a second uid (not root, no compiler for the shim, docker) the programs run with the
verifier's uid: the owner rule cannot tell their files from test.sh's, and the trial gets
the `single_uid` note (`SINGLE_UID_NOTE`; `VerifierResult.isolation` says which). Code the
verifier runs in-process (an imported module, a sourced script, pytest's conftest.py) always
has the verifier's uid.

As in Harbor, test.sh's exit status is otherwise ignored, with two exceptions for a test.sh
that runs the agent's programs (with one uid they share its powers):

- `exec` makes test.sh the command server's own child, so its status is exact: a test.sh
  that did not end on its own (a signal killed it, not the timeout) gives no reward
  (`verifier_killed`), whatever reward file it left; a program can no longer write reward 1
  and then kill test.sh.
- The moment test.sh exits, the server (the sandbox's PID 1) kills every process it left
  running and counts them (`VerifierResult.left_running`): the reward files are frozen as
  they were at its exit. It also counts the orphans it reaped meanwhile (processes that
  outlived their parent: `VerifierResult.orphaned`). A task that sets `[verifier]
  require_exit_zero = true` (our extension; or `HarborRuntime(require_exit_zero=True)`)
  counts the reward only when test.sh exited 0 and nothing it started outlived its parent
  (`verifier_exit_nonzero`, `verifier_stray_processes`): a program that detached to rewrite
  reward.txt after the verdict earns nothing, whether it was still running at test.sh's exit
  or had ended just before. Without it, such a writer still forges the reward: Harbor's
  semantics cannot tell it from a server a test.sh legitimately left behind.
- In the grading sandbox `/tests/test.sh` is read-only (bash reads a script as it runs it: a
  program could otherwise append its own verdict), and under `require_exit_zero` all of
  `/tests` is (no test file, helper or expected output replaced, no conftest.py planted);
  without it `/tests` stays writable as in Harbor.
- The grading sandbox's /proc is read-only, so no process opens /proc/PID/mem for writing:
  a program cannot rewrite test.sh's memory to make it exit 0 with its own verdict (ptrace
  and process_vm_writev are refused by the seccomp filter).

What a task author must still do: the verifier can only be as safe as `test.sh` is. Never
import or execute the agent's files in a way that lets them change the grading: do not put
`/app` on `sys.path` or `PATH` for the checker itself (import the agent's module in a
subprocess, or load it by path as data), do not `source` files from `/app`, and treat what you
read there as data. If the check runs the agent's programs, run them first (with a timeout),
make sure none is left running (with one uid they could rewrite `/logs/verifier`), write the
reward file last, with a fixed path and plain `open(..., "w")`, run git with
`-c core.hooksPath=/dev/null -c core.fsmonitor=false`, end with `exit 0`, and set
`[verifier] require_exit_zero = true`. `skyrl harbor lint` flags the known forgeable
patterns.

Backends:
- `bwrap`: the host's root filesystem read-only (or `rootfs`); the Dockerfile is read, not
  built (see `dockerfile.plan_dockerfile`), and what could not be applied is in `notes`.
- `docker`: `docker_image` when the engine has it (pulled only with `pull`), else the
  Dockerfile built on the local engine (see `docker_image.task_image`); a read-only image
  root with bwrap's layout of writable directories (the top of the working directory, the
  Dockerfile's other COPY targets: `docker_image.docker_layout`), each seeded from the image.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import io
import json
import math
import os
import re
import shutil
import signal
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from skyrl_gym.envs.harbor.dockerfile import (
    DockerfilePlan,
    SetupStep,
    StepKind,
    inside,
    match_sources,
    plan_dockerfile,
    writable_roots,
    write_dirs,
)
from skyrl_gym.envs.harbor.errors import TaskEnvironmentError
from skyrl_gym.envs.harbor.host import (
    CopyError,
    CopyJob,
    HostMaxima,
    charged_copy,
    clamp_task_sizes,
    copy_untrusted_tree,
)
from skyrl_gym.envs.harbor.task import DEFAULT_WORKDIR, HarborTask, NetworkMode, TaskStep
from skyrl_gym.envs.harbor.task_root import BuiltRoot, build_task_root
from skyrl_gym.envs.harbor.task_root import base_for as task_base_for
from skyrl_sdk.sandboxes import (
    DEFAULT_DISK_BYTES,
    VERIFIER_HOST_UID,
    Backend,
    GradingIsolation,
    Sandbox,
    SandboxError,
    SandboxSpec,
    UnsafeFileError,
    Workspace,
    chown_tree,
    grading_env,
    read_regular_file,
)
from skyrl_sdk.sandboxes.bwrap import BwrapSandbox, mount_targets
from skyrl_sdk.sandboxes.cow_root import CowRoot
from skyrl_sdk.sandboxes.cow_root import layout as cow_layout
from skyrl_sdk.sandboxes.cow_root import supported as cow_supported
from skyrl_sdk.sandboxes.spec import DEFAULT_PATH

LOGS = "/logs"
AGENT_LOGS = "/logs/agent"
VERIFIER_LOGS = "/logs/verifier"
ARTIFACTS = "/logs/artifacts"
TESTS = "/tests"
SOLUTION = "/solution"
SANDBOX_UID = 65534  # bwrap sandboxes started by root run as `nobody`
# Set to `binds` to run bwrap trials on read-only system binds, not a copy-on-write root.
ROOT_MODE_ENV = "SKYRL_HARBOR_ROOT"
NO_LIMIT_S = 7 * 24 * 3600.0
_OUTPUT_TAIL = 4000
DEFAULT_MEMORY_BYTES = 2048 << 20
"""The memory cap of a task that sets no `memory_mb` (at most `HostMaxima.memory_bytes`)."""
REWARD_MAX_BYTES = 1 << 20
"""The most of reward.json / reward.txt the host reads (a larger file is a parse error)."""
LOG_FILE_MAX_BYTES = 64 << 20
"""`copy_logs` copies at most this much of one file (the rest is cut, and noted)."""
LOGS_MAX_BYTES = 256 << 20
"""`copy_logs` copies at most this much in all."""

# Environment variables that name code to load or run: in the verifier, their entries that
# lie in a directory the agent could write are dropped.
CODE_PATH_VARS = (
    "PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "BASH_ENV",
    "ENV",
    "PERL5LIB",
    "PERLLIB",
    "RUBYLIB",
    "NODE_PATH",
    "GEM_HOME",
    "GEM_PATH",
    "CLASSPATH",
)


SINGLE_UID_NOTE = (
    "single_uid: the verifier sandbox had no second uid (not root, no exec shim, or the docker "
    "backend), so the programs test.sh ran had the verifier's uid: a reward file they wrote "
    "cannot be told from test.sh's own (only reward.json and reward.txt disagreeing is caught)"
)
"""The note a trial gets when its verifier sandbox had `GradingIsolation.SINGLE_UID`."""


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


class _BoundBwrap(BwrapSandbox):
    """A bwrap sandbox with extra host paths bound at given paths (read-write `binds`, then
    read-only `ro_binds`, which may lie inside them). A grading one (`spec.grading`) has a
    read-only /proc and, as root, a uid of its own for the verifier (`GradingIsolation`).
    `mount_at`: where the workspace is mounted, a directory above `spec.workdir` (the cwd), as
    a container's `WORKDIR /app` ... `WORKDIR /app/sub` keeps /app (None: at `spec.workdir`)."""

    def __init__(
        self,
        spec: SandboxSpec,
        binds: Mapping[str, Path],
        *,
        ro_binds: Mapping[str, Path] | None = None,
        mount_at: str | None = None,
    ):
        super().__init__(spec)
        self._binds = dict(binds)
        self._ro_binds = dict(ro_binds or {})
        self._mount_at = mount_at

    def _server_argv(self, workspace: Path, python_args: list[str]) -> list[str]:
        argv = super()._server_argv(workspace, python_args)
        at = argv.index("--chdir")
        if self._mount_at is not None and argv[at - 3 : at] == [
            "--bind",
            str(workspace),
            self.spec.workdir,
        ]:
            argv[at - 1] = self._mount_at
        extra = [
            a
            for inside_path, host in self._binds.items()
            for a in ("--bind", str(host), inside_path)
        ]
        extra += [
            a
            for inside_path, host in self._ro_binds.items()
            for a in ("--ro-bind", str(host), inside_path)
        ]
        if self.cow_root is not None:  # mount points in a root-owned root: made by root now
            self.cow_root.make_mountpoints(mount_targets(extra))
            logs = self.cow_root.upper_of(LOGS)
            if logs.is_dir() and not logs.is_symlink():
                # Two-uid grading: /logs is the verifier's alone (0700), as bwrap made it in
                # the read-only layout, so the agent's programs cannot even read a verdict.
                two_uid = self.spec.grading and self._grading_tools is not None
                owner = VERIFIER_HOST_UID if two_uid else 0
                os.chown(logs, owner, owner, follow_symlinks=False)
                logs.chmod(0o700 if two_uid else 0o755)
        return argv[:at] + extra + argv[at:]

    def charge_files(self) -> list[Path]:
        """The sandbox's `cgroup.procs` files: a host process that writes its pid there is
        charged to the sandbox's memory, pids and CPU caps (how set-up copies are)."""
        return self._cgroups.procs_files()

    def oom_kill_count(self) -> int:
        """How many processes the sandbox's memory cgroup has killed so far."""
        return self._cgroups.oom_kills()


def _give(path: Path) -> None:
    """Hand a host tree to the sandbox user (bwrap as root runs commands as `nobody`)."""
    if os.geteuid() == 0:
        chown_tree(path, SANDBOX_UID)


def _fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    path.chmod(0o755)
    _give(path)
    return path


@dataclass
class HarborRuntime:
    """The environment of one trial. `start()`, act in `sandbox`, `verify()`, `close()`."""

    task: HarborTask
    """The task being run."""
    backend: Backend = Backend.BWRAP
    """`bwrap` or `docker`."""
    rootfs: str | None = None
    """bwrap: a root filesystem to use instead of the host's."""
    network: bool | None = None
    """Force network on/off (None: the task's `network_mode`)."""
    exec_timeout_s: float = 600.0
    """Default limit of one command."""
    notes: list[str] = field(default_factory=list)
    """What of the task's environment could not be applied, one line each."""
    sandbox: Sandbox | None = None
    """The agent phase's sandbox (None before `start` and after the agent phase)."""
    verifier_result: VerifierResult | None = None
    """Set once `verify` has run."""
    disk_bytes: int | None = None
    """Size cap of the trial's scratch directory (working directory, logs, tests); None: the
    task's `[environment].storage_mb`, else `DEFAULT_DISK_BYTES`."""
    require_exit_zero: bool | None = None
    """Count the reward only when test.sh exited 0 and nothing it started outlived its parent
    (True), or as Harbor does whatever its exit status (False); None: the task's
    `[verifier].require_exit_zero`. A killed test.sh voids the reward either way."""
    pull: bool = False
    """docker: pull `[environment].docker_image` (and the Dockerfile's FROM images) when the
    engine lacks them (`skyrl harbor run --pull`); never without it."""

    def __post_init__(self) -> None:
        self.backend = Backend(self.backend)
        if self.backend is Backend.LOCAL:
            raise ValueError("Harbor tasks need an isolated backend: bwrap or docker")
        # A task folder is untrusted: its sizes are clamped to the host, with a note.
        self.notes.extend(self.task.notes)
        self._maxima = HostMaxima.detect()
        self._sizes = clamp_task_sizes(self.task.environment, self._maxima)
        self.notes.extend(self._sizes.notes)
        if self.disk_bytes is None:
            storage = self._sizes.storage_mb
            default = min(DEFAULT_DISK_BYTES, self._maxima.disk_bytes)  # a small host too
            self.disk_bytes = storage << 20 if storage else default
        # Recorded with its owner before it exists: reaped even after a SIGKILL.
        self._workspace = Workspace.create("skyrl-harbor-", disk_bytes=self.disk_bytes)
        self._work = self._workspace.path
        self._work.chmod(0o711)  # a bwrap sandbox running as nobody must traverse it
        self.workdir = self.task.environment.workdir or DEFAULT_WORKDIR
        self.mount_dir = self.workdir
        """bwrap: where `app_dir` is mounted (the working directory or a directory above it)."""
        self.roots: dict[str, Path] = {}
        """bwrap: the other writable directories the Dockerfile's layout needs (inside path ->
        host directory in the trial's workspace), mounted in both phases."""
        self._env: dict[str, str] = {}
        self._image: str | None = None
        self._shell = "bash"
        self._agent_phase_over = False
        self._closed = False
        self.solution_uploaded = False
        self.base_task: HarborTask | None = None  # a multi-step task, once `begin_step` ran
        self.cow: CowRoot | None = None
        """bwrap as root: the trial's copy-on-write root (`task_root`); None: the read-only
        system binds with writable mounts (not root, no overlayfs, `$SKYRL_HARBOR_ROOT=binds`)."""
        self.built_root: BuiltRoot | None = None
        """The task's built layer the copy-on-write root stands on (held until `close`)."""
        self._root_hold: contextlib.AbstractContextManager[Path] | None = None
        self._app: Path | None = None

    # ---- host paths ---------------------------------------------------------------------------

    @property
    def app_dir(self) -> Path:
        """Host directory holding the task's working directory (with a copy-on-write root:
        the trial's upper layer of it, i.e. what the trial changed there)."""
        return self._app if self._app is not None else self._work / "app"

    @property
    def agent_logs_dir(self) -> Path:
        """Host copy of /logs/agent."""
        return self._work / "logs" / "agent"

    @property
    def verifier_logs_dir(self) -> Path:
        """Host copy of /logs/verifier from the verifier phase."""
        return self._work / "logs" / "verifier"

    @property
    def artifacts_dir(self) -> Path:
        """Host copy of /logs/artifacts."""
        return self._work / "logs" / "artifacts"

    @property
    def work_dir(self) -> Path:
        """The trial's scratch directory on the host (a `Workspace`; deleted by `close`)."""
        return self._work

    def _real(self, path: str) -> str:
        """Where a Harbor path lives inside the sandbox (docker keeps them under /tmp)."""
        if self.backend is Backend.DOCKER:
            return f"/tmp/harbor{path}"
        return path

    # ---- the agent phase ----------------------------------------------------------------------

    def _spec(self, env: Mapping[str, str], *, grading: bool = False) -> SandboxSpec:
        settings = self.task.environment
        network = (
            settings.network_mode is NetworkMode.PUBLIC if self.network is None else self.network
        )
        return SandboxSpec(
            image=self._image,
            rootfs=self.rootfs,
            workdir=self.workdir,
            workspace_dir=str(self.app_dir),
            network=network,
            memory_bytes=(
                self._sizes.memory_mb << 20
                if self._sizes.memory_mb
                else min(DEFAULT_MEMORY_BYTES, self._maxima.memory_bytes)
            ),
            pids=1024,
            cpus=self._sizes.cpus,
            timeout_s=self.exec_timeout_s,
            start_timeout_s=min(max(settings.build_timeout_s, 20.0), 300.0),
            env=dict(env),
            grading=grading,
        )

    async def _open(
        self,
        binds: Mapping[str, Path],
        env: Mapping[str, str],
        *,
        grading: bool = False,
        ro_binds: Mapping[str, Path] | None = None,
    ) -> Sandbox:
        spec = self._spec(env, grading=grading)
        if self.backend is Backend.BWRAP:
            # Passed only when it differs (tests wrap `_BoundBwrap.__init__` without it).
            above = {} if self.mount_dir == self.workdir else {"mount_at": self.mount_dir}
            # A copy-on-write root has the writable directories in itself: nothing to bind.
            roots = {} if self.cow is not None else self.roots
            bound = _BoundBwrap(spec, {**roots, **binds}, ro_binds=ro_binds, **above)
            bound.cow_root = self.cow
            sandbox: Sandbox = bound
            try:
                await sandbox.start()
            except BaseException:
                await sandbox.close()
                raise
        else:
            from skyrl_sdk.sandboxes.docker_backend import DockerSandbox

            above = None if self.mount_dir == self.workdir else self.mount_dir
            sandbox = DockerSandbox(spec, mount_at=above, binds=self.roots)
            try:
                await sandbox.start()
            except BaseException:
                await sandbox.close()
                raise
            dirs = " ".join(self._real(p) for p in (AGENT_LOGS, VERIFIER_LOGS, ARTIFACTS))
            made = await sandbox.exec(f"mkdir -p {dirs} {self._real(TESTS)} {self._real(SOLUTION)}")
            if not made.ok:
                await sandbox.close()
                raise TaskEnvironmentError(f"cannot create the /logs folders: {made.output[-500:]}")
        return sandbox

    async def start(self, *, with_solution: bool = False) -> Sandbox:
        """Prepare the environment and open the agent phase's sandbox.

        `with_solution` mounts the task's solution/ at /solution (the oracle agent).
        """
        if self.sandbox is not None:
            return self.sandbox
        if self.task.environment.gpus:
            self.notes.append(f"[environment].gpus={self.task.environment.gpus}: no GPUs here")
        if self.task.environment.network_mode is NetworkMode.ALLOWLIST and self.network is None:
            self.notes.append("[environment].network_mode=allowlist: not supported, network off")
        for what, user in (("agent", self.task.agent.user), ("verifier", self.task.verifier.user)):
            if user:  # both backends: no user switch inside the sandbox
                self.notes.append(
                    f"[{what}].user={user!r}: not applied; {self.backend.value} runs the agent "
                    "as the sandbox's own unprivileged user (and test.sh as the verifier's uid "
                    "under two-uid grading)"
                )
        for d in (self.app_dir, self.agent_logs_dir, self.artifacts_dir):
            _fresh_dir(d)
        for d in (self.app_dir.parent, self.agent_logs_dir.parent):
            d.chmod(0o755)
        if self.backend is Backend.BWRAP:
            sandbox = await self._start_bwrap(with_solution)
        else:
            sandbox = await self._start_docker(with_solution)
        self.sandbox = sandbox
        return sandbox

    def _cow_problem(self) -> str | None:
        """Why this trial cannot have a copy-on-write root (None: it can)."""
        if os.environ.get(ROOT_MODE_ENV, "").strip().lower() == "binds":
            return f"${ROOT_MODE_ENV}=binds"
        if self.rootfs and any(c in self.rootfs for c in ",:"):
            return f"the root {self.rootfs!r} has ',' or ':' in its path (overlayfs options)"
        return cow_supported()

    async def _start_bwrap(self, with_solution: bool) -> Sandbox:
        task = self.task
        plan = None
        cow_problem = self._cow_problem()
        if task.dockerfile is not None:
            plan = plan_dockerfile(task.dockerfile, run_all=cow_problem is None)
            self.notes.extend(plan.not_applied)
            if plan.workdir and not task.environment.workdir:
                self.workdir = plan.workdir
            self._env.update(plan.env)
            if task.environment.docker_image:
                # TB2's norm: the prebuilt image of this very Dockerfile. Never pulled here.
                self.notes.append(
                    f"docker_image {task.environment.docker_image}: not pulled by the bwrap "
                    "backend; environment/Dockerfile is applied instead"
                )
        elif task.environment.docker_image:
            self.notes.append(
                f"docker_image {task.environment.docker_image}: not used by the bwrap backend"
            )
        if self.workdir.rstrip("/") in ("", "/proc", "/dev"):
            self.notes.append(f"WORKDIR {self.workdir}: not usable as a workspace; using /app")
            self.workdir = DEFAULT_WORKDIR
        if cow_problem is None:
            await self._build_cow_root(plan or DockerfilePlan(None, None))
        elif plan is not None:
            self._plan_roots(plan)
        self._env.update(task.environment.env)
        binds = {
            AGENT_LOGS: self.agent_logs_dir,
            VERIFIER_LOGS: _fresh_dir(self._work / "agent-phase-verifier"),
            ARTIFACTS: self.artifacts_dir,
        }
        solution = with_solution and task.solution_dir is not None
        if solution:
            binds[SOLUTION] = _fresh_dir(self._work / "solution")  # filled once started
        started = time.monotonic()
        deadline = started + task.environment.build_timeout_s
        sandbox = await self._open(binds, self._env)
        try:
            await self._detect_shell(sandbox)
            if solution:
                assert task.solution_dir is not None
                job = CopyJob(task.solution_dir.resolve(), "", tree=True)
                await self._charged_copy(
                    sandbox, [job], self._work / "solution", deadline, "/solution"
                )
                self.solution_uploaded = True
            if plan is not None and self.cow is None:
                await self._apply_steps(sandbox, plan.steps, deadline)
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    async def _build_cow_root(self, plan: DockerfilePlan) -> None:
        """Get the task's built layer (built once, cached: `task_root`) and lay out this
        trial's copy-on-write root over it; the workspace is its `mount_dir`."""
        roots, _ = writable_roots(write_dirs(plan, self.workdir))
        self.mount_dir = next((r for r in roots if inside(self.workdir, r)), self.workdir)
        network = self._spec({}).network
        env = dict(self._env)

        def spec_for(workdir: str, disk_bytes: int) -> SandboxSpec:
            base = self._spec(env)
            memory = min((base.memory_bytes or 0) + disk_bytes, self._maxima.memory_bytes)
            # The task's own settings only: no agent binds or forwarded ports in a build.
            return dataclasses.replace(
                base,
                workdir=workdir,
                memory_bytes=memory,
                disk_bytes=None,
                grading=False,
                ro_binds=(),
                forward_ports=(),
            )

        async def open_build(
            spec: SandboxSpec, cow: CowRoot, ro_binds: Mapping[str, Path]
        ) -> Sandbox:
            ws = cow.mountpoint.parent / "ws"
            ws.mkdir(exist_ok=True)
            spec = dataclasses.replace(spec, workspace_dir=str(ws))
            sandbox = _BoundBwrap(spec, {}, ro_binds=ro_binds)
            sandbox.cow_root = cow
            sandbox.build_as_root = True
            try:
                await sandbox.start()
            except BaseException:
                await sandbox.close()
                raise
            return sandbox

        task = self.task
        try:
            built, cache = await asyncio.to_thread(
                build_task_root,
                dockerfile=task.dockerfile,
                context=task.environment_dir,
                plan=plan,
                workdir=self.workdir,
                mount_dir=self.mount_dir,
                rootfs=self.rootfs,
                network=network,
                spec_for=spec_for,
                open_sandbox=open_build,
                build_timeout_s=task.environment.build_timeout_s,
            )
        except TimeoutError as e:
            raise TaskEnvironmentError(
                f"{e} ran past build_timeout_sec={task.environment.build_timeout_s}"
            ) from None
        except (OSError, SandboxError) as e:
            raise TaskEnvironmentError(f"building the task's root failed: {e}") from None
        self._root_hold = cache.hold(built.key)
        self._root_hold.__enter__()
        self.built_root = built
        self.notes.extend(built.notes)
        cow_dir = self._work / "cow"
        self.cow = cow_layout(
            upper=cow_dir / "up",
            work=cow_dir / "work",
            mountpoint=cow_dir / "merged",
            layer=built.layer,
            host=task_base_for(self.rootfs),
            rootfs=self.rootfs,
        )
        self._app = self.cow.upper_of(self.mount_dir)
        self._app.mkdir(parents=True, exist_ok=True)
        _give(self._app)
        for root in built.writable[1:]:  # where agent_writable looks
            self.roots[root] = self.cow.upper_of(root)

    def _plan_roots(self, plan: DockerfilePlan) -> None:
        """Lay out the writable directories a container of this Dockerfile has: the workspace
        at the top of the working directory (`/app` for `WORKDIR /app/sub`), and one
        directory in the trial's workspace (so under its disk cap) for each other place its
        COPYs and RUNs write (`/data`, `/build`, `/opt/tool`). Below a read-only directory of
        the root (`/usr/local/bin`) it is a note."""
        existing = {e.name for e in os.scandir(self.rootfs)} if self.rootfs else set()
        # Shown read-only from the host (or the image root): no mount point can be made inside.
        readonly = existing or {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}
        roots, _ = writable_roots(write_dirs(plan, self.workdir), existing)
        primary = next((r for r in roots if inside(self.workdir, r)), self.workdir)
        self.mount_dir = primary
        for root in roots:
            if inside(root, primary) or inside(primary, root):
                continue
            parts = PurePosixPath(root).parts[1:]
            if len(parts) > 1 and parts[0] in readonly:
                # No mount point can be made there, and an empty directory mounted over an
                # existing one would hide the system's files: left to a copy-on-write root.
                self.notes.append(
                    f"Dockerfile writes to {root}: below the read-only /{parts[0]} of the "
                    "root filesystem; not applied"
                )
                continue
            host = self._work / "roots" / root.strip("/").replace("/", "__")
            host.parent.mkdir(exist_ok=True)
            host.parent.chmod(0o755)
            self.roots[root] = _fresh_dir(host)
        if primary != self.workdir:
            below = self.app_dir / PurePosixPath(self.workdir).relative_to(primary)
            below.mkdir(parents=True, exist_ok=True)
            _give(self.app_dir)

    def _host_root(self, path: str) -> tuple[str, Path] | None:
        """(inside root, host directory) of the writable directory holding `path`, if any."""
        norm = os.path.normpath(path)
        if inside(norm, self.mount_dir):
            return self.mount_dir, self.app_dir
        return next(((r, h) for r, h in self.roots.items() if inside(norm, r)), None)

    async def _apply_steps(
        self, sandbox: Sandbox, steps: Sequence[SetupStep], deadline: float
    ) -> None:
        context = self.task.environment_dir
        for step in steps:
            where = f"Dockerfile:{step.line} {step.kind.value.upper()}"
            if step.kind is StepKind.COPY:
                if self._host_root(step.dest.rstrip("/") or "/") is None:
                    self.notes.append(
                        f"{where} to {step.dest}: in a read-only system directory of the "
                        "sandbox's root filesystem; not applied"
                    )
                    continue
                problem = await self._copy_in(sandbox, context, step, deadline)
                if problem:
                    self.notes.append(f"{where}: {problem}")
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise TaskEnvironmentError(
                    f"environment setup ran past build_timeout_sec={self.task.environment.build_timeout_s}"
                )
            cwd = step.workdir if self._host_root(step.workdir) else self.workdir
            if cwd != self.workdir:
                await sandbox.exec(["mkdir", "-p", cwd], timeout=30)
            result = await sandbox.exec(["/bin/sh", "-c", step.command], timeout=left, cwd=cwd)
            if result.timed_out:
                raise TaskEnvironmentError(
                    f"{where} {step.command!r} ran past build_timeout_sec="
                    f"{self.task.environment.build_timeout_s}"
                )
            if not result.ok:
                self.notes.append(
                    f"{where} {step.command}: failed in the sandbox (exit {result.exit_code}): "
                    f"{result.output.strip()[-300:]}"
                )

    async def _copy_in(
        self, sandbox: Sandbox, context: Path, step: SetupStep, deadline: float
    ) -> str | None:
        """Apply one COPY: a problem with its sources is returned (a note); a failed copy
        raises `TaskEnvironmentError`."""
        dest = step.dest
        found_root = self._host_root(dest.rstrip("/") or "/")
        assert found_root is not None  # checked by the caller
        inside_root, host_root = found_root
        rel = PurePosixPath(os.path.normpath(dest.rstrip("/") or "/")).relative_to(inside_root)
        target = host_root / rel
        matched, problem = match_sources(context, step.sources)
        if problem:
            return problem
        # lstat only: a RUN step (the sandbox's user) may have left a link at the target.
        is_dir = target.is_dir() and not target.is_symlink()
        as_dir = dest.endswith("/") or len(matched) > 1 or is_dir
        jobs = []
        for src in matched:
            if src.is_dir():
                jobs.append(CopyJob(src.resolve(), str(rel), tree=True))
            else:
                final = rel / src.name if as_dir else rel
                jobs.append(CopyJob(src.resolve(), str(final), tree=False))
        where = f"Dockerfile:{step.line} COPY"
        await self._charged_copy(sandbox, jobs, host_root, deadline, where)
        return None

    async def _charged_copy(
        self,
        sandbox: Sandbox,
        jobs: Sequence[CopyJob],
        dest_root: Path,
        deadline: float,
        where: str,
    ) -> None:
        """Copy host files into the workspace from a child process charged to `sandbox`'s
        cgroups (the workspace is a tmpfs: its pages are memory), keeping sparse files
        sparse and following no link in the workspace (`host.charged_copy`)."""
        spec = sandbox.spec
        bound = sandbox if isinstance(sandbox, _BoundBwrap) else None
        procs = bound.charge_files() if bound is not None else []
        ooms = bound.oom_kill_count() if bound is not None else 0
        try:
            skipped = await charged_copy(
                jobs,
                dest_root,
                cgroup_procs=procs,
                owner=SANDBOX_UID if os.geteuid() == 0 else None,
                budget_bytes=self.disk_bytes or DEFAULT_DISK_BYTES,
                timeout_s=max(1.0, deadline - time.monotonic()),
                memory_bytes=spec.memory_bytes if procs else None,
            )
        except TimeoutError:
            raise TaskEnvironmentError(
                f"{where} ran past build_timeout_sec={self.task.environment.build_timeout_s}"
            ) from None
        except (CopyError, OSError) as e:
            if bound is not None and bound.oom_kill_count() > ooms:
                cap = (spec.memory_bytes or 0) >> 20
                raise TaskEnvironmentError(
                    f"{where}: out of memory: the copy is charged to the sandbox's memory cap "
                    f"({cap} MiB; the workspace is a tmpfs, its pages are memory)"
                ) from None
            raise TaskEnvironmentError(f"{where}: {e}") from None
        self.notes.extend(f"{where}: {line}" for line in skipped)
        _give(dest_root)

    # ---- docker -------------------------------------------------------------------------------

    async def _start_docker(self, with_solution: bool) -> Sandbox:
        from skyrl_sdk.sandboxes.docker_backend import docker_client

        client = await asyncio.to_thread(docker_client)
        build_s = self.task.environment.build_timeout_s
        # With --pull a pull (bounded by build_timeout_sec itself) may come before the build.
        bound = 2 * build_s if self.pull else build_s
        try:
            base = await asyncio.wait_for(asyncio.to_thread(self._docker_image, client), bound)
        except TimeoutError:
            what = "docker pull and build" if self.pull else "docker build"
            raise TaskEnvironmentError(f"{what} ran past build_timeout_sec={build_s:g}") from None
        try:
            config = client.images.get(base).attrs.get("Config") or {}
            image_workdir = config.get("WorkingDir") or ""
            if not self.task.environment.workdir and image_workdir not in ("", "/"):
                self.workdir = image_workdir
            for item in config.get("Env") or []:
                key, _, value = item.partition("=")
                self._env[key] = value
            self._env.update(self.task.environment.env)
            self._plan_docker_roots()
            self._image = await asyncio.to_thread(self._link_image, client, base)
            await asyncio.to_thread(self._seed_workspace, client, self._image)
        finally:
            client.close()
        sandbox = await self._open({}, self._env)
        try:
            await self._detect_shell(sandbox)
            if with_solution and self.task.solution_dir is not None:
                await sandbox.upload(self.task.solution_dir, self._real(SOLUTION))
                self.solution_uploaded = True
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    def _docker_image(self, client: Any) -> str:
        """The task's image on the engine: `docker_image`, pulled only with `pull`, else the
        Dockerfile built (see `docker_image.task_image`)."""
        from skyrl_gym.envs.harbor.docker_image import task_image

        spec = self._spec({})  # the build's RUN steps get the trial's network and memory cap
        return task_image(
            client,
            self.task,
            pull=self.pull,
            notes=self.notes,
            network=spec.network,
            memory_bytes=spec.memory_bytes,
        )

    def _link_image(self, client: Any, base: str) -> str:
        """An image on top of `base` whose /logs, /tests, /solution point into the writable /tmp
        (the docker sandbox's root filesystem is read-only)."""
        import docker.errors

        image_id = client.images.get(base).id
        tag = f"skyrl-harbor-links:{image_id.split(':')[-1][:16]}"
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            dockerfile = f"FROM {image_id}\nCOPY links/ /\n".encode()
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(dockerfile)
            tar.addfile(info, io.BytesIO(dockerfile))
            for name in ("logs", "tests", "solution"):
                link = tarfile.TarInfo(f"links/{name}")
                link.type, link.linkname = tarfile.SYMTYPE, f"/tmp/harbor/{name}"
                tar.addfile(link)
        buf.seek(0)
        try:
            client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, pull=False)
        except (docker.errors.BuildError, docker.errors.APIError) as e:
            raise TaskEnvironmentError(f"cannot add the Harbor paths to the image: {e}") from None
        return tag

    def _plan_docker_roots(self) -> None:
        """Docker: the writable directories a container of the Dockerfile has, as bwrap lays
        them out: the workspace at the top of the working directory (`mount_dir`) and one
        directory in the trial's workspace (under its disk cap) for each other place its
        COPYs and RUNs write (`roots`), each seeded from the image."""
        from skyrl_gym.envs.harbor.docker_image import docker_layout

        try:
            layout = docker_layout(self.task.dockerfile, self.workdir)
        except (OSError, ValueError) as e:
            raise TaskEnvironmentError(f"cannot read environment/Dockerfile: {e}") from None
        self.notes.extend(layout.notes)
        self.mount_dir = layout.mount_dir
        for root in layout.roots:
            host = self._work / "roots" / root.strip("/").replace("/", "__")
            host.parent.mkdir(exist_ok=True)
            host.parent.chmod(0o755)
            self.roots[root] = _fresh_dir(host)

    def _seed_workspace(self, client: Any, image: str) -> None:
        """Copy the image's `mount_dir` and `roots` into the host directories that will be
        mounted over them, so the task's files are there (under one cap: the workspace's)."""
        budget = [self.disk_bytes or DEFAULT_DISK_BYTES]
        container = client.containers.create(image, command=["true"])
        try:
            for inside_path, host in ((self.mount_dir, self.app_dir), *self.roots.items()):
                self._seed_dir(container, inside_path, host, budget)
        finally:
            container.remove(force=True)
        if self.mount_dir != self.workdir:  # the working directory exists below the mount
            below = self.app_dir / PurePosixPath(self.workdir).relative_to(self.mount_dir)
            below.mkdir(parents=True, exist_ok=True)

    def _seed_dir(self, container: Any, inside_path: str, host: Path, budget: list[int]) -> None:
        """Copy the image's `inside_path` into `host` (nothing when the image lacks it),
        charging `budget[0]` bytes."""
        import docker.errors

        staging = self._work / "seed"
        # Spooled into the workspace itself (never held in memory): it counts against the
        # workspace's cap, and an archive larger than the cap is refused.
        with tempfile.TemporaryFile(dir=self._work) as spool:
            try:
                stream, _ = container.get_archive(inside_path)
                for chunk in stream:
                    budget[0] -= len(chunk)
                    if budget[0] < 0:
                        raise TaskEnvironmentError(
                            f"the image's {inside_path} is larger than the workspace's cap "
                            f"({self.disk_bytes or DEFAULT_DISK_BYTES} bytes)"
                        )
                    spool.write(chunk)
            except docker.errors.NotFound:
                return
            except OSError as e:
                raise TaskEnvironmentError(
                    f"cannot copy the image's {inside_path}: {e.strerror}"
                ) from None
            spool.seek(0)
            with tarfile.open(fileobj=spool) as tar:
                tar.extractall(staging, filter="data")
        root = staging / PurePosixPath(inside_path).name
        if root.is_dir() and not root.is_symlink():
            for entry in root.iterdir():  # the same filesystem: moved, not copied again
                os.rename(entry, host / entry.name)
        shutil.rmtree(staging, ignore_errors=True)

    async def _detect_shell(self, sandbox: Sandbox) -> None:
        probe = await sandbox.exec(["/bin/sh", "-c", "command -v bash"], timeout=30)
        self._shell = "bash" if probe.ok else "sh"

    def script_command(self, host_script: Path, inside_path: str) -> str:
        """The command that runs a script as its `#!` line says (else with `shell`)."""
        with contextlib.suppress(OSError):
            with host_script.open("rb") as f:
                first = f.readline(256).decode("utf-8", "replace").strip()
            if first.startswith("#!") and first[2:].strip():
                return f"{first[2:].strip()} {inside_path}"
        return f"{self._shell} {inside_path}"

    @property
    def shell(self) -> str:
        """`bash` when the environment has it, else `sh`."""
        return self._shell

    # ---- the verifier phase -------------------------------------------------------------------

    # ---- multi-step tasks ---------------------------------------------------------------------

    async def begin_step(self, step: TaskStep, *, with_solution: bool = False) -> Sandbox:
        """Run `step` of a multi-step task next, in this same environment: the agent's
        sandbox of the previous step (if any) is closed, `task` becomes the step's view (its
        instruction, timeouts, solution, and the task's tests/ with the step's layered over
        them), and a fresh agent sandbox opens on the same working directory (the first step
        builds the environment through `start`). The step's setup hook then runs in it
        (`run_step_setup`; `StepSetupError` when it fails). `verify()` then grades this step."""
        if self.base_task is None:
            self.base_task = self.task
        base = self.base_task
        tests = _fresh_dir(self._work / "step-tests" / step.name)
        # Task-level helpers first, then the step's files over them (the step's test.sh wins).
        for src in (base.path / "tests", step.tests_dir):
            if src is not None and src.is_dir():
                shutil.copytree(src, tests, dirs_exist_ok=True)
        self.task = base.for_step(step, tests)
        self.verifier_result = None
        if self.sandbox is None and not self._agent_phase_over:  # the first step
            sandbox = await self.start(with_solution=with_solution)
            await self.run_step_setup(step)
            return sandbox
        if not self._agent_phase_over:  # a subclass may reopen its agent phase after this
            await self.end_agent_phase()
        self._agent_phase_over = False
        self.solution_uploaded = False
        solution = self.task.solution_dir if with_solution else None
        if self.backend is Backend.BWRAP:
            binds = {
                AGENT_LOGS: self.agent_logs_dir,
                VERIFIER_LOGS: _fresh_dir(self._work / "agent-phase-verifier"),
                ARTIFACTS: self.artifacts_dir,
            }
            if solution is not None:  # the task folder's tree checks bound it (TREE_MAX_*)
                host = _fresh_dir(self._work / "solution")
                shutil.copytree(solution, host, dirs_exist_ok=True)
                _give(host)
                binds[SOLUTION] = host
            sandbox = await self._open(binds, self._env)
        else:
            sandbox = await self._open({}, self._env)
            if solution is not None:
                try:
                    await sandbox.upload(solution, self._real(SOLUTION))
                except BaseException:
                    await sandbox.close()
                    raise
        self.solution_uploaded = solution is not None
        self.sandbox = sandbox
        await self.run_step_setup(step)
        return sandbox

    async def run_step_setup(self, step: TaskStep) -> None:
        """Harbor's per-step setup hook, in the step's agent sandbox before its agent phase:
        steps/<name>/workdir/ is copied into the working directory (setup.sh included, as
        Harbor uploads it), then `bash <workdir>/setup.sh` runs there as the agent's user,
        within `[environment].build_timeout_sec`. The copy is made by the sandbox itself, so a
        link the agent left in the working directory leads nowhere outside it. Raises
        `StepSetupError` naming the step when the copy or setup.sh fails."""
        # Imported here so that this change stays inside the multi-step section.
        from skyrl_gym.envs.harbor.task import StepSetupError

        source, sandbox = step.workdir_dir, self.sandbox
        if source is None or sandbox is None:
            return
        try:
            await sandbox.upload(source, self.workdir)
        except (SandboxError, OSError) as e:
            raise StepSetupError(
                step.name, f"workdir/ could not be copied into {self.workdir}: {e}"
            ) from None
        if step.setup_script is None:
            return
        limit = self.task.environment.build_timeout_s
        script = f"{self.workdir.rstrip('/')}/setup.sh"
        try:
            result = await sandbox.exec([self._shell, script], timeout=limit, cwd=self.workdir)
        except SandboxError as e:
            raise StepSetupError(step.name, f"workdir/setup.sh could not run: {e}") from None
        if result.timed_out:
            raise StepSetupError(
                step.name, f"workdir/setup.sh ran past build_timeout_sec={limit:g}"
            )
        if not result.ok:
            tail = " ".join(result.output.split())[-300:]
            raise StepSetupError(
                step.name, f"workdir/setup.sh exited with {result.exit_code}: {tail}"
            )

    async def end_agent_phase(self) -> None:
        """Close the agent's sandbox: every process it started is killed. Idempotent."""
        if self._agent_phase_over:
            return
        self._agent_phase_over = True
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is None:
            return
        try:
            if self.backend is Backend.DOCKER and not sandbox.closed:
                for inside_path, host_dir in (
                    (AGENT_LOGS, self.agent_logs_dir),
                    (ARTIFACTS, self.artifacts_dir),
                ):
                    try:
                        await sandbox.download(self._real(inside_path), host_dir.parent)
                    except Exception as e:  # the trial goes on; the note says what is missing
                        self.notes.append(
                            f"could not copy {inside_path} out of the container: "
                            f"{type(e).__name__}: {str(e)[:300]}"
                        )
        finally:
            await sandbox.close()

    async def verify(self) -> VerifierResult:
        """End the agent phase, then run tests/test.sh in a fresh sandbox and read the reward.

        Never raises for verifier failures: they are in `VerifierResult.error`.
        """
        if self.verifier_result is not None:
            return self.verifier_result
        await self.end_agent_phase()
        started = time.monotonic()
        result = await self._verify(started)
        self.verifier_result = result
        return result

    def agent_writable(self, path: str) -> bool:
        """True when the agent phase could have written `path` (or it is relative, i.e. the
        verifier's working directory): the working directory, `/logs`, `/tmp`, `/solution`."""
        if not path.startswith("/"):
            return True
        roots = (self.workdir, self.mount_dir, *self.roots, LOGS, "/tmp", "/var/tmp", "/dev/shm")
        roots += (SOLUTION,)
        return any(inside(os.path.normpath(path), root) for root in roots)

    def verifier_env(self) -> dict[str, str]:
        """The environment of `test.sh`: the task's variables (Dockerfile ENV,
        `[environment].env`, `[verifier].env`) hardened by `grading_env` (HOME=/tmp,
        PYTHONNOUSERSITE, PYTHONSAFEPATH, ...), with every agent-writable directory dropped
        from the variables that name code to load (`CODE_PATH_VARS`). The task's own PATH is
        kept (it may name the image's tools), minus those directories, plus the system PATH."""
        task_env = {**self._env, **self.task.verifier.env}
        env = grading_env(task_env)
        for name in CODE_PATH_VARS:
            value = task_env.get(name)
            if value is None:
                continue
            sep = " " if name == "LD_PRELOAD" and ":" not in value else ":"
            kept = [p for p in value.split(sep) if p and not self.agent_writable(p)]
            if name == "PATH":
                kept += [p for p in DEFAULT_PATH.split(":") if p not in kept]
            if kept:
                env[name] = sep.join(kept)
            else:
                env.pop(name, None)
        return env

    async def _verify(self, started: float) -> VerifierResult:
        task = self.task
        timeout = task.verifier.timeout_s
        # Stale rewards never count: the host's /logs/verifier starts empty (bwrap binds it;
        # docker's is the container's own, emptied of reward files below before test.sh).
        verifier_dir = _fresh_dir(self.verifier_logs_dir)
        # The script is run through its own #! line: the docker sandbox's /tmp is noexec.
        # `exec`: test.sh's interpreter is the command server's own child, so the status the
        # server reports is test.sh's own (a signal that killed it is not hidden behind a shell).
        run = self.script_command(task.tests_dir / "test.sh", f"{TESTS}/test.sh")
        command = f"chmod +x {TESTS}/test.sh 2>/dev/null; exec {run} > {VERIFIER_LOGS}/test-stdout.txt 2>&1"
        # The same hardened environment is the sandbox's and the command's, so no variable
        # of the agent phase's environment is left over underneath it.
        env = self.verifier_env()
        sandbox: Sandbox | None = None
        isolation: GradingIsolation | None = None
        try:
            if self.backend is Backend.BWRAP:
                tests = self._work / "tests"
                shutil.rmtree(tests, ignore_errors=True)
                shutil.copytree(task.tests_dir, tests)  # uploaded only now
                tests.chmod(0o755)
                (tests / "test.sh").chmod(0o755)
                _give(tests)
                binds = {
                    AGENT_LOGS: self.agent_logs_dir,
                    VERIFIER_LOGS: verifier_dir,
                    ARTIFACTS: self.artifacts_dir,
                }
                # A program test.sh runs has its uid. test.sh itself is always read-only (bash
                # reads a script as it goes, so rewriting the rest of it would run the
                # program's own verdict); under require_exit_zero all of /tests is (no helper
                # or test file swapped, no conftest.py planted, before test.sh uses it).
                if self.strict_verifier:
                    ro_binds = {TESTS: tests}
                else:
                    binds[TESTS] = tests
                    ro_binds = {f"{TESTS}/test.sh": tests / "test.sh"}
                sandbox = await self._open(binds, env, grading=True, ro_binds=ro_binds)
            else:
                sandbox = await self._open({}, env, grading=True)
                await sandbox.upload(task.tests_dir, self._real(TESTS))
                await self._remove_reward_files(sandbox)
            isolation = sandbox.grading_isolation
            if isolation is GradingIsolation.TWO_UID and self.backend is Backend.BWRAP:
                # /tests and /logs/verifier belong to the verifier (its uid 0 inside), mode
                # 0755, before test.sh starts: test.sh is not agent code (the exec shim runs
                # a script in an agent-owned tree as the agent), and the programs it runs
                # from the agent's paths have the agent's uid: they can neither write a
                # reward file nor swap one in, nor change a test file.
                chown_tree(self._work / "tests", VERIFIER_HOST_UID)
                os.chown(verifier_dir, VERIFIER_HOST_UID, VERIFIER_HOST_UID)
                verifier_dir.chmod(0o755)
            else:
                self.notes.append(SINGLE_UID_NOTE)
            argv = [self._shell, "-c", command]
            if isinstance(sandbox, BwrapSandbox):
                # The moment test.sh exits, the server (PID 1) kills whatever it left running,
                # so nothing can rewrite the reward files after its verdict; it says how many.
                call = sandbox.exec(argv, timeout=timeout, env=env, end_all=True)
            else:
                call = sandbox.exec(argv, timeout=timeout, env=env)
            ran = await asyncio.wait_for(call, timeout + 30)
            if self.backend is Backend.DOCKER:
                with contextlib.suppress(Exception):
                    await sandbox.download(self._real(VERIFIER_LOGS), verifier_dir.parent)
        except (TimeoutError, SandboxError, OSError) as e:
            if isinstance(e, TimeoutError):
                return VerifierResult(
                    None,
                    VerifierError.TIMEOUT,
                    f"test.sh ran past {timeout:g}s",
                    duration_s=time.monotonic() - started,
                    isolation=isolation,
                )
            return VerifierResult(
                None,
                VerifierError.SANDBOX_ERROR,
                f"{type(e).__name__}: {e}",
                duration_s=time.monotonic() - started,
                isolation=isolation,
            )
        finally:
            # Closed before anything is read back: whatever test.sh (or an agent program it
            # ran) left running is dead, so no file below changes after this point.
            if sandbox is not None:
                await sandbox.close()
        output = ""
        with contextlib.suppress(OSError):  # a symlink or a FIFO is not read (UnsafeFileError)
            tail = read_regular_file(
                "test-stdout.txt", max_bytes=4 * _OUTPUT_TAIL, tail=True, under=verifier_dir
            )
            output = tail.decode("utf-8", errors="replace")[-_OUTPUT_TAIL:]
        duration = time.monotonic() - started
        if ran.timed_out:
            return VerifierResult(
                None,
                VerifierError.TIMEOUT,
                f"test.sh ran past [verifier].timeout_sec={timeout:g}s and was killed",
                exit_code=None,
                duration_s=duration,
                output_tail=output,
                isolation=isolation,
            )
        left, orphaned = ran.left_running, ran.orphaned
        # Two-uid grading: a reward file counts only if the verifier's uid wrote it (docker
        # downloads copies, whose host owner says nothing: one uid runs everything there).
        owner = VERIFIER_HOST_UID if isolation is GradingIsolation.TWO_UID else None
        try:
            rewards = read_rewards(verifier_dir, verifier_uid=owner)
        except RewardFileError as e:
            rewards, problem = None, e
        counts = {"left_running": left, "orphaned": orphaned, "isolation": isolation}
        void = self._void_reason(ran.exit_code, ran.oom_killed, left, orphaned)
        if void is not None:
            kind, message = void
            if rewards is not None:
                message += f"; the reward it left ({primary_reward(rewards):g}) is void"
            return VerifierResult(None, kind, message, ran.exit_code, duration, output, **counts)
        # A verifier that could not even start its tools is its own error, not a reward 0:
        # only when it gave nothing better (a reward above 0 means it did run), so output an
        # agent program prints cannot turn a passing reward into an error.
        missing = missing_commands(output)
        if missing and (rewards is None or primary_reward(rewards) == 0):
            names = ", ".join(f"`{n}`" for n in missing[:3])
            left = "no reward" if rewards is None else "a reward of 0"
            message = (
                f"test.sh could not run {names}: command not found (exit {ran.exit_code}); it "
                f"left {left}. Install it in the task's environment (offline: a root that has it)"
            )
            return VerifierResult(
                None,
                VerifierError.COMMAND_NOT_FOUND,
                message,
                ran.exit_code,
                duration,
                output,
                **counts,
            )
        if rewards is None:
            return VerifierResult(
                None, problem.kind, str(problem), ran.exit_code, duration, output, **counts
            )
        return VerifierResult(rewards, None, "", ran.exit_code, duration, output, **counts)

    async def _remove_reward_files(self, sandbox: Sandbox) -> None:
        """Docker: no reward file may be in the container's /logs/verifier before test.sh
        starts (raises `SandboxError` when one cannot be removed: a stale one would count)."""
        paths = " ".join(f"{self._real(VERIFIER_LOGS)}/{name}" for name in REWARD_FILES)
        gone = await sandbox.exec(
            f"rm -rf {paths}; for f in {paths}; do if [ -e $f ] || [ -L $f ]; then exit 1; fi; done",
            timeout=30,
        )
        if not gone.ok:
            raise SandboxError(f"cannot remove a stale reward file: {gone.output[-300:]}")

    @property
    def strict_verifier(self) -> bool:
        """True when the reward counts only if test.sh exited 0 and nothing it started
        outlived its parent (`require_exit_zero`, else the task's
        `[verifier].require_exit_zero`)."""
        if self.require_exit_zero is not None:
            return self.require_exit_zero
        return self.task.verifier.require_exit_zero

    def _void_reason(
        self, exit_code: int, oom_killed: bool, left: int | None, orphaned: int | None
    ) -> tuple[VerifierError, str] | None:
        """Why test.sh's reward file is not its verdict, or None when it is."""
        if exit_code < 0:
            try:
                name = f" ({signal.Signals(-exit_code).name})"
            except ValueError:
                name = ""
            how = ", out of memory" if oom_killed else ""
            return (
                VerifierError.KILLED,
                f"test.sh did not end on its own: signal {-exit_code}{name}{how} killed it",
            )
        if not self.strict_verifier:
            return None
        if exit_code != 0:
            return (
                VerifierError.EXIT_NONZERO,
                f"test.sh exited {exit_code} and the task requires exit 0 (require_exit_zero)",
            )
        if left or orphaned:
            return (
                VerifierError.STRAY_PROCESSES,
                f"processes test.sh started outlived their parent ({left or 0} still running "
                f"at its exit, killed then; {orphaned or 0} ended before it): they could have "
                "rewritten the reward after its verdict (require_exit_zero)",
            )
        return None

    async def close(self) -> None:
        """Close any open sandbox and delete the trial's scratch files. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.end_agent_phase()
        finally:
            self._workspace.close()
            hold, self._root_hold = self._root_hold, None
            if hold is not None:
                hold.__exit__(None, None, None)

    def copy_logs(self, trial_dir: Path) -> list[str]:
        """Copy /logs/agent, /logs/verifier and /logs/artifacts into `trial_dir` (Harbor's
        `agent/`, `verifier/`, `artifacts/`).

        Call it once no sandbox of the trial runs (after `verify`, or `end_agent_phase`).
        Everything in these folders was written by sandboxed code, so nothing is followed:
        symlinks are copied as links, FIFOs, sockets and devices are skipped, each file is
        read as a regular file without following symlinks and cut at `LOG_FILE_MAX_BYTES`
        (`LOGS_MAX_BYTES` in all), trees deeper than `host.LOG_MAX_DEPTH` levels or with
        more than `host.LOG_MAX_ENTRIES` entries are cut there. Returns what was skipped or
        cut, one line each, naming it (nothing is cut silently).
        """
        notes: list[str] = []
        budget = [LOGS_MAX_BYTES]
        for src, name in (
            (self.agent_logs_dir, "agent"),
            (self.verifier_logs_dir, "verifier"),
            (self.artifacts_dir, "artifacts"),
        ):
            dest = trial_dir / name
            dest.mkdir(parents=True, exist_ok=True)
            if src.is_dir() and not src.is_symlink():
                copy_untrusted_tree(
                    src, dest, name, budget=budget, file_max_bytes=LOG_FILE_MAX_BYTES, notes=notes
                )
        return notes
