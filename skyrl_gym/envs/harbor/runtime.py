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

The trial's parts, each in its own module (`HarborRuntime` is their front, and holds the
trial's state they read and set):

- `trial_paths`: the Harbor paths inside the sandbox and their host directories;
- `trial_sandbox`: opening a sandbox of the trial (`BoundBwrap`, the docker container);
- `bwrap_setup` and `setup_steps`: the bwrap agent phase's root (copy-on-write, or system
  binds with the Dockerfile's steps applied in the sandbox) and the charged copies into it;
- `docker_setup`: the docker agent phase's image, writable directories and container;
- `multi_step`: a multi-step task's steps in one environment;
- `healthcheck`: `[environment.healthcheck]` (run by `start`) and a step's
  `[steps.healthcheck]` (after its setup hook), before the agent;
- `verifier_phase`: the grading sandbox, test.sh and its hardened environment;
- `verdict`: the reward files read back, `VerifierResult` and `VerifierError`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from skyrl_gym.envs.harbor import multi_step, verifier_phase
from skyrl_gym.envs.harbor.bwrap_setup import ROOT_MODE_ENV, start_bwrap
from skyrl_gym.envs.harbor.docker_setup import copy_out_logs, start_docker
from skyrl_gym.envs.harbor.errors import BuildTimeoutError, TaskEnvironmentError
from skyrl_gym.envs.harbor.healthcheck import ENV_HEALTHCHECK, run_healthcheck
from skyrl_gym.envs.harbor.host import HostMaxima, clamp_task_sizes
from skyrl_gym.envs.harbor.task import DEFAULT_WORKDIR, HarborTask, NetworkMode, TaskStep
from skyrl_gym.envs.harbor.task_root import BuiltRoot
from skyrl_gym.envs.harbor.trial_paths import (
    AGENT_LOGS,
    ARTIFACTS,
    LOG_FILE_MAX_BYTES,
    LOGS,
    LOGS_MAX_BYTES,
    SANDBOX_UID,
    SOLUTION,
    TESTS,
    VERIFIER_LOGS,
    copy_trial_logs,
    fresh_dir,
)
from skyrl_gym.envs.harbor.trial_sandbox import BoundBwrap, open_sandbox
from skyrl_gym.envs.harbor.verdict import (
    REWARD_AGREEMENT_TOLERANCE,
    REWARD_FILES,
    REWARD_MAX_BYTES,
    RewardFileError,
    VerifierError,
    VerifierResult,
    check_reward_owner,
    missing_commands,
    primary_reward,
    read_rewards,
)
from skyrl_gym.envs.harbor.verifier_phase import CODE_PATH_VARS, SINGLE_UID_NOTE, run_verifier
from skyrl_sdk.sandboxes import DEFAULT_DISK_BYTES, Backend, Sandbox, SandboxSpec, Workspace
from skyrl_sdk.sandboxes.cow_root import CowRoot

# What moved to the trial's parts stays importable from here, as before the split.
__all__ = [
    "AGENT_LOGS",
    "ARTIFACTS",
    "CODE_PATH_VARS",
    "DEFAULT_MEMORY_BYTES",
    "LOGS",
    "LOGS_MAX_BYTES",
    "LOG_FILE_MAX_BYTES",
    "NO_LIMIT_S",
    "REWARD_AGREEMENT_TOLERANCE",
    "REWARD_FILES",
    "REWARD_MAX_BYTES",
    "ROOT_MODE_ENV",
    "SANDBOX_UID",
    "SINGLE_UID_NOTE",
    "SOLUTION",
    "TESTS",
    "VERIFIER_LOGS",
    "BuildTimeoutError",
    "HarborRuntime",
    "RewardFileError",
    "TaskEnvironmentError",
    "VerifierError",
    "VerifierResult",
    "check_reward_owner",
    "missing_commands",
    "primary_reward",
    "read_rewards",
]

_BoundBwrap = BoundBwrap
"""The old name of `trial_sandbox.BoundBwrap` (tests wrap its `__init__`)."""

