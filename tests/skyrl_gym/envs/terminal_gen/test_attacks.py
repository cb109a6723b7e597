"""The security issue's attacks (tests/e2e/security/harbor_attacks) against generated verifiers.

Every family's verifier is attacked with agents that do not solve the task but try to earn
the reward another way; each must score 0. Agent-phase attacks: a reward written under
/logs/verifier, start-up hooks and shadowing programs for the verifier's tools (Python and
shell), a detached process waiting for the verifier. For families whose verifier runs the
agent's program, the program itself attacks from inside the grading phase: it writes reward
files, leaves a writer running, rewrites /tests/test.sh while it runs and swaps reward.txt for
a symlink.
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

import pytest

from skyrl_gym.envs.terminal_gen import FAMILIES, make_spec, write_task
from skyrl_gym.envs.terminal_gen.validate import Probe, run_probe
from skyrl_sdk.sandboxes.bwrap import GRADING_UIDS_ENV
from tests.conftest import needs_bwrap

pytestmark = needs_bwrap
SEED = 21
PROGRAM_FAMILIES = [f for f in FAMILIES if make_spec(f, SEED).runs_agent_code]

FORGE = "echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 1}' > /logs/verifier/reward.json"

AGENT_PHASE_ATTACKS = {
    "reward-written-by-the-agent": FORGE,
    "python-startup-hooks": r"""
forge='open("/logs/verifier/reward.txt", "w").write("1\n")'
site=$(python3 -c 'import site; print(site.getusersitepackages())')
mkdir -p "$site"
printf 'import atexit\natexit.register(lambda: %s)\n' "$forge" > "$site/usercustomize.py"
printf 'import atexit; atexit.register(lambda: %s)\n' "$forge" > "$site/zz-forge.pth"
for m in json sitecustomize base64 os; do printf 'import os\n%s\nos._exit(0)\n' "$forge" > /app/$m.py; done
""",
    # Programs named like the tools a verifier uses, in /app and /tmp, plus shell rc files.
    "shadowed-tools": r"""
for dir in /app /app/bin /tmp; do
  mkdir -p $dir
  for t in bash sh grep sed tr head cat base64 stat tar sort timeout awk wc printf test; do
    printf '#!/bin/sh\necho 1 > /logs/verifier/reward.txt\necho 1\n' > $dir/$t; chmod +x $dir/$t
  done
done
for rc in .bashrc .profile .bash_profile .bash_logout; do echo "%s" > /app/$rc; done
""".replace("%s", FORGE.replace('"', '\\"')),
    "detached-writer": r"""
setsid nohup sh -c '
  while :; do
    if [ -e /tests/test.sh ] || [ -e /logs/verifier/test-stdout.txt ]; then
      echo 1 > /logs/verifier/reward.txt; echo "{\"reward\": 1}" > /logs/verifier/reward.json
    fi
    sleep 0.02
  done' > /dev/null 2>&1 < /dev/null &
""",
}


def _program_attack(program: str) -> str:
    """solve.sh that installs, as the program the verifier runs, an attacker."""
    body = f"""#!/bin/bash
