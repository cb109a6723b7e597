"""The installed import names: `skyrl_gym` and `skyrl_sdk.*`, never a bare `agents` or `tools`."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BARE = ("agents", "tools", "sandboxes", "trainer", "benchmarks")

SCRIPT = textwrap.dedent(
    """
    import importlib, pkgutil, sys
    import skyrl_gym, skyrl_sdk
    failed = []
    roots = ["skyrl_gym", *("skyrl_sdk." + name for name in BARE)]
    for root in roots:
        package = importlib.import_module(root)
        for info in pkgutil.walk_packages(package.__path__, root + "."):
            if info.name.endswith("__main__"):
                continue  # runs the CLI
            try:
                importlib.import_module(info.name)
            except ImportError as e:  # an extra that is not installed (vllm): not our concern
                if not any(n in str(e) for n in ("vllm", "wandb", "tensorboard")):
                    failed.append(f"{info.name}: {e}")
    leaked = sorted(n for n in sys.modules if n.split(".")[0] in BARE)
    assert len(sys.modules) > 300, "walked too little"
    print("FAILED", failed)
    print("LEAKED", leaked)
    """
)


def test_every_module_imports_under_its_installed_name(tmp_path):
    # From a directory outside the checkout, so the repository's folders are not on sys.path.
    script = f"BARE = {BARE!r}\n{SCRIPT}"
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert lines["FAILED"] == "[]", lines["FAILED"]
    assert lines["LEAKED"] == "[]", lines["LEAKED"]


def test_bare_folder_names_do_not_resolve_to_this_project(tmp_path):
    probe = (
        "import importlib.util as u, pathlib, skyrl_sdk\n"
        "ours = pathlib.Path(skyrl_sdk.__file__).resolve().parents[1]\n"
        f"specs = [(n, u.find_spec(n)) for n in {BARE!r}]\n"
        "print([n for n, s in specs if s and ours in pathlib.Path(s.origin).resolve().parents "
        "and 'site-packages' not in s.origin])"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_openai_agents_and_skyrl_sdk_agents_live_in_one_environment(tmp_path):
    """`openai-agents` installs the top-level `agents`; ours is `skyrl_sdk.agents`."""
    probe = (
        "import skyrl_sdk.agents, agents\n"
        "from agents import Agent, Runner\n"  # the OpenAI Agents SDK's own API
        "from skyrl_sdk.agents import rollout\n"
        "print(agents.__file__)\n"
        "print(skyrl_sdk.agents.__file__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    theirs, ours = result.stdout.split()
    assert "site-packages" in theirs and theirs.endswith("agents/__init__.py")
    assert "site-packages" not in ours
