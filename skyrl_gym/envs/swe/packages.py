"""A small, read-only package directory for sandboxes: only what grading needs (pytest).

A sandbox never sees the project's virtualenv (its packages, and the checkout an editable
install points to, would be readable by the agent). Commands that need Python packages inside
get a directory holding copies of just those distributions and their requirements, taken
from an interpreter's environment (this process's by default: no network, no pip), built
once into the cache and bound read-only into the sandbox, on `PYTHONPATH`.

    packages = sandbox_packages(("pytest",))
    spec = SandboxSpec(ro_binds=(str(packages),), env={"PYTHONPATH": str(packages)})
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from skyrl_gym.cache import build_once, cache_dir

DEFAULT_PACKAGES: tuple[str, ...] = ("pytest",)
"""What SWE grading needs inside the sandbox: pytest (and, through it, pluggy, iniconfig,
packaging)."""

# Run by the chosen interpreter: the requirement closure of the named distributions, with each
# one's installed files below its site directory. Markers are evaluated when `packaging` is
# importable there; requirements behind an extra are never followed.
_RESOLVE = r"""
import json, sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    Requirement = None

def name_of(spec):
    if Requirement is not None:
        req = Requirement(spec)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            return None
        return req.name
    head = spec.split(";")[0]
    if ";" in spec and "extra" in spec.split(";", 1)[1]:
        return None
    for stop in "<>=!~[ (":
        head = head.split(stop)[0]
    return head.strip() or None

todo, seen, out = list(sys.argv[1:]), set(), {}
while todo:
    name = todo.pop()
    key = name.lower().replace("_", "-")
    if key in seen:
        continue
    seen.add(key)
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        if name in sys.argv[1:]:
            raise SystemExit(f"{name} is not installed in {sys.executable}")
        continue
    base = dist.locate_file("")
    files = [str(f) for f in dist.files or () if not str(f).startswith("..")]
    out[dist.metadata["Name"]] = {"version": dist.version, "base": str(base), "files": files}
    for spec in dist.requires or ():
        dep = name_of(spec)
        if dep:
            todo.append(dep)
print(json.dumps({"python": list(sys.version_info[:2]), "dists": out}))
"""


SYSTEM_CACHE = Path("/var/cache/skyrl/sandbox-packages")
"""Where the directories go when the user cache is out of the sandbox user's reach (as root,
`/root` is 0700 and bwrap, already running as `nobody`, could not bind from it)."""


def packages_root() -> Path:
    """Where package directories are built: `$SKYRL_SANDBOX_PACKAGES`, else
    `<cache_dir>/sandbox-packages` if every existing ancestor lets others through (o+x), else
    `SYSTEM_CACHE`."""
    env = os.environ.get("SKYRL_SANDBOX_PACKAGES")
    if env:
        return Path(env)
    preferred = cache_dir() / "sandbox-packages"
    if os.geteuid() != 0:
        return preferred  # sandboxes run as this same user
    for parent in [preferred, *preferred.parents]:
        if parent.exists() and not parent.stat().st_mode & 0o001:
            return SYSTEM_CACHE
    return preferred


class PackagesUnavailable(RuntimeError):
    """A requested distribution is not installed in the interpreter's environment."""


def _resolve(names: Sequence[str], python: str) -> dict:
    done = subprocess.run(
        [python, "-I", "-c", _RESOLVE, *names],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        # The default set is what SWE grading needs: the `swe` extra installs it.
        hint = " (pip install 'skyrl-sdk[swe]')" if set(names) <= set(DEFAULT_PACKAGES) else ""
        raise PackagesUnavailable(
            f"cannot collect {', '.join(names)} from {python}: {done.stderr.strip()[-500:]}{hint}"
        )
    return json.loads(done.stdout)


def sandbox_packages(names: Sequence[str] = DEFAULT_PACKAGES, python: str = sys.executable) -> Path:
    """A read-only directory with the distributions `names` (and their requirements) copied
    from `python`'s environment; built once per set of versions (`build_once`), in the cache.

    Only files below each distribution's site directory are copied (no console scripts:
    run `python3 -m pytest`). Pure-Python packages work with any sandbox `python3` of a
    compatible version; compiled ones need the same Python version as `python`.
    Raises `PackagesUnavailable` when one of `names` is not installed there.
    """
    resolved = _resolve(sorted(set(names)), python)
    dists: dict[str, dict] = resolved["dists"]
    key = json.dumps(
        [resolved["python"], sorted((n, d["version"]) for n, d in dists.items())]
    ).encode()
    root = packages_root()
    root.mkdir(parents=True, exist_ok=True, mode=0o755)
    target = root / hashlib.sha256(key).hexdigest()[:16]

    def build(staged: Path) -> None:
        staged.mkdir(parents=True)
        for dist in dists.values():
            base = Path(dist["base"])
            for rel in dist["files"]:
                src = base / rel
                if "__pycache__" in src.parts or not src.is_file():
                    continue
                dest = staged / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest, follow_symlinks=True)
        for path in [staged, *staged.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)

    return build_once(target, build)


def pytest_plugins_in(directory: str | Path) -> tuple[str, ...]:
    """The modules of the `pytest11` entry points of the distributions in a package directory
    (`sandbox_packages`), sorted: what pytest would auto-load from it. SWE grading turns
    auto-loading off (a repository's own dist-info could name a plugin) and loads these by
    name instead (`-p MODULE`)."""
    import configparser

    modules: set[str] = set()
    for entry_points in sorted(Path(directory).glob("*.dist-info/entry_points.txt")):
        parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        try:
            parser.read_string(entry_points.read_text(encoding="utf-8"))
        except (configparser.Error, UnicodeDecodeError):
            continue
        if parser.has_section("pytest11"):
            for value in parser["pytest11"].values():
                module = value.split(":")[0].strip()
                if module:
                    modules.add(module)
    return tuple(sorted(modules))


RUNNER_PLUGIN = "skyrl_swe_runner"
"""The module name of SWE grading's own pytest plugin (`-p skyrl_swe_runner`)."""


def runner_plugin_dir() -> Path:
    """A read-only directory holding only `skyrl_swe_runner.py` (built once per content, in the
    cache): put it on a grading sandbox's `PYTHONPATH` and bind it read-only."""
    source = Path(__file__).with_name(f"{RUNNER_PLUGIN}.py").read_bytes()
    root = packages_root()
    root.mkdir(parents=True, exist_ok=True, mode=0o755)
    target = root / f"swe-runner-{hashlib.sha256(source).hexdigest()[:16]}"

    def build(staged: Path) -> None:
        staged.mkdir(parents=True)
        (staged / f"{RUNNER_PLUGIN}.py").write_bytes(source)
        staged.chmod(0o755)
        (staged / f"{RUNNER_PLUGIN}.py").chmod(0o644)

    return build_once(target, build)


__all__ = [
    "DEFAULT_PACKAGES",
    "RUNNER_PLUGIN",
    "SYSTEM_CACHE",
    "PackagesUnavailable",
    "packages_root",
    "pytest_plugins_in",
    "runner_plugin_dir",
    "sandbox_packages",
]
