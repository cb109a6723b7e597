"""Read a Harbor task folder (Terminal-Bench 2 style) without importing Harbor.

    <task>/task.toml            settings (schema 1.0, 1.1 or 1.4; unknown keys ignored)
    <task>/instruction.md       what the agent is told (leading canary comment lines dropped)
    <task>/environment/         Dockerfile and its build context (optional)
    <task>/tests/test.sh        the verifier; writes /logs/verifier/reward.txt or reward.json
    <task>/solution/solve.sh    reference solution, run by the `oracle` agent (optional)

Every problem raises `TaskFormatError`, whose message names the file and the field.

A Terminal-Bench 1 folder (task.yaml, run-tests.sh, solution.sh, Dockerfile) is read through
its Harbor conversion (`tb1.converted_tb1`, cached; `skyrl harbor migrate` writes it out).
`environment/docker-compose.yaml` is not used by either backend (one sandbox or container
from the Dockerfile): the task gets a note naming its services.

A task folder is untrusted input, read by the host with the host's powers, so the reader
bounds what it costs: task.toml, instruction.md and the Dockerfile are at most 1 MiB each
(`TEXT_FILE_MAX_BYTES`; checked before they are read, and read no further), tests/ and
solution/ at most `TREE_MAX_BYTES` in all and `TREE_MAX_FILES` entries (they are copied into
each trial), with no FIFO, socket or device and no link out of the task folder or to a
directory. Timeouts above a day (`MAX_TIMEOUT_S`) are clamped, with a note in
`HarborTask.notes`; memory and disk sizes are clamped to the host by the runtime.

**`${VAR}` templating (a deliberate difference from Harbor).** Harbor substitutes
`${VAR}` / `${VAR:-default}` in task.toml's `env` tables from the host's whole environment,
so a downloaded task can copy the host's provider keys or `SKYRL_API_KEY` into the agent's
environment (and from there into its logs or the network). Here a variable is taken from the
host only when the user allows it by name: `load_task(path, pass_env=["OPENAI_API_KEY"])`,
`--pass-env NAME` on `skyrl harbor run` and `skyrl eval`, `make("harbor", pass_env=[...])`,
`env.pass_env` in a train config. A variable that is not allowed becomes its default
(`${VAR:-default}`), else the empty string, and the task gets one note naming the variable
(never its value).
"""

from __future__ import annotations

import enum
import math
import os
import re
import tomllib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

# The size caps live with the bounded reading of the folder's files (tb1 uses it too); they
# stay importable from here.
from skyrl_gym.envs.harbor.task_files import (  # noqa: F401
    TEXT_FILE_MAX_BYTES,
    TREE_MAX_BYTES,
    TREE_MAX_FILES,
    TaskFormatError,
    check_task_tree,
    read_task_text,
)

SCHEMA_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4")
"""task.toml schema versions this reader understands (1.0 used `version = ...`)."""
DEFAULT_VERIFIER_TIMEOUT_S = 600.0
DEFAULT_BUILD_TIMEOUT_S = 600.0
DEFAULT_WORKDIR = "/app"
MAX_TIMEOUT_S = 24 * 3600.0
"""The longest agent, verifier or build timeout a task may set (a day); longer ones are
clamped, with a note."""
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class NetworkMode(enum.StrEnum):
    """Network access of the task's environment (`[environment].network_mode`)."""

    PUBLIC = "public"
    """Full network access (Harbor's default)."""
    NO_NETWORK = "no-network"
    """No network at all."""
    ALLOWLIST = "allowlist"
    """Only `allowed_hosts` (not supported by our sandboxes: treated as no network)."""


class VerifierMode(enum.StrEnum):
    """`[verifier].environment_mode`: where Harbor runs the verifier."""

    SHARED = "shared"
    """In the agent's environment (Harbor's default; here: a fresh grading sandbox on it)."""
    SEPARATE = "separate"
    """In an environment of its own, built from tests/ with only the task's artifacts copied
    in (Harbor; implied by a `[verifier.environment]` table). Not built here: the trial runs
    the verifier as `shared`, with a note (`SEPARATE_VERIFIER_NOTE`)."""


@dataclass(frozen=True)
class HealthcheckSettings:
    """`[environment.healthcheck]` or `[steps.healthcheck]`: a command that must pass before
    the agent starts (Harbor mirrors Docker's HEALTHCHECK)."""

    command: str
    """Shell command; exit status 0 means healthy."""
    interval_s: float = 5.0
    """Seconds between attempts after the start period."""
    timeout_s: float = 30.0
    """Limit of one attempt (one that runs past it failed)."""
    start_period_s: float = 0.0
    """Grace period from the first attempt: failures in it do not count toward `retries`."""
    start_interval_s: float = 5.0
    """Seconds between attempts during the start period."""
    retries: int = 3
    """Consecutive failures (after the start period) that fail the check."""