NO_LIMIT_S = 7 * 24 * 3600.0
DEFAULT_MEMORY_BYTES = 2048 << 20
"""The memory cap of a task that sets no `memory_mb` (at most `HostMaxima.memory_bytes`)."""


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
    build_s: float = 0.0
    """Seconds `start` spent building the environment (the task's root or image and the
    Dockerfile's steps, under `build_timeout_sec`): the trial's `build` stage, apart from
    opening the sandbox (`start`)."""
    build_failed: bool = False
    """The build itself failed (the trial's `build` stage failed, not `start`)."""

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
        """A sandbox of this trial (`trial_sandbox.open_sandbox`), its spec from `_spec`."""
        return await open_sandbox(self, binds, env, grading=grading, ro_binds=ro_binds)

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
            fresh_dir(d)
        for d in (self.app_dir.parent, self.agent_logs_dir.parent):
            d.chmod(0o755)
        if self.backend is Backend.BWRAP:
            sandbox = await start_bwrap(self, with_solution)
        else:
            sandbox = await start_docker(self, with_solution)
        self.sandbox = sandbox  # closed by `close` even when the healthcheck fails
        check = self.task.environment.healthcheck
        if check is not None:  # Harbor: after the environment starts, before the agent
            await run_healthcheck(
                sandbox, check, shell=self._shell, cwd=self.workdir, where=ENV_HEALTHCHECK
            )
        return sandbox

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

    # ---- multi-step tasks ---------------------------------------------------------------------

    async def begin_step(self, step: TaskStep, *, with_solution: bool = False) -> Sandbox:
        """Run `step` of a multi-step task next, in this same environment (`multi_step`):
        the previous step's agent sandbox closed, `task` the step's view, a fresh agent
        sandbox on the same working directory, the step's setup hook run in it.
        `verify()` then grades this step."""
        return await multi_step.begin_step(self, step, with_solution=with_solution)

    async def run_step_setup(self, step: TaskStep) -> None:
        """Harbor's per-step setup hook in the step's agent sandbox (`multi_step`): its
        workdir/ copied in by the sandbox, then setup.sh run; `StepSetupError` on failure."""
        await multi_step.run_step_setup(self, step)

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
                await copy_out_logs(self, sandbox)
        finally:
            await sandbox.close()

    # ---- the verifier phase -------------------------------------------------------------------

    async def verify(self) -> VerifierResult:
        """End the agent phase, then run tests/test.sh in a fresh sandbox and read the reward.

        Never raises for verifier failures: they are in `VerifierResult.error`.
        """
        if self.verifier_result is not None:
            return self.verifier_result
        await self.end_agent_phase()
        started = time.monotonic()
        result = await run_verifier(self, started)
        self.verifier_result = result
        return result

    def agent_writable(self, path: str) -> bool:
        """True when the agent phase could have written `path` (or it is relative, i.e. the
        verifier's working directory): the working directory, `/logs`, `/tmp`, `/solution`."""
        return verifier_phase.agent_writable(self, path)

    def verifier_env(self) -> dict[str, str]:
        """The environment of `test.sh` (`verifier_phase.verifier_env`): the task's
        variables hardened by `grading_env`, every agent-writable directory dropped from
        the variables that name code to load (`CODE_PATH_VARS`)."""
        return verifier_phase.verifier_env(self)

    @property
    def strict_verifier(self) -> bool:
        """True when the reward counts only if test.sh exited 0 and nothing it started
        outlived its parent (`require_exit_zero`, else the task's
        `[verifier].require_exit_zero`)."""
        if self.require_exit_zero is not None:
            return self.require_exit_zero
        return self.task.verifier.require_exit_zero

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
        dirs = (
            (self.agent_logs_dir, "agent"),
            (self.verifier_logs_dir, "verifier"),
            (self.artifacts_dir, "artifacts"),
        )
        return copy_trial_logs(dirs, trial_dir)
