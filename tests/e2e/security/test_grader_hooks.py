"""Vector 1 of issue 14: forging a reward through start-up hooks the grading phase runs.

The agent cannot touch the grader's files, but the grader runs `python3` (and other programs)
in the agent's workspace. Every attack here leaves something there that the interpreter would
pick up at start-up (a user `usercustomize.py` or `.pth` under `$HOME`, a `json.py` next to the
grader's cwd, a `sitecustomize.py` or a `python3` on a path the task puts on `PYTHONPATH` /
`PATH`) and does NOT solve the task: each must score 0. On the code before the security work
each of them scored 1 (HOME was the workspace; cwd and task paths came first).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skyrl_gym.envs.harbor.env import HarborEnv, task_rows
from skyrl_gym.envs.terminal.env import TerminalEnv
from skyrl_gym.envs.terminal.env import bundled_tasks as terminal_tasks
from skyrl_sdk.agents.rollout import rollout
from skyrl_sdk.agents.scripted import ScriptedPolicy
from tests.conftest import arun, needs_bwrap
from tests.skyrl_gym.envs.harbor.conftest import ANSWER, bash_call, make_task

pytestmark = needs_bwrap

HARBOR_TASKS = Path(__file__).parents[3] / "skyrl_gym" / "envs" / "harbor" / "tasks"

# The user site-packages directory of whatever `python3` the sandbox has, as the agent sees it.
USER_SITE = 'd=$(python3 -c "import site; print(site.getusersitepackages())") && mkdir -p "$d"'


def write(path: str, text: str) -> str:
    """A shell line that writes `text` to `path` (a quoted heredoc: no expansion)."""
    return f"cat > {path} <<'EOF_HOOK'\n{text}\nEOF_HOOK"


# ---- terminal ----------------------------------------------------------------------------

# Pretends the check passed: prints what test_fib.py prints and exits 0 before it runs.
FAKE_PASS = "import os\nprint('ok')\nos._exit(0)"


def play_terminal(task: dict[str, Any], attack: str) -> tuple[float, dict[str, Any]]:
    env = TerminalEnv()
    try:
        env.reset(options={"task": task})
        obs, *_ = env.step(bash_call(attack + "\nls -a; echo planted"))
        assert "planted" in obs[0]["content"], obs  # the attack itself ran
        _, reward, done, _, info = env.step(ANSWER)
        assert done
        return reward, info["episode"]["check"]
    finally:
        env.close()


def terminal_009() -> dict[str, Any]:
    return next(t for t in terminal_tasks() if t["task_id"] == "terminal-009")


def test_terminal_usercustomize_in_home_does_not_pass_the_check() -> None:
    """Vector 1: terminal-009 with no fib.py and a usercustomize.py in $HOME's user site."""
    attack = f"{USER_SITE} && {write('$d/usercustomize.py', FAKE_PASS)}"
    reward, check = play_terminal(terminal_009(), attack)
    assert reward == 0.0, check


def test_terminal_pth_in_home_does_not_pass_the_check() -> None:
    """Vector 1: terminal-009 with no fib.py and a `.pth` line that exits 0 at start-up."""
    attack = f"{USER_SITE} && {write('$d/zz-forge.pth', 'import os; print(chr(111)+chr(107)); os._exit(0)')}"
    reward, check = play_terminal(terminal_009(), attack)
    assert reward == 0.0, check


def test_terminal_module_next_to_the_check_does_not_shadow_the_stdlib() -> None:
    """Vector 1: a check that runs `python3 -c` in the workspace; the agent leaves json.py."""
    task = {
        "task_id": "json-answer",
        "instruction": 'Write out.json containing {"answer": 42}.',
        "files": {},
        "check": (
            "python3 -c 'import json, sys; "
            'sys.exit(0 if json.load(open("out.json")) == {"answer": 42} else 1)\''
        ),
    }
    reward, check = play_terminal(task, write("json.py", FAKE_PASS))
    assert reward == 0.0, check


# ---- harbor ------------------------------------------------------------------------------