@dataclass(frozen=True)
class AgentSettings:
    """`[agent]` of task.toml."""

    timeout_s: float | None = None
    """Wall-clock limit of the agent phase (None: no limit)."""
    user: str | None = None
    """User the agent runs as (None: the environment's default)."""


@dataclass(frozen=True)
class VerifierSettings:
    """`[verifier]` of task.toml."""

    timeout_s: float = DEFAULT_VERIFIER_TIMEOUT_S
    """Wall-clock limit of the verifier phase."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment of test.sh, after `${VAR}` / `${VAR:-default}` substitution (from the host
    only for the variables the user allowed: `load_task(pass_env=...)`)."""
    user: str | None = None
    """User the verifier runs as (None: the environment's default)."""
    require_exit_zero: bool = False
    """Our extension (`[verifier] require_exit_zero = true`): the reward counts only when
    test.sh exited 0 and nothing it started outlived its parent. Harbor ignores test.sh's
    exit status; a task whose test.sh runs the agent's programs sets this (and waits for or
    kills what they start before its verdict), so a program that detaches to rewrite the
    reward file after the verdict earns nothing."""
    mode: VerifierMode = VerifierMode.SHARED
    """`environment_mode` (`separate` also when `[verifier.environment]` is given); a step's
    view of the task carries the step's own (`[steps.verifier]`) when it sets one."""


@dataclass(frozen=True)
class EnvironmentSettings:
    """`[environment]` of task.toml."""

    build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S
    """Limit on building / starting the environment."""
    docker_image: str | None = None
    """Prebuilt image; the Dockerfile is then optional."""
    os: str = "linux"
    """Target OS of the task (only `linux` runs here)."""
    cpus: float | None = None
    """CPU cores."""
    memory_mb: int | None = None
    """Memory cap in MiB (legacy `memory = "2G"` is converted)."""
    storage_mb: int | None = None
    """Disk size in MiB (legacy `storage = "10G"` is converted)."""
    gpus: int = 0
    """GPUs the task wants."""
    network_mode: NetworkMode = NetworkMode.PUBLIC
    """Network access (legacy `allow_internet` maps to public / no-network)."""
    workdir: str | None = None
    """Working directory of every command; overrides the Dockerfile's WORKDIR."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables of every command in the environment."""
    healthcheck: HealthcheckSettings | None = None
    """`[environment.healthcheck]`: run after the environment starts, before the agent (a
    multi-step task: once, before the first step's setup)."""


class StepRewardStrategy(enum.StrEnum):
    """`multi_step_reward_strategy`: how a multi-step trial's reward comes from its steps."""

    MEAN = "mean"
    """Per key, the mean over the steps that were verified (a key a step lacks counts 0);
    Harbor's default."""
    FINAL = "final"
    """The last verified step's rewards."""


@dataclass(frozen=True)
class TaskStep:
    """One `[[steps]]` entry of a multi-step task, with its folder `steps/<name>/`."""

    name: str
    """The step's name (its folder under steps/)."""
    instruction: str
    """steps/<name>/instruction.md without its canary lines."""
    agent_timeout_s: float | None
    """`[steps.agent].timeout_sec` (None: the task's `[agent].timeout_sec`)."""
    verifier_timeout_s: float
    """`[steps.verifier].timeout_sec`, else the task's `[verifier].timeout_sec`."""
    min_reward: float | Mapping[str, float] | None = None
    """`min_reward`: the trial stops after this step when its reward is below it; a table
    (`min_reward = { tests = 1.0 }`) gives a threshold per reward key, as Harbor allows (a key
    the step's rewards lack is below). None: never."""
    path: Path = Path()
    """steps/<name>/ of the task folder."""
    verifier_env: Mapping[str, str] = field(default_factory=dict)
    """`[steps.verifier.env]`: merged over the task's `[verifier].env` for this step's
    test.sh (the same `${VAR}` rules: from the host only with `--pass-env NAME`)."""
    verifier_mode: VerifierMode | None = None
    """`[steps.verifier].environment_mode` (or implied by `[steps.verifier.environment]`);
    None: the task's."""
    healthcheck: HealthcheckSettings | None = None
    """`[steps.healthcheck]`: run after the step's setup hook, before its agent phase (on top
    of the task's `[environment.healthcheck]`, as in Harbor)."""

    def below_min_reward(self, reward: float | None, rewards: Mapping[str, float] | None) -> bool:
        """True when a verified step's `reward` (its primary reward) and `rewards` (every
        key) miss the step's `min_reward`; False without a reward (nothing was verified)."""
        if self.min_reward is None or reward is None or rewards is None:
            return False
        if isinstance(self.min_reward, Mapping):
            return any(rewards.get(k, -math.inf) < v for k, v in self.min_reward.items())
        return reward < self.min_reward

    @property
    def tests_dir(self) -> Path | None:
        """steps/<name>/tests/, layered over the task's tests/ (None: the task's alone)."""
        path = self.path / "tests"
        return path if path.is_dir() else None

    @property
    def solution_dir(self) -> Path | None:
        """steps/<name>/solution/ when it holds solve.sh (the oracle runs it for this step)."""
        path = self.path / "solution"
        return path if (path / "solve.sh").is_file() else None

    @property
    def workdir_dir(self) -> Path | None:
        """steps/<name>/workdir/: copied into the environment's working directory before the
        step's agent phase, as Harbor uploads it (None: the step has none)."""
        path = self.path / "workdir"
        return path if path.is_dir() and not path.is_symlink() else None

    @property
    def setup_script(self) -> Path | None:
        """steps/<name>/workdir/setup.sh: run (with bash, in the working directory, as the
        agent's user) after the copy and before the step's agent phase; None without one."""
        workdir = self.workdir_dir
        path = workdir / "setup.sh" if workdir is not None else None
        return path if path is not None and path.is_file() else None


