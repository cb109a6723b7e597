"""The package installs like a package: the wheel built from this checkout, `pip install`ed into
a fresh virtualenv, runs the core commands from another directory.

Every other test runs the checkout (an editable install), where a data file left out of the
wheel, or a dependency only the dev extras bring, goes unnoticed. Here the wheel is built on
each run from a copy of the checkout (so a stale `build/` cannot hide a missing file), installed
with its core dependencies only (no extras: no torch), and each command runs with its working
directory in a temporary folder and nothing of the checkout on `sys.path`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import needs_bwrap

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]

ROOT = Path(__file__).resolve().parents[2]
MAPPED = ("agents", "tools", "sandboxes", "trainer", "benchmarks")
"""Checkout folders installed as `skyrl_sdk.<folder>` (see setup.py)."""
OWN = ("skyrl_gym", "skyrl_sdk")
"""Checkout folders installed under their own name."""
IGNORED = (".git", ".venv", ".venvs", "__pycache__", "build", "dist", "runs", "*.egg-info")
"""Never copied into the build folder (the .gitignore's build outputs and caches)."""
PIP = ("-m", "pip", "--disable-pip-version-check", "--no-input")
SCRIPT = {
    "actions": {
        "math-000": ["<calculator>22 * 11 - 27</calculator>", "<answer>215</answer>"],
        "math-001": ["<answer>84</answer>"],
    }
}
"""Right answers for the first two bundled math tasks (the README's scripted example)."""
N_HARBOR_TASKS = 9
"""Bundled Harbor task folders (skyrl_gym/envs/harbor/tasks)."""


@dataclass(frozen=True)
class Installed:
    """The built wheel and the fresh virtualenv it is installed in."""

    wheel: Path
    """The wheel file built from the checkout."""
    venv: Path
    """The virtualenv (core dependencies only)."""
    work: Path
    """An empty working directory outside the checkout, for the commands."""
    timings: dict[str, float]
    """Seconds each preparation step took (printed with -s, for the suite's time budget)."""

    @property
    def bin(self) -> Path:
        return self.venv / "bin"


def _source_files() -> list[str]:
    """The checkout's files that a build sees: tracked and untracked-but-not-ignored ones."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
        return sorted(p for p in listed.split("\0") if p and (ROOT / p).is_file())
    ignore = shutil.ignore_patterns(*IGNORED)
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in ignore(dirpath, dirnames)]
        found += [
            os.path.relpath(os.path.join(dirpath, f), ROOT)
            for f in filenames
            if f not in ignore(dirpath, filenames)
        ]
    return sorted(found)


def _copy_checkout(dest: Path) -> list[str]:
    files = _source_files()
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    return files


def _run(argv: list[str | Path], *, timeout: float, **kwargs: object) -> str:
    done = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kwargs
    )
    assert done.returncode == 0, f"$ {' '.join(map(str, argv))}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("wheel")
    timings: dict[str, float] = {}
    start = time.monotonic()
    src, dist, venv, work = base / "src", base / "dist", base / "venv", base / "work"
    for d in (src, dist, work):
        d.mkdir()
    _copy_checkout(src)
    build = [sys.executable, *PIP, "wheel", "--no-deps", "-q", "-w", dist, src]
    try:
        import setuptools  # noqa: F401  (the build backend, already in the dev venv)

        build.insert(-1, "--no-build-isolation")  # no download of a second setuptools
    except ImportError:
        pass
    _run(build, timeout=300)
    (wheel,) = dist.glob("skyrl_sdk-*.whl")
    timings["build wheel"] = time.monotonic() - start

    start = time.monotonic()
    _run([sys.executable, "-m", "venv", venv], timeout=120)
    # Core dependencies only (pip's cache makes this quick after the first run); no extra, so
    # no torch: the commands below must not need one.
    _run([venv / "bin" / "python", *PIP, "install", "-q", wheel], timeout=600)
    timings["venv + install"] = time.monotonic() - start
    yield Installed(wheel, venv, work, timings)
    print("\nwheel test preparation:", {k: round(v, 1) for k, v in timings.items()})


def _env(installed: Installed) -> dict[str, str]:
    """The environment of a user of the installed package: its venv first on PATH, nothing
    of this checkout on the module path, the default command-server choice."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "SKYRL_SANDBOX_SERVER")
    }
    env["PATH"] = f"{installed.bin}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(installed.venv)
    env["PYTHONSAFEPATH"] = "1"  # `python -c` puts no cwd on sys.path either
    return env