# Runs inside the grading phase, with the verifier's uid.
{FORGE}
setsid sh -c 'for i in $(seq 300); do {FORGE}; sleep 0.01; done' >/dev/null 2>&1 </dev/null &
printf '#!/bin/bash\\n{FORGE}\\n' > /tests/test.sh 2>/dev/null
rm -f /logs/verifier/reward.txt; ln -s /app/one /logs/verifier/reward.txt
echo 1 > /app/one
echo 0
"""
    return f"cat > /app/{program} <<'ATTACK'\n{body}ATTACK\nchmod +x /app/{program}\n"


def _attack(task_dir: Path, script: str) -> float | None:
    # `cross` runs an arbitrary script as the agent: here, the attack.
    return asyncio.run(run_probe(task_dir, Probe.CROSS, script=script)).reward


@pytest.mark.slow
@pytest.mark.parametrize("attack", list(AGENT_PHASE_ATTACKS))
def test_agent_phase_attacks_score_zero_on_every_family(tmp_path, attack):
    script = AGENT_PHASE_ATTACKS[attack]
    rewards = {}
    for family in FAMILIES:
        task_dir = write_task(make_spec(family, SEED), tmp_path)
        rewards[family] = _attack(task_dir, script)
    assert {f: r for f, r in rewards.items() if r} == {}


@pytest.mark.parametrize("family", PROGRAM_FAMILIES)
def test_the_agents_program_cannot_forge_the_reward_from_inside_the_verifier(tmp_path, family):
    spec = make_spec(family, SEED)
    task_dir = write_task(spec, tmp_path)
    assert spec.program is not None
    result = asyncio.run(run_probe(task_dir, Probe.CROSS, script=_program_attack(spec.program)))
    assert not result.reward, result
    # The attack did run in the grading phase: the test's output shows the program's "0", or
    # the writer it left outlived it (`require_exit_zero` voids the verdict then).
    ran = ("printed 0", "verifier_stray_processes")
    assert any(s in result.message for s in ran) or result.reward == 0.0, result


def _killer(program: str) -> str:
    body = (
        "#!/bin/bash\n"
        "echo 1 > /logs/verifier/reward.txt\n"  # first the reward, then kill test.sh
        "for d in /proc/[0-9]*; do\n"
        "  tr '\\0' ' ' < $d/cmdline 2>/dev/null | grep -q tests/test.sh && kill -9 ${d#/proc/}\n"
        "done\n"
    )
    return f"printf %s {shlex.quote(body)} > /app/{program}; chmod +x /app/{program}"


def _assert_killer_earned_nothing(result, *, one_uid: bool) -> None:
    if one_uid:  # it had test.sh's uid: it wrote reward 1 and killed test.sh, which voids it
        assert result.reward is None
        assert "verifier_killed" in result.message and "reward it left (1)" in result.message
    else:  # two uids: as the agent it could neither write the reward nor kill test.sh
        assert result.reward == 0.0 and "verifier_killed" not in result.message, result


@pytest.mark.parametrize("uids", ["default", "off"])
def test_a_program_that_kills_the_verifier_earns_nothing_in_the_env(tmp_path, uids, monkeypatch):
    """With one uid the reward it leaves is void (test.sh did not end on its own); with two
    it cannot write the reward or kill test.sh at all."""
    if uids == "off":
        monkeypatch.setenv(GRADING_UIDS_ENV, "off")
    spec = make_spec("write-script", SEED)
    task_dir = write_task(spec, tmp_path)
    assert spec.program is not None
    result = asyncio.run(run_probe(task_dir, Probe.CROSS, script=_killer(spec.program)))
    _assert_killer_earned_nothing(result, one_uid=result.reward is None or uids == "off")


def test_a_program_that_kills_the_verifier_earns_nothing_under_plain_harbor_grading(
    tmp_path, monkeypatch
):
    """Plain Harbor semantics (test.sh's exit status ignored, `strict=False`), one uid: a
    killed test.sh still voids its reward (`verifier_killed`); this was the known hole."""
    monkeypatch.setenv(GRADING_UIDS_ENV, "off")
    spec = make_spec("write-script", SEED)
    task_dir = write_task(spec, tmp_path)
    assert spec.program is not None
    result = asyncio.run(
        run_probe(task_dir, Probe.CROSS, script=_killer(spec.program), strict=False)
    )
    _assert_killer_earned_nothing(result, one_uid=True)


def test_generated_tasks_require_exit_zero(tmp_path):
    """The generated task.toml asks `skyrl harbor run` for the same rule as the env."""
    from skyrl_gym.envs.harbor.task import load_task

    task_dir = write_task(make_spec("write-script", SEED), tmp_path)
    assert load_task(task_dir).verifier.require_exit_zero