class StepSetupError(RuntimeError):
    """A step's `workdir/setup.sh` failed (or its workdir/ could not be copied in): the
    environment the step needs does not exist, so the trial stops with no reward."""

    def __init__(self, step: str, problem: str):
        super().__init__(f"step {step}: {problem}")
        self.step = step
        """The step's name."""
        self.problem = problem
        """What went wrong (the exit status and the end of setup.sh's output)."""


@dataclass(frozen=True)
class HarborTask:
    """One parsed task folder."""

    name: str
    """The folder name (Harbor's task name)."""
    path: Path
    """Absolute path of the task folder."""
    schema_version: str
    """task.toml schema version (`1.0` ... `1.4`)."""
    instruction: str
    """instruction.md without its leading canary lines."""
    agent: AgentSettings
    """`[agent]` settings."""
    verifier: VerifierSettings
    """`[verifier]` settings."""
    environment: EnvironmentSettings
    """`[environment]` settings."""
    solution_env: Mapping[str, str]
    """`[solution].env`: environment of solve.sh."""
    metadata: Mapping[str, Any]
    """`[metadata]`, free-form (difficulty, category, tags, ...)."""
    package_name: str | None = None
    """`[task].name` (e.g. `terminal-bench/fix-git`), when given."""
    notes: tuple[str, ...] = ()
    """What the reader changed, one line each: timeouts clamped to `MAX_TIMEOUT_S`, `${VAR}`
    references not passed from the host (named, never their values)."""
    steps: tuple[TaskStep, ...] = ()
    """`[[steps]]` of a multi-step task, in order (empty: a single-step task)."""
    reward_strategy: StepRewardStrategy = StepRewardStrategy.MEAN
    """`multi_step_reward_strategy` (multi-step tasks only)."""
    tests_override: Path | None = None
    """A step's view of the task: the tests/ to upload (the task's with the step's layered
    over it, made by the runtime); None: the folder's own tests/."""
    solution_override: Path | None = None
    """A step's view of the task: the step's solution/ (None: the folder's own)."""

    @property
    def tests_dir(self) -> Path:
        """tests/ (uploaded to /tests only for the verifier phase)."""
        return self.tests_override or self.path / "tests"

    @property
    def solution_dir(self) -> Path | None:
        """solution/ when it holds solve.sh, else None."""
        if self.steps and self.solution_override is None:
            return None  # a multi-step task's solutions are its steps'
        path = self.solution_override or self.path / "solution"
        return path if (path / "solve.sh").is_file() else None

    def for_step(self, step: TaskStep, tests_dir: Path) -> HarborTask:
        """This task as one of its steps runs it: the step's instruction, timeouts, tests
        (`tests_dir`, already layered) and solution."""
        verifier = replace(
            self.verifier,
            timeout_s=step.verifier_timeout_s,
            env={**self.verifier.env, **step.verifier_env},  # the step's keys win, as in Harbor
            mode=step.verifier_mode or self.verifier.mode,
        )
        return replace(
            self,
            instruction=step.instruction,
            agent=replace(self.agent, timeout_s=step.agent_timeout_s or self.agent.timeout_s),
            verifier=verifier,
            tests_override=tests_dir,
            solution_override=step.solution_dir or self.path / "steps" / step.name / "solution",
        )

    @property
    def environment_dir(self) -> Path:
        """environment/ (Dockerfile and build context)."""
        return self.path / "environment"

    @property
    def dockerfile(self) -> Path | None:
        """environment/Dockerfile, when there is one."""
        path = self.environment_dir / "Dockerfile"
        return path if path.is_file() else None


# ---- reading -------------------------------------------------------------------------------------

