"""SWE grading owns its test runner: the files that configure or hook it come from
`base_commit`, and the grading environment keeps the repository off the start-up path."""

from __future__ import annotations

import subprocess
from pathlib import Path

from skyrl_gym.envs.swe.harness import (
    HarnessConfig,
    git_metadata,
    grading_command_env,
    is_runner_file,
    restore_git_metadata_script,
    restore_runner_script,
    runner_files,
    with_runner_restore,
)
from skyrl_gym.envs.swe.packages import RUNNER_PLUGIN, pytest_plugins_in, runner_plugin_dir
from skyrl_sdk.sandboxes import SandboxSpec

RESET = ">>>>> Reset Failed"


def test_runner_files_are_configs_hooks_pth_and_entry_points() -> None:
    for path in (
        "pyproject.toml",
        "sub/setup.cfg",
        "tox.ini",
        "pytest.ini",
        ".pytest.ini",
        "tests/conftest.py",
        "sitecustomize.py",
        "usercustomize.py",
        "x.pth",
        "a-1.0.dist-info/entry_points.txt",
        "a.egg-info/entry_points.txt",
    ):
        assert is_runner_file(path), path
    for path in ("setup.py", "tests/test_conf.py", "entry_points.txt", "pkg/conftest.pyc"):
        assert not is_runner_file(path), path


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_restore_script_puts_back_the_commits_files_and_removes_the_others(tmp_path) -> None:
    tree = tmp_path / "repo"
    _tree(
        tree,
        {
            "pyproject.toml": "[tool.pytest.ini_options]\ntestpaths = ['tests']\n",
            "pkg/conftest.py": "# the repo's own\n",
            "tests/test_a.py": "def test_a(): pass\n",
            "src/mod.py": "x = 1\n",
            ".git/hooks/conftest.py": "# inside .git: never a runner file\n",
        },
    )
    (tree / "link.pth").symlink_to("elsewhere")
    pristine = runner_files(tree)
    assert [f.path for f in pristine] == ["link.pth", "pkg/conftest.py", "pyproject.toml"]
    # What a model patch and the test patch then did to the tree:
    _tree(
        tree,
        {
            "pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-p evil'\n",
            "pkg/conftest.py": "# rewritten\n",
            "conftest.py": "# added at the root\n",
            "tests/conftest.py": "# added by the test patch: kept\n",
            "sitecustomize.py": "import evil\n",
            "deep/er/tox.ini": "[pytest]\naddopts = -p evil\n",
            "evil.pth": "import evil\n",
            "evil-1.0.dist-info/entry_points.txt": "[pytest11]\nevil = evil\n",
            "src/mod.py": "x = 2\n",
        },
    )
    (tree / "link.pth").unlink()
    script = restore_runner_script(pristine, ["tests/conftest.py", "tests/test_a.py"], RESET)
    done = subprocess.run(["bash", "-c", script], cwd=tree, capture_output=True, text=True)
    assert done.returncode == 0 and RESET not in done.stdout, done.stdout + done.stderr
    assert (tree / "pyproject.toml").read_text().endswith("testpaths = ['tests']\n")
    assert (tree / "pkg/conftest.py").read_text() == "# the repo's own\n"
    assert (tree / "tests/conftest.py").read_text() == "# added by the test patch: kept\n"
    assert (tree / "link.pth").is_symlink() and str((tree / "link.pth").readlink()) == "elsewhere"
    for gone in (
        "conftest.py",
        "sitecustomize.py",
        "deep/er/tox.ini",
        "evil.pth",
        "evil-1.0.dist-info/entry_points.txt",
    ):
        assert not (tree / gone).exists(), gone
    assert (tree / "src/mod.py").read_text() == "x = 2\n"  # the fix itself stays
    assert (tree / ".git/hooks/conftest.py").exists()


def test_the_restore_runs_just_before_the_tests() -> None:
    script = "cd /testbed\ngit apply test.patch\n: '>>>>> Start Test Output'\npytest\n"
    out = with_runner_restore(script, "RESTORE\n", ">>>>> Start Test Output")
    assert out.index("git apply") < out.index("RESTORE") < out.index("Start Test Output")
    assert with_runner_restore("pytest\n", "RESTORE\n", "nope").endswith("pytest\nRESTORE\n")


def test_the_grading_environment_keeps_the_repository_off_the_start_up_path() -> None:
    spec = SandboxSpec(env={"PYTHONPATH": "/pkgs", "PYTEST_ADDOPTS": "-p evil"})
    env = grading_command_env(HarnessConfig(), spec, "/testbed", "python3 -m pytest -rA")
    assert env["PYTHONPATH"] == f"/pkgs:{runner_plugin_dir()}"
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert env["PYTEST_ADDOPTS"] == f"-p {RUNNER_PLUGIN} -p no:cacheprovider"
    assert env["SKYRL_SWE_REPO"] == "/testbed" and env["PYTHONSAFEPATH"] == "1"
    assert env["GIT_CONFIG_KEY_0"] == "core.hooksPath" and env["GIT_NO_REPLACE_OBJECTS"] == "1"
    # A runner that is not pytest imports the repository from its own path, as before.
    other = grading_command_env(HarnessConfig(), spec, "/testbed", "./tests/runtests.py")
    assert other["PYTHONPATH"].endswith(":/testbed")
    assert (runner_plugin_dir() / f"{RUNNER_PLUGIN}.py").is_file()


def test_git_metadata_is_put_back_after_the_patch(tmp_path) -> None:
    tree = tmp_path / "repo"
    _tree(tree, {".git/config": "[core]\n\tbare = false\n", "a.py": "x\n"})
    pristine = git_metadata(tree)
    assert [f.path for f in pristine] == [".git/config"]
    _tree(
        tree,
        {
            ".git/config": '[filter "x"]\n\tclean = evil\n',
            ".git/info/attributes": "* filter=x\n",
            ".git/objects/info/alternates": "/elsewhere\n",
        },
    )
    script = restore_git_metadata_script(pristine)
    done = subprocess.run(["bash", "-c", script], cwd=tree, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tree / ".git/config").read_text() == "[core]\n\tbare = false\n"
    assert not (tree / ".git/info/attributes").exists()
    assert not (tree / ".git/objects/info/alternates").exists()


def test_the_package_directorys_own_plugins_are_loaded_by_name(tmp_path) -> None:
    """Auto-loading is off, so a plugin the harness's package directory holds (e.g. one added
    with HarnessConfig.packages) is named with -p instead."""
    _tree(
        tmp_path,
        {
            "pytest_asyncio-1.0.dist-info/entry_points.txt": "[pytest11]\nasyncio = pytest_asyncio.plugin\n",
            "other-2.0.dist-info/entry_points.txt": "[console_scripts]\nother = other:main\n",
            "cov-3.0.dist-info/entry_points.txt": "[pytest11]\npytest_cov = pytest_cov.plugin:x\n",
        },
    )
    assert pytest_plugins_in(tmp_path) == ("pytest_asyncio.plugin", "pytest_cov.plugin")
    spec = SandboxSpec(env={"PYTHONPATH": str(tmp_path)})
    env = grading_command_env(HarnessConfig(), spec, "/testbed", "python3 -m pytest")
    assert env["PYTEST_ADDOPTS"] == (
        f"-p {RUNNER_PLUGIN} -p pytest_asyncio.plugin -p pytest_cov.plugin -p no:cacheprovider"
    )
