"""The `swe` env: a scripted agent solves an instance with the real tools; cheating earns nothing."""

from __future__ import annotations

from typing import Any

import skyrl_gym
from skyrl_gym.envs.swe.env import SWEEnv
from skyrl_gym.envs.swe.instances import SWEInstance
from skyrl_sdk.agents import ScriptedPolicy, rollout
from tests.skyrl_gym.envs.swe.conftest import arun, by_id, hermes, needs_bwrap

LRU = "skyrl-bench__lrucache-6"

FIX = [
    hermes("search", pattern="def get", include="*.py"),
    hermes("view_file", path="lrucache/cache.py", start_line=15, end_line=20),
    hermes(
        "edit_file",
        path="lrucache/cache.py",
        old_text="        if key in self._data:\n            return self._data[key]\n",
        new_text="        if key in self._data:\n"
        "            self._data.move_to_end(key)\n"
        "            return self._data[key]\n",
    ),
    hermes(
        "bash", command="python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -1 && git diff --stat"
    ),
    hermes("submit"),
]

# Makes every test "pass" without touching the bug: rewrites the test file the hidden tests
# live in, and adds a conftest.py hook that turns failures into passes.
CHEAT = [
    hermes(
        "edit_file",
        path="tests/test_cache.py",
        old_text="",
        new_text="def test_get_refreshes_recency():\n    assert True\n",
    ),
    hermes(
        "edit_file",
        path="conftest.py",
        old_text="",
        new_text=(
            "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
            "def pytest_runtest_makereport(item, call):\n"
            "    outcome = yield\n    report = outcome.get_result()\n"
            "    report.outcome = 'passed'\n"
        ),
    ),
    hermes("bash", command="git add -A && git -c user.name=a -c user.email=a@a commit -qm fix"),
    hermes("submit"),
]


def _play(env: Any, actions: list[str], task: dict[str, Any]) -> Any:
    async def go() -> Any:
        try:
            return await rollout(env, ScriptedPolicy(actions), task, max_turns=len(actions))
        finally:
            env.close()

    return arun(go(), timeout=180)


@needs_bwrap
def test_scripted_agent_solves_an_instance_with_the_real_tools(
    instances: list[SWEInstance], repos_dir: str, tmp_path
) -> None:
    env = skyrl_gym.make("swe", repos=repos_dir, results_dir=str(tmp_path))
    task = by_id(instances, LRU).to_row()
    trajectory = _play(env, FIX, task)
    assert trajectory.stop_reason.value == "done", trajectory.error
    assert trajectory.reward == 1.0 and trajectory.success
    search, view, edit, bash = (t.observation[0]["content"] for t in trajectory.turns[:4])
    assert "lrucache/cache.py:" in search and "def get" in view
    assert "edited lrucache/cache.py" in edit
    assert "3 passed" in bash  # the agent sees only the tests at base_commit
    assert (tmp_path / LRU / "report.json").is_file()
    assert "move_to_end" in (tmp_path / LRU / "patch.diff").read_text()


@needs_bwrap
def test_editing_the_tests_does_not_earn_the_reward(
    instances: list[SWEInstance], repos_dir: str
) -> None:
    task = by_id(instances, LRU).to_row()
    env = SWEEnv(repos=repos_dir)
    trajectory = _play(env, CHEAT, task)
    assert trajectory.stop_reason.value == "done", trajectory.error
    assert trajectory.reward == 0.0 and not trajectory.success
    assert env.stripped == ["conftest.py", "tests/test_cache.py"]
    assert env.last_result is not None and env.last_result.outcome.value == "empty_patch"
    # Even with test changes kept, the tests are restored from the instance before grading.
    env = SWEEnv(repos=repos_dir, strip_tests=False)
    trajectory = _play(env, [CHEAT[0], CHEAT[-1]], task)
    assert trajectory.reward == 0.0
    assert env.last_result is not None and env.last_result.outcome.value == "unresolved"
    failed = env.last_result.report["tests_status"]["FAIL_TO_PASS"]["failure"]
    assert failed == ["tests/test_cache.py::test_get_refreshes_recency"]


@needs_bwrap
def test_env_passes_the_checker(repos_dir: str) -> None:
    skyrl_gym.check_env(lambda: skyrl_gym.make("swe", repos=repos_dir))


@needs_bwrap
def test_agent_phase_sees_no_gold_patch_checkout_or_project_venv(
    instances: list[SWEInstance], repos_dir: str
) -> None:
    """Issue 14, vector 2: the agent's sandbox has the repository and a small read-only
    package directory with pytest, never the instances file (gold patches, hidden tests), the
    project's checkout or its venv."""
    look = (
        "find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o "
        "\\( -name instances.jsonl -o -name 'skyrl-bench__*' -o -name pyvenv.cfg \\) -print "
        "2>/dev/null; echo FIND-DONE; "
        "python3 -c 'import pytest, sys; print(\"PYTEST-AT\", pytest.__file__)'"
    )
    task = by_id(instances, LRU).to_row()
    env = SWEEnv(repos=repos_dir)
    trajectory = _play(env, [hermes("bash", command=look), hermes("submit")], task)
    seen = trajectory.turns[0].observation[0]["content"]
    found, _, rest = seen.partition("FIND-DONE")
    assert found.strip() == "", found
    assert "PYTEST-AT" in rest and ".venv" not in rest and "site-packages" not in rest, rest