_CANARY = re.compile(r"canary", re.IGNORECASE)
_COMMENT = re.compile(r"^\s*(#|<!--|//)")
_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def strip_canary(text: str) -> str:
    """Drop leading comment lines that carry a canary string (and blank lines around them)."""
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines) and (
        not lines[i].strip() or (_COMMENT.match(lines[i]) and _CANARY.search(lines[i]))
    ):
        i += 1
    return "".join(lines[i:]) if i else text


def check_env_names(names: Collection[str]) -> tuple[str, ...]:
    """`names` as a tuple, after checking each is an environment variable name."""
    if isinstance(names, str):
        raise ValueError(f"pass_env must be a list of names, got the string {names!r}")
    for name in names:
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ValueError(f"pass_env: {name!r} is not an environment variable name")
    return tuple(names)


def resolve_template(
    value: str,
    environ: Mapping[str, str] | None = None,
    *,
    allowed: Collection[str] = (),
    withheld: list[str] | None = None,
) -> str:
    """Substitute `${VAR}` and `${VAR:-default}`: a name in `allowed` from `environ` (default:
    the host's environment); any other name (or one `environ` lacks) becomes its default, else
    "". Names that became "" without a default are appended to `withheld`.

    Harbor allows every name; this allows none unless asked (see the module docstring)."""
    env = os.environ if environ is None else environ

    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in allowed and name in env:
            return env[name]
        if default is not None:
            return default
        if withheld is not None:
            withheld.append(name)
        return ""

    return _TEMPLATE.sub(sub, value)