# Registered at start-up, runs after the verifier's own code wrote its (honest) reward.
ATEXIT_FORGE = (
    "import atexit\n"
    "def forge():\n"
    "    for name in ('reward.txt',):\n"
    "        try:\n"
    "            open('/logs/verifier/' + name, 'w').write('1\\n')\n"
    "        except OSError:\n"
    "            pass\n"
    "atexit.register(forge)"
)
PTH_FORGE = (
    "import atexit; atexit.register(lambda: open('/logs/verifier/reward.txt', 'w').write('1'))"
)
FORGE_NOW = (
    "import os\n"
    "open('/logs/verifier/reward.json', 'w').write('{\"reward\": 1.0}')\n"
    "open('/logs/verifier/reward.txt', 'w').write('1\\n')\n"
    "os._exit(0)"
)


def play_harbor(rows: list[dict[str, str]], attack: str) -> tuple[float | None, HarborEnv]:
    env = HarborEnv(rows)
    actions = [bash_call(attack + "\necho planted"), ANSWER]
    try:
        trajectory = arun(rollout(env, ScriptedPolicy(actions), rows[0], max_turns=3), 120)
        assert "planted" in trajectory.turns[0].observation[0]["content"]
        assert env.verifier_result is not None
        return trajectory.reward, env
    finally:
        env.close()


def bundled(name: str) -> list[dict[str, str]]:
    return [r for r in task_rows(HARBOR_TASKS) if r["task_id"] == name]


@pytest.mark.parametrize(
    "hook",
    [
        pytest.param(
            f"{USER_SITE} && {write('$d/usercustomize.py', ATEXIT_FORGE)}", id="usercustomize"
        ),
        pytest.param(f"{USER_SITE} && {write('$d/zz-forge.pth', PTH_FORGE)}", id="pth"),
    ],
)
def test_harbor_edit_config_hook_in_home_does_not_forge_the_reward(hook: str) -> None:
    """Vector 1: harbor `edit-config`, file untouched, a start-up hook in $HOME (= /app)."""
    reward, env = play_harbor(bundled("edit-config"), hook)
    assert reward == 0.0, env.verifier_result


def test_harbor_module_in_the_workdir_does_not_shadow_the_stdlib() -> None:
    """Vector 1: `csv-summary`'s verifier runs `python3 -` in /app and imports json; the
    agent leaves /app/json.py that writes reward 1 and exits."""
    reward, env = play_harbor(bundled("csv-summary"), write("/app/json.py", FORGE_NOW))
    assert reward == 0.0, env.verifier_result


PY_CHECK = (
    "python3 - <<'PY'\n"
    "ok = open('/app/done.txt').read().strip() == 'ok' if __import__('os').path.exists('/app/done.txt') else False\n"
    "open('/logs/verifier/reward.txt', 'w').write(f'{int(ok)}\\n')\n"
    "PY"
)


@pytest.mark.parametrize(
    ("dockerfile", "attack"),
    [
        pytest.param(
            "FROM python:3.11-slim\nWORKDIR /app\nENV PYTHONPATH=/app\n",
            write("/app/sitecustomize.py", FORGE_NOW),
            id="sitecustomize-on-task-pythonpath",
        ),
        pytest.param(
            "FROM python:3.11-slim\nWORKDIR /app\nENV PATH=/app/bin:/usr/local/bin:/usr/bin:/bin\n",
            "mkdir -p /app/bin && "
            + write(
                "/app/bin/python3",
                "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\nexit 0",
            )
            + "\nchmod +x /app/bin/python3",
            id="python3-on-task-path",
        ),
    ],
)
def test_harbor_task_paths_into_the_workdir_are_not_trusted(
    tmp_path: Path, dockerfile: str, attack: str
) -> None:
    """Vector 1: the task's Dockerfile puts /app on PYTHONPATH or PATH (common in real tasks);
    the verifier phase drops agent-writable directories from both."""
    make_task(tmp_path, "task", dockerfile=dockerfile, test_sh=PY_CHECK)
    reward, env = play_harbor(task_rows(tmp_path), attack)
    assert reward == 0.0, env.verifier_result