def skyrl(
    installed: Installed, *args: str, check: bool = True, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """Run the venv's `skyrl` from the empty working folder."""
    done = subprocess.run(
        [str(installed.bin / "skyrl"), *args],
        cwd=installed.work,
        env=_env(installed),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert done.returncode == 0, f"skyrl {' '.join(args)}\n{done.stdout}\n{done.stderr}"
    return done


def _installed_python(installed: Installed, code: str) -> object:
    out = _run(
        [installed.bin / "python", "-c", code],
        timeout=120,
        cwd=installed.work,
        env=_env(installed),
    )
    return json.loads(out.strip().splitlines()[-1])


def _wheel_name(rel: str) -> str | None:
    """Where a checkout file lands in the wheel (None: not part of the package)."""
    top = rel.split("/", 1)[0]
    if top in MAPPED:
        return f"skyrl_sdk/{rel}"
    return rel if top in OWN else None


def test_the_wheel_holds_every_package_file_and_only_our_import_names(
    installed: Installed,
) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    missing = [
        rel
        for rel in _source_files()
        if (wheel_name := _wheel_name(rel)) is not None
        and "__pycache__" not in rel
        and wheel_name not in names
    ]
    assert missing == [], f"checkout files the wheel lacks: {missing}"
    for needed in ("skyrl_sdk/sandboxes/_server.c", "skyrl_sdk/sandboxes/_grading.c"):
        assert needed in names
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == set(OWN), f"import names other than skyrl_gym and skyrl_sdk.*: {tops}"


def test_the_installed_package_is_the_one_imported(installed: Installed) -> None:
    found = _installed_python(
        installed,
        "import json, sys, skyrl_gym, skyrl_sdk, skyrl_sdk.sandboxes._native as n\n"
        "print(json.dumps({'sdk': skyrl_sdk.__file__, 'gym': skyrl_gym.__file__,\n"
        "  'server_c': str(n.SOURCE), 'grading_c': str(n.GRADING_SOURCE),\n"
        "  'exists': [n.SOURCE.is_file(), n.GRADING_SOURCE.is_file()], 'path': sys.path}))",
    )
    assert isinstance(found, dict)
    venv = installed.venv.resolve()
    for key in ("sdk", "gym", "server_c", "grading_c"):
        assert venv in Path(found[key]).resolve().parents, (key, found[key])
    assert found["exists"] == [True, True]
    assert not any(
        p and ROOT in [Path(p).resolve(), *Path(p).resolve().parents] for p in found["path"]
    )


WALK = """
import importlib, json, pkgutil
from skyrl_gym.extras import extras_providing
bad, by_extra = [], {}
for root in ("skyrl_gym", "skyrl_sdk"):
    package = importlib.import_module(root)
    for info in pkgutil.walk_packages(package.__path__, root + "."):
        if info.name.endswith("__main__"):
            continue  # runs the CLI
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as e:
            extras = extras_providing(e.name or "")
            if extras in (None, ("",)):  # declared nowhere, or a core dependency that is absent
                bad.append(f"{info.name}: {e}")
            else:
                by_extra.setdefault(extras[0], []).append(info.name)
        except ImportError as e:  # a module's own message must name the extra
            if "pip install 'skyrl-sdk[" not in str(e):
                bad.append(f"{info.name}: {e}")
print(json.dumps({"bad": bad, "by_extra": by_extra}))
"""


def test_every_module_imports_or_needs_a_declared_extra(installed: Installed) -> None:
    # Core dependencies only: a module that fails to import must fail on a package some extra
    # of ours provides, never on one that no requirement declares.
    found = _installed_python(installed, WALK)
    assert isinstance(found, dict)
    assert found["bad"] == [], found["bad"]
    assert "train" in found["by_extra"]  # the walk did reach the torch-based modules


def test_help_and_env_list_run_from_another_directory(installed: Installed) -> None:
    help_text = skyrl(installed, "--help").stdout
    for command in ("env", "eval", "sandbox", "harbor", "train"):
        assert command in help_text
    listed = skyrl(installed, "env", "list").stdout
    for env_id in ("math", "harbor", "sql-basic", "search", "lookup"):
        assert env_id in listed


@needs_bwrap
def test_sandbox_exec_runs_the_native_server_built_from_the_installed_source(
    installed: Installed,
) -> None:
    done = skyrl(installed, "sandbox", "exec", "--json", "--", "echo", "hi from the wheel")
    result = json.loads(done.stdout)
    assert (result["exit_code"], result["stdout"]) == (0, "hi from the wheel\n")
    compiler = any(shutil.which(c) for c in (os.environ.get("CC", ""), "cc", "gcc", "clang") if c)
    if not compiler:
        pytest.skip("no C compiler here: the native command server cannot be built")
    assert result["server"] == "native", result["server_note"]
    verbose = skyrl(installed, "sandbox", "exec", "-v", "--", "true")
    assert "[server: native]" in verbose.stderr


def test_eval_math_with_a_scripted_policy(installed: Installed) -> None:
    (installed.work / "answers.json").write_text(json.dumps(SCRIPT))
    skyrl(installed, "eval", "math", "--policy", "scripted:answers.json", "--num", "2", "-o", "ev")
    summary = json.loads((installed.work / "ev" / "results.json").read_text())["summary"]
    assert (summary["episodes"], summary["mean_reward"]) == (2, 1.0)


@needs_bwrap
def test_harbor_run_bundled_oracle_solves_every_bundled_task(installed: Installed) -> None:
    skyrl(installed, "harbor", "run", "-p", "bundled", "-a", "oracle", "-o", "hb", timeout=300)
    job = json.loads((installed.work / "hb" / "job.json").read_text())
    assert (job["n_trials"], job["n_errors"], job["mean_reward"]) == (N_HARBOR_TASKS, 0, 1.0)
    assert installed.venv.resolve() in Path(job["path"]).resolve().parents
    if os.geteuid() == 0 and shutil.which("cc"):  # two uids need root and `_grading.c` built
        isolations = {
            json.loads(p.read_text())["verifier_isolation"]
            for p in (installed.work / "hb").glob("*/result.json")
        }
        assert isolations == {"two_uid"}


def test_a_feature_without_its_extra_names_the_extra(installed: Installed) -> None:
    # No torch in this venv: the tiny model needs the `train` extra, and says so in one line.
    done = skyrl(installed, "eval", "math", "--policy", "tiny", "--num", "1", check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "pip install 'skyrl-sdk[train]'" in done.stderr, done.stderr
