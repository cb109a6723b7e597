"""`skyrl` commands and env ids come from entry points; skyrl_gym imports no upper package."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import skyrl_gym
from skyrl_gym import cli

ROOT = Path(skyrl_gym.__file__).parent
UPPER = ("skyrl_sdk.agents", "skyrl_sdk.trainer", "skyrl_sdk.benchmarks")
BARE = ("agents", "trainer", "benchmarks")  # the folders' names before the rename


def _imported_modules(tree: ast.AST) -> list[str]:
    """Every module an `import`, `from ... import` or `importlib.import_module("...")` names."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.append(node.args[0].value)
    return names


def _is_upper(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in (*UPPER, *BARE))


def test_the_import_check_sees_upward_imports():
    source = "import skyrl_sdk.trainer\nfrom skyrl_sdk import agents\ndef f():\n    from skyrl_sdk.benchmarks.cli import bench\n"
    assert [n for n in _imported_modules(ast.parse(source)) if _is_upper(n)] == [
        "skyrl_sdk.trainer",
        "skyrl_sdk.agents",
        "skyrl_sdk.benchmarks.cli",
        "skyrl_sdk.benchmarks.cli.bench",
    ]


def test_no_module_of_skyrl_gym_imports_an_upper_package():
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        offenders += [
            f"{path.relative_to(ROOT.parent)}: {n}" for n in _imported_modules(tree) if _is_upper(n)
        ]
    assert offenders == []


# The ladder of docs/architecture.md, bottom first: (folder, import name).
LAYERS = (
    ("sandboxes", "skyrl_sdk.sandboxes"),
    ("tools", "skyrl_sdk.tools"),
    ("skyrl_gym", "skyrl_gym"),
    ("agents", "skyrl_sdk.agents"),
    ("trainer", "skyrl_sdk.trainer"),
    ("benchmarks", "skyrl_sdk.benchmarks"),
)


@pytest.mark.parametrize("level", range(len(LAYERS)), ids=[f for f, _ in LAYERS])
def test_every_package_imports_only_the_layers_below_it(level: int):
    folder, _ = LAYERS[level]
    above = [name for _, name in LAYERS[level + 1 :]]
    offenders = []
    for path in sorted((ROOT.parent / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        offenders += [
            f"{path.relative_to(ROOT.parent)}: {n}"
            for n in _imported_modules(tree)
            if any(n == a or n.startswith(a + ".") for a in above)
        ]
    assert offenders == []


def _run(args: list[str], env_extra: dict[str, str] | None = None, cwd: Path | None = None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )


def _dist(site: Path, name: str, entry_points: str, modules: dict[str, str]) -> None:
    """A minimal installed distribution: a dist-info folder and its modules, in `site`."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    for module, source in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(source))


@pytest.fixture
def plugin_site(tmp_path: Path) -> dict[str, str]:
    """A third-party distribution adding the command `hello` and the env `echo-plugin`, plus a
    broken one adding the command `oops` and an env hook that raises."""
    site = tmp_path / "site"
    _dist(
        site,
        "hello_plugin",
        """
        [skyrl.commands]
        hello = hello_plugin:app

        [skyrl_gym.envs]
        echo-plugin = hello_plugin:register_env
        """,
        {
            "hello_plugin": '''
            """A third-party skyrl plugin."""
            import typer

            app = typer.Typer(help="Say hello from a plugin.", no_args_is_help=True)

            @app.command()
            def greet(name: str = "world") -> None:
                """Greet someone."""
                print(f"hello, {name}")

            def register_env() -> None:
                from skyrl_gym.registry import register

                register("echo-plugin", "hello_plugin_env:EchoEnv", description="A plugin env.")
            '''
        },
    )
    _dist(
        site,
        "broken_plugin",
        """
        [skyrl.commands]
        oops = no_such_module_anywhere:app

        [skyrl_gym.envs]
        oops-env = no_such_module_anywhere:register
        """,
        {},
    )
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


def test_a_third_party_command_is_listed_and_runs(plugin_site):
    helped = _run(["-m", "skyrl_gym.cli", "--help"], plugin_site)
    assert helped.returncode == 0, helped.stderr
    assert "hello" in helped.stdout and "Say hello from a plugin." in helped.stdout
    assert "oops" in helped.stdout and "train" in helped.stdout

    # A one-command Typer app is that command (Typer collapses it), as for built-in commands.
    ran = _run(["-m", "skyrl_gym.cli", "hello", "--name", "sdk"], plugin_site)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "hello, sdk"


def test_a_broken_third_party_command_fails_alone(plugin_site):
    broken = _run(["-m", "skyrl_gym.cli", "oops", "--anything"], plugin_site)
    assert broken.returncode == 1
    assert "`skyrl oops` is unavailable (from broken_plugin): ModuleNotFoundError" in broken.stderr
    listed = _run(["-m", "skyrl_gym.cli", "env", "list"], plugin_site)
    assert listed.returncode == 0, listed.stderr
    assert "echo-plugin" in listed.stdout  # the good plugin's env, registered
    assert "oops-env" in listed.stderr  # the broken env hook, a warning naming it


def test_help_reads_metadata_and_imports_no_command_module():
    code = (
        "import sys\n"
        "from skyrl_gym.cli import main\n"
        "sys.argv = ['skyrl', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', sorted(m for m in sys.modules if m.endswith('cli') or m == 'torch'))\n"
    )
    out = _run(["-c", code])
    loaded = out.stdout.rsplit("LOADED", 1)[1]
    assert "skyrl_gym.cli" in loaded
    for module in (
        "skyrl_sdk.agents.cli",
        "skyrl_sdk.trainer.cli",
        "skyrl_gym.cli.env_cmd",
        "torch",
    ):
        assert f"'{module}'" not in loaded, loaded


def test_every_declared_command_loads():
    """The pyproject entry points name real objects (an `(unavailable)` stub means a typo)."""
    commands = cli.discover_commands()
    assert {"env", "eval", "train", "demo", "bench", "tinker", "serve", "view"} <= set(commands)
    for entry in commands.values():
        command = cli.load_command(entry)
        assert not (command.help or "").startswith("(unavailable)"), (entry, command.help)
        assert command.name == entry.name


def test_lookup_is_registered_without_importing_the_trainer(tmp_path):
    code = (
        "import sys, skyrl_gym\n"
        "print(skyrl_gym.spec('lookup').entry_point)\n"
        "print(sorted(m for m in sys.modules if m.startswith('skyrl_sdk.trainer')))\n"
    )
    out = _run(["-c", code], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    entry_point, modules = out.stdout.strip().splitlines()
    assert entry_point == "skyrl_gym.envs.lookup:LookupEnv"  # a built-in env, not a plugin
    assert modules == "[]"
    listed = _run(["-m", "skyrl_gym.cli", "env", "list"], cwd=tmp_path)
    assert "lookup " in listed.stdout and "Look up a key with a tool" in listed.stdout