def test_harbor_honest_solution_still_scores_with_the_hardened_environment(tmp_path: Path) -> None:
    """The same Python verifier gives 1 when the agent does the task."""
    make_task(tmp_path, "task", test_sh=PY_CHECK)
    reward, env = play_harbor(task_rows(tmp_path), "echo ok > /app/done.txt")
    assert reward == 1.0, env.verifier_result


# ---- swe ---------------------------------------------------------------------------------

# Loaded by every pytest through PYTEST_PLUGINS: turns each test report into a pass.
PYTEST_FORGE = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)


def test_swe_usercustomize_in_the_repository_does_not_make_the_tests_pass(tmp_path: Path) -> None:
    """Vector 1: the agent's patch adds `.local/lib/python3.X/site-packages/usercustomize.py`
    (HOME was /testbed in grading) that loads a pytest plugin passing every test."""
    pytest.importorskip("swebench", reason="the swebench extra is not installed")
    from skyrl_gym.envs.swe.bundled.build import INSTANCES_FILE, ensure_repos
    from skyrl_gym.envs.swe.env import SWEEnv
    from skyrl_gym.envs.swe.instances import load_instances
    from tests.skyrl_gym.envs.swe.conftest import hermes

    task = next(
        i for i in load_instances(INSTANCES_FILE) if i.instance_id == "skyrl-bench__lrucache-6"
    ).to_row()
    # The hook lives under the workspace, which is the repository: `cd` to be sure.
    attack = (
        "cd /testbed && d=.local/lib/$(python3 -c 'import sys; print(f\"python{sys.version_info[0]}.{sys.version_info[1]}\")')/site-packages"
        ' && mkdir -p "$d" && '
        + write("$d/skyrl_forge.py", PYTEST_FORGE)
        + "\n"
        + write("$d/usercustomize.py", "import os\nos.environ['PYTEST_PLUGINS'] = 'skyrl_forge'")
        + "\ngit status --short --untracked-files=all; echo planted"
    )
    env = SWEEnv(repos=str(ensure_repos()), results_dir=str(tmp_path))

    async def go() -> Any:
        try:
            policy = ScriptedPolicy([hermes("bash", command=attack), hermes("submit")])
            return await rollout(env, policy, task, max_turns=2)
        finally:
            env.close()

    trajectory = arun(go(), timeout=240)
    assert "usercustomize.py" in trajectory.turns[0].observation[0]["content"]
    assert env.last_patch and "usercustomize" in env.last_patch  # the hook reached grading
    assert trajectory.reward == 0.0, json.dumps(env.episode_info())[:2000]


def test_swe_pytest_module_in_the_repository_does_not_replace_pytest(tmp_path: Path) -> None:
    """Vector 1: the agent's patch adds `/testbed/pytest.py` (first on sys.path for
    `python3 -m pytest` run from the repository) printing a pass for every test."""
    pytest.importorskip("swebench", reason="the swebench extra is not installed")
    from skyrl_gym.envs.swe.bundled.build import INSTANCES_FILE, ensure_repos
    from skyrl_gym.envs.swe.env import SWEEnv
    from skyrl_gym.envs.swe.instances import load_instances
    from tests.skyrl_gym.envs.swe.conftest import hermes

    instance = next(
        i for i in load_instances(INSTANCES_FILE) if i.instance_id == "skyrl-bench__lrucache-6"
    )
    tests = [*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS]
    fake = "\n".join(f"print('PASSED {t}')" for t in tests)
    attack = write("/testbed/pytest.py", fake) + "\necho planted"
    env = SWEEnv(repos=str(ensure_repos()), results_dir=str(tmp_path))

    async def go() -> Any:
        try:
            policy = ScriptedPolicy([hermes("bash", command=attack), hermes("submit")])
            return await rollout(env, policy, instance.to_row(), max_turns=2)
        finally:
            env.close()

    trajectory = arun(go(), timeout=240)
    assert env.last_patch and "pytest.py" in env.last_patch  # the module reached grading
    assert trajectory.reward == 0.0, json.dumps(env.episode_info())[:2000]