class _Section:
    """Typed access to one table of task.toml; errors name the file and the field."""

    def __init__(
        self,
        task_dir: Path,
        name: str,
        data: Any,
        *,
        pass_env: Collection[str] = (),
        notes: list[str] | None = None,
        withheld: set[str] | None = None,
    ):
        self.task_dir, self.name = task_dir, name
        self.pass_env, self.notes = pass_env, notes if notes is not None else []
        # Variables already named in a note (shared by the sections: one note per variable).
        self.withheld = withheld if withheld is not None else set()
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise TaskFormatError(task_dir, "task.toml", "must be a table", f"[{name}]")
        self.data: dict[str, Any] = data

    def _fail(self, key: str, problem: str) -> TaskFormatError:
        where = f"[{self.name}].{key}" if self.name else key
        return TaskFormatError(self.task_dir, "task.toml", problem, where)

    def number(self, key: str, default: float | None, *, positive: bool = True) -> float | None:
        value = self.data.get(key, default)
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise self._fail(key, f"must be a number, got {value!r}")
        if positive and value <= 0:
            raise self._fail(key, f"must be positive, got {value!r}")
        return float(value)

    def timeout(self, key: str, default: float | None) -> float | None:
        """A positive number of seconds, clamped to `MAX_TIMEOUT_S` with a note."""
        value = self.number(key, default)
        if value is not None and value > MAX_TIMEOUT_S:
            self.notes.append(
                f"[{self.name}].{key}={value:g} clamped to {MAX_TIMEOUT_S:g} s "
                "(the longest timeout a task may set)"
            )
            value = MAX_TIMEOUT_S
        return value

    def integer(self, key: str, default: int | None) -> int | None:
        value = self.data.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._fail(key, f"must be a non-negative integer, got {value!r}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self._fail(key, f"must be true or false, got {value!r}")
        return value

    def string(self, key: str, default: str | None = None) -> str | None:
        value = self.data.get(key, default)
        if value is not None and not isinstance(value, str):
            raise self._fail(key, f"must be a string, got {value!r}")
        return value

    def env(self, key: str = "env") -> dict[str, str]:
        value = self.data.get(key) or {}
        if not isinstance(value, dict):
            raise self._fail(key, f"must be a table of strings, got {value!r}")
        out = {}
        for k, v in value.items():
            if not isinstance(v, str | int | float) or isinstance(v, bool):
                raise self._fail(f"{key}.{k}", f"must be a string, got {v!r}")
            withheld: list[str] = []
            out[str(k)] = resolve_template(str(v), allowed=self.pass_env, withheld=withheld)
            for name in dict.fromkeys(withheld):
                if name in self.withheld:
                    continue
                self.withheld.add(name)
                why = "not set on the host" if name in self.pass_env else "not passed from the host"
                self.notes.append(
                    f"[{self.name}].{key}.{k}: ${{{name}}} is {why}, so it is empty (allow a "
                    f"host variable by name: --pass-env {name}, pass_env=[...])"
                )
        return out

    def size_mb(self, key: str, legacy: str) -> int | None:
        if key in self.data:
            return self.integer(key, None)
        value = self.data.get(legacy)
        if value is None:
            return None
        m = _SIZE.match(str(value))
        if not m:
            raise self._fail(legacy, f"must be a size such as '2G' or '512M', got {value!r}")
        scale = {"": 1 / (1 << 20), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20}
        return max(1, int(float(m.group(1)) * scale[m.group(2).upper()]))


def _read_toml(task_dir: Path) -> dict[str, Any]:
    if not (task_dir / "task.toml").is_file():
        raise TaskFormatError(task_dir, "task.toml", "missing (every task needs one)")
    text = read_task_text(task_dir, "task.toml", "every task needs one")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TaskFormatError(task_dir, "task.toml", f"invalid TOML ({e})") from None
    except RecursionError:  # arrays nested thousands deep: one task must not end the job
        raise TaskFormatError(task_dir, "task.toml", "nested too deeply to parse") from None


def _schema_version(task_dir: Path, data: dict[str, Any]) -> str:
    key = "schema_version" if "schema_version" in data else "version"
    raw = data.get(key, SCHEMA_VERSIONS[-1])
    version = str(raw).strip()
    if version not in SCHEMA_VERSIONS:
        raise TaskFormatError(
            task_dir,
            "task.toml",
            f"unknown schema version {raw!r}; this reader knows {', '.join(SCHEMA_VERSIONS)}",
            key,
        )
    return version


def _network_mode(section: _Section) -> NetworkMode:
    if "network_mode" in section.data:
        raw = section.string("network_mode")
        try:
            return NetworkMode(raw)
        except ValueError:
            choices = ", ".join(m.value for m in NetworkMode)
            raise section._fail("network_mode", f"must be one of {choices}, got {raw!r}") from None
    if "allow_internet" in section.data:
        allow = section.data["allow_internet"]
        if not isinstance(allow, bool):
            raise section._fail("allow_internet", f"must be true or false, got {allow!r}")
        return NetworkMode.PUBLIC if allow else NetworkMode.NO_NETWORK
    return NetworkMode.PUBLIC


def load_task(path: str | os.PathLike[str], *, pass_env: Collection[str] = ()) -> HarborTask:
    """Parse one task folder; `TaskFormatError` names the file and field of any problem.

    `pass_env`: the host environment variables task.toml's `${VAR}` may take (none by
    default; see the module docstring). What the reader changed is in `HarborTask.notes`.
    """
    allowed = check_env_names(pass_env)
    task_dir = Path(path).resolve()
    if not task_dir.is_dir():
        raise TaskFormatError(task_dir, ".", "not a directory")
    from skyrl_gym.envs.harbor import tb1

    if tb1.is_tb1_dir(task_dir):  # read through its Harbor conversion (cached)
        converted = load_task(tb1.converted_tb1(task_dir), pass_env=allowed)
        return replace(converted, name=task_dir.name, notes=(tb1.MIGRATED_NOTE, *converted.notes))
    data = _read_toml(task_dir)
    version = _schema_version(task_dir, data)
    notes: list[str] = []
    withheld: set[str] = set()

    def section(name: str, raw: Any = None) -> _Section:
        """A table of task.toml (`raw`: a nested one, named `name`) with the task's rules."""
        table = data.get(name) if raw is None else raw
        return _Section(task_dir, name, table, pass_env=allowed, notes=notes, withheld=withheld)

    agent = section("agent")
    verifier = section("verifier")
    environment = section("environment")
    solution = section("solution")
    package = section("task")
    metadata = section("metadata").data

    env_settings = _environment_settings(task_dir, environment)

    verifier_timeout = (
        verifier.timeout("timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S) or DEFAULT_VERIFIER_TIMEOUT_S
    )
    steps = _read_steps(task_dir, data, verifier_timeout, notes, section)
    strategy = _reward_strategy(task_dir, data, bool(steps))
    instruction = _instruction(task_dir, steps)
    _check_task_files(task_dir, steps, notes)

    agent_settings = AgentSettings(
        timeout_s=agent.timeout("timeout_sec", None), user=agent.string("user")
    )
    verifier_settings = VerifierSettings(
        timeout_s=verifier_timeout,
        env=verifier.env(),
        user=verifier.string("user"),
        require_exit_zero=verifier.boolean("require_exit_zero", False),
        mode=_verifier_mode(verifier) or VerifierMode.SHARED,
    )
    _note_separate_verifier(verifier_settings.mode, steps, notes)
    _note_unapplied(data, notes)
    task = HarborTask(
        name=task_dir.name,
        path=task_dir,
        schema_version=version,
        instruction=instruction,
        agent=agent_settings,
        verifier=verifier_settings,
        environment=env_settings,
        solution_env=solution.env(),
        metadata=dict(metadata),
        package_name=package.string("name"),
        notes=tuple(notes),
        steps=steps,
        reward_strategy=strategy,
    )
    from skyrl_gym.envs.harbor.lint import log_findings  # the verifier lint

    log_findings(task)  # one warning line per finding of `skyrl harbor lint`
    return task


def _environment_settings(task_dir: Path, environment: _Section) -> EnvironmentSettings:
    """`[environment]`: a linux task, an absolute `workdir`, timeouts and sizes as read."""
    os_name = environment.string("os", "linux") or "linux"
    if os_name != "linux":
        raise TaskFormatError(
            task_dir, "task.toml", f"only linux tasks run here, got {os_name!r}", "[environment].os"
        )
    workdir = environment.string("workdir")
    if workdir is not None and not workdir.startswith("/"):
        raise environment._fail("workdir", f"must be an absolute path, got {workdir!r}")
    return EnvironmentSettings(
        build_timeout_s=environment.timeout("build_timeout_sec", DEFAULT_BUILD_TIMEOUT_S)
        or DEFAULT_BUILD_TIMEOUT_S,
        docker_image=environment.string("docker_image"),
        os=os_name,
        cpus=environment.number("cpus", None),
        memory_mb=environment.size_mb("memory_mb", "memory"),
        storage_mb=environment.size_mb("storage_mb", "storage"),
        gpus=environment.integer("gpus", 0) or 0,
        network_mode=_network_mode(environment),
        workdir=workdir,
        env=environment.env(),
        healthcheck=_healthcheck(environment),
    )


def _healthcheck(parent: _Section) -> HealthcheckSettings | None:
    """`healthcheck` of `parent` (`[environment]` or a step): a table with a `command`, as
    Harbor's HealthcheckConfig (its defaults for the other keys)."""
    raw = parent.data.get("healthcheck")
    if raw is None:
        return None
    hc = _Section(parent.task_dir, f"{parent.name}.healthcheck", raw, notes=parent.notes)
    command = hc.string("command")
    if not command or not command.strip():
        raise hc._fail("command", "must be a non-empty shell command")

    def seconds(key: str, default: float) -> float:
        value = hc.number(key, default, positive=False)
        assert value is not None
        if value < 0:
            raise hc._fail(key, f"must not be negative, got {value!r}")
        return min(value, MAX_TIMEOUT_S)

    return HealthcheckSettings(
        command=command,
        interval_s=seconds("interval_sec", 5.0),
        timeout_s=hc.timeout("timeout_sec", 30.0) or 30.0,
        start_period_s=seconds("start_period_sec", 0.0),
        start_interval_s=seconds("start_interval_sec", 5.0),
        retries=hc.integer("retries", 3) or 0,
    )


def _verifier_mode(verifier: _Section) -> VerifierMode | None:
    """`environment_mode` of a `[verifier]` table (a step's too); a `[verifier.environment]`
    table implies `separate`, and contradicts an explicit `shared` (as in Harbor). None: not
    set at this level."""
    has_env = verifier.data.get("environment") is not None
    raw = verifier.data.get("environment_mode")
    if raw is None:
        return VerifierMode.SEPARATE if has_env else None
    try:
        mode = VerifierMode(raw)
    except ValueError:
        choices = ", ".join(m.value for m in VerifierMode)
        raise verifier._fail("environment_mode", f"must be one of {choices}, got {raw!r}") from None
    if mode is VerifierMode.SHARED and has_env:
        raise verifier._fail(
            "environment_mode",
            f"'shared' contradicts [{verifier.name}.environment] (which implies 'separate')",
        )
    return mode


SEPARATE_VERIFIER_NOTE = (
    "environment_mode=separate ({where}): not applied; Harbor builds the verifier its own "
    "environment from tests/ (its Dockerfile, or [verifier.environment]) and copies in only "
    "the task's artifacts. Here test.sh runs as in 'shared' mode: in a fresh grading sandbox "
    "on the agent's environment (the agent's files, none of its processes), tests/ uploaded"
)
"""The note of a task whose verifier (or a step's) is `separate` (`{where}` names it)."""


# Harbor task.toml settings that neither backend applies: (table, key, what happens here).
# Each one a task sets (non-empty) gets a note; unknown keys are still ignored silently.
_UNAPPLIED = (
    (
        None,
        "artifacts",
        "not collected; only /logs/artifacts is copied into the trial's artifacts/",
    ),
    ("environment", "mcp_servers", "no MCP servers are started for the agent"),
    ("environment", "skills_dir", "skills are not copied for the agent"),
    ("environment", "allowed_hosts", "no allowlist here (network_mode=allowlist is network off)"),
    ("agent", "network_mode", "no per-phase network policy: the [environment] one applies"),
    ("verifier", "network_mode", "no per-phase network policy: the [environment] one applies"),
    ("verifier", "collect", "no collect hooks run (there are no compose services here)"),
)


def _note_unapplied(data: Mapping[str, Any], notes: list[str]) -> None:
    """A note for each Harbor setting in `_UNAPPLIED` the task sets, and for a step's
    `artifacts` (never applied silently)."""
    for table, key, what in _UNAPPLIED:
        holder = data if table is None else data.get(table)
        if isinstance(holder, dict) and holder.get(key) not in (None, [], {}, ""):
            where = key if table is None else f"[{table}].{key}"
            notes.append(f"{where}: not applied; {what}")
    steps = data.get("steps")
    named = [
        str(e.get("name"))
        for e in (steps if isinstance(steps, list) else [])
        if isinstance(e, dict) and e.get("artifacts")
    ]
    if named:
        notes.append(
            f"[[steps]].artifacts ({', '.join(named)}): not applied; not collected per step"
        )


def _note_separate_verifier(
    mode: VerifierMode, steps: tuple[TaskStep, ...], notes: list[str]
) -> None:
    """One note naming every verify pass that Harbor would run in a separate environment."""
    if steps:
        where = [s.name for s in steps if (s.verifier_mode or mode) is VerifierMode.SEPARATE]
        if where:
            notes.append(SEPARATE_VERIFIER_NOTE.format(where="steps " + ", ".join(where)))
    elif mode is VerifierMode.SEPARATE:
        notes.append(SEPARATE_VERIFIER_NOTE.format(where="[verifier]"))


def _instruction(task_dir: Path, steps: tuple[TaskStep, ...]) -> str:
    """What the agent is told: instruction.md without its canary lines (not empty)."""
    if steps:  # the agent is told each step's instruction; the task's own is optional
        return steps[0].instruction
    text = read_task_text(task_dir, "instruction.md", "the agent's instruction")
    instruction = strip_canary(text).strip()
    if not instruction:
        raise TaskFormatError(task_dir, "instruction.md", "empty")
    return instruction


def _check_task_files(task_dir: Path, steps: tuple[TaskStep, ...], notes: list[str]) -> None:
    """The verifier's entry point and solve.sh exist, the Dockerfile and the trees are within
    their bounds (`task_files`); unused compose services get a note in `notes`."""
    from skyrl_gym.envs.harbor import tb1

    if not (task_dir / "tests" / "test.sh").is_file() and not steps:
        raise TaskFormatError(task_dir, "tests/test.sh", "missing (the verifier's entry point)")
    if (task_dir / "solution").is_dir() and not (task_dir / "solution" / "solve.sh").is_file():
        raise TaskFormatError(task_dir, "solution/solve.sh", "missing from solution/")
    if (task_dir / "environment" / "Dockerfile").is_file():
        read_task_text(task_dir, "environment/Dockerfile", "the environment's Dockerfile")
    check_task_tree(task_dir, "tests")
    check_task_tree(task_dir, "solution")
    for step in steps:
        check_task_tree(task_dir, f"steps/{step.name}")
    services = tb1.compose_services(task_dir)
    if services:
        # Neither backend starts compose services: one sandbox (bwrap) or one container
        # (docker) from the Dockerfile; a task that needs a second service fails its tests.
        notes.append(
            f"environment/docker-compose.yaml (services: {', '.join(services[:8])}) is not "
            "used: the task runs in one sandbox/container built from its Dockerfile"
        )


_STEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _read_steps(
    task_dir: Path,
    data: dict[str, Any],
    verifier_timeout: float,
    notes: list[str],
    task_section: Callable[[str, Any], _Section],
) -> tuple[TaskStep, ...]:
    """`[[steps]]`: each a table with a `name` whose folder steps/<name>/ holds
    instruction.md, and tests/test.sh there or in the task's tests/. `task_section` gives
    a nested table of task.toml with the task's `${VAR}` rules (its `pass_env`)."""
    raw = data.get("steps")
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise TaskFormatError(task_dir, "task.toml", "must be a non-empty [[steps]] array", "steps")
    steps: list[TaskStep] = []
    for i, entry in enumerate(raw):
        where = f"steps[{i}]"
        if not isinstance(entry, dict):
            raise TaskFormatError(task_dir, "task.toml", "must be a table", where)
        name = entry.get("name")
        if not isinstance(name, str) or not _STEP_NAME.match(name):
            raise TaskFormatError(
                task_dir, "task.toml", f"must be a folder name, got {name!r}", f"{where}.name"
            )
        if any(s.name == name for s in steps):
            raise TaskFormatError(task_dir, "task.toml", f"duplicate step {name!r}", where)
        section = _Section(task_dir, where, entry, notes=notes)
        agent = _Section(task_dir, f"{where}.agent", entry.get("agent"), notes=notes)
        verifier = task_section(f"{where}.verifier", entry.get("verifier"))
        min_reward = _min_reward(section, entry.get("min_reward"))
        rel = f"steps/{name}"
        text = read_task_text(task_dir, f"{rel}/instruction.md", f"step {name}'s instruction")
        instruction = strip_canary(text).strip()
        if not instruction:
            raise TaskFormatError(task_dir, f"{rel}/instruction.md", "empty")
        if (
            not (task_dir / rel / "tests" / "test.sh").is_file()
            and not (task_dir / "tests" / "test.sh").is_file()
        ):
            raise TaskFormatError(
                task_dir, f"{rel}/tests/test.sh", "missing, and the task has no tests/test.sh"
            )
        steps.append(
            TaskStep(
                name=name,
                instruction=instruction,
                agent_timeout_s=agent.timeout("timeout_sec", None),
                verifier_timeout_s=verifier.timeout("timeout_sec", verifier_timeout)
                or verifier_timeout,
                min_reward=min_reward,
                path=task_dir / rel,
                verifier_env=verifier.env(),
                verifier_mode=_verifier_mode(verifier),
                healthcheck=_healthcheck(section),
            )
        )
    return tuple(steps)


def _min_reward(section: _Section, raw: Any) -> float | dict[str, float] | None:
    """`[[steps]].min_reward`: a number, or a table of numbers by reward key."""
    if not isinstance(raw, dict):
        return section.number("min_reward", None, positive=False)
    per_key = _Section(section.task_dir, f"{section.name}.min_reward", raw)
    if not raw:
        raise section._fail("min_reward", "must name at least one reward key")
    thresholds: dict[str, float] = {}
    for key in raw:
        value = per_key.number(str(key), None, positive=False)
        assert value is not None
        thresholds[str(key)] = value
    return thresholds


def _reward_strategy(task_dir: Path, data: dict[str, Any], multi_step: bool) -> StepRewardStrategy:
    raw = data.get("multi_step_reward_strategy")
    if raw is None:
        return StepRewardStrategy.MEAN
    try:
        return StepRewardStrategy(raw)
    except ValueError:
        choices = ", ".join(m.value for m in StepRewardStrategy)
        raise TaskFormatError(
            task_dir,
            "task.toml",
            f"must be one of {choices}, got {raw!r}",
            "multi_step_reward_strategy",
        ) from None


def roll_up_rewards(
    step_rewards: list[dict[str, float]], strategy: StepRewardStrategy
) -> dict[str, float] | None:
    """A multi-step trial's rewards from its verified steps' (None when none was verified):
    `mean` per key (a key a step lacks counts 0), `final` the last step's."""
    if not step_rewards:
        return None
    if strategy is StepRewardStrategy.FINAL:
        return dict(step_rewards[-1])
    keys = list(dict.fromkeys(k for r in step_rewards for k in r))
    return {k: sum(r.get(k, 0.0) for r in step_rewards) / len(step_rewards) for k in keys}


def is_task_dir(path: Path) -> bool:
    """True when `path` looks like a task folder (a task.toml, or a Terminal-Bench 1
    folder's task.yaml)."""
    return (path / "task.toml").is_file() or (path / "task.yaml").is_file()


def find_task_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """A task folder itself, or the task folders directly inside a dataset folder (sorted).

    A subfolder counts when it has task.toml, instruction.md or tests/, so a malformed task
    is still listed (and then fails to load with its own error). Only that level is read (as
    in Harbor; a task's id is its folder's name): a folder whose tasks are one level further
    down is refused, its error naming them.
    """
    root = Path(path).resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"no task or dataset folder at {root}")
    if is_task_dir(root):
        return [root]
    found = _task_like_dirs(root)
    if not found:
        raise FileNotFoundError(
            f"{root} holds no task folders (folders with a task.toml){_nested_hint(root)}"
        )
    return found


def _task_like_dirs(root: Path) -> list[Path]:
    """The folders directly inside `root` that look like tasks (sorted)."""
    return [
        p
        for p in sorted(root.iterdir())
        if p.is_dir()
        and not p.name.startswith(".")
        and any(
            (p / name).exists() for name in ("task.toml", "task.yaml", "instruction.md", "tests")
        )
    ]


NESTED_HINT_MAX = 4
"""Nested task folders `find_task_dirs`'s error names (the rest are counted)."""


def _nested_hint(root: Path) -> str:
    """What `find_task_dirs`' error adds when the tasks are one level deeper: their paths.
    A task's id is its folder's name (as in Harbor), so a suite of suites is not read as one
    dataset: `a/hello` and `b/hello` would both be `hello`."""
    nested: list[str] = []
    for sub in sorted(root.iterdir()):
        if not sub.is_dir() or sub.name.startswith("."):
            continue
        try:
            nested += [task.relative_to(root).as_posix() for task in _task_like_dirs(sub)]
        except OSError:  # an unreadable subfolder: the hint only names what it can read
            continue
    if not nested:
        return ""
    shown = ", ".join(nested[:NESTED_HINT_MAX])
    more = f" and {len(nested) - NESTED_HINT_MAX} more" if len(nested) > NESTED_HINT_MAX else ""
    return (
        f"; task folders one level down: {shown}{more} (load one folder of tasks at a time: a "
        "task's id is its folder's name)"
    )
