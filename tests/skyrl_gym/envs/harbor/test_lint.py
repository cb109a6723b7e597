"""`skyrl harbor lint`: each rule on its fixtures, the bundled tasks, a deliberately bad task,
the warnings at load time, and the same rule functions over the terminal env's checks and the
SWE harness's test commands.

Fixtures (tests/skyrl_gym/envs/harbor/lint_fixtures/RULE/): positive.sh and positive.py must raise that rule
and nothing else, exactly on the lines marked `# lint: flagged`; negative.sh (shell with an
embedded Python heredoc) must raise nothing at all.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from skyrl_gym.envs.harbor.lint import (
    RULES,
    Finding,
    LintContext,
    LintRule,
    harbor_context,
    lint_task,
    lint_text,
)
from skyrl_gym.envs.harbor.task import find_task_dirs, load_task

FIXTURES = Path(__file__).parent / "lint_fixtures"
BAD_TASK = FIXTURES / "bad-task"
BUNDLED = Path(__file__).parents[4] / "skyrl_gym" / "envs" / "harbor" / "tasks"
TERMINAL_TASKS = Path(__file__).parents[4] / "skyrl_gym" / "envs" / "terminal" / "tasks.jsonl"
MARK = "# lint: flagged"


def marked_lines(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if MARK in line]


def lines_of(findings: list[Finding]) -> list[int]:
    return sorted({f.line for f in findings})


# ---- the fixtures -------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", list(LintRule), ids=lambda r: r.value)
@pytest.mark.parametrize("name", ["positive.sh", "positive.py"])
def test_positive_fixture_raises_its_rule_on_the_marked_lines(rule: LintRule, name: str) -> None:
    path = FIXTURES / rule.value / name
    text = path.read_text()
    assert marked_lines(text), f"{path} marks no line"
    found = RULES[rule](text, LintContext(), name)
    assert found and {f.rule for f in found} == {rule}
    assert lines_of(found) == marked_lines(text)
    # No other rule fires on it: each fixture shows one pattern.
    assert {f.rule for f in lint_text(text, LintContext(), name)} == {rule}


@pytest.mark.parametrize("rule", list(LintRule), ids=lambda r: r.value)
def test_negative_fixture_is_clean_under_every_rule(rule: LintRule) -> None:
    path = FIXTURES / rule.value / "negative.sh"
    assert lint_text(path.read_text(), LintContext(), "negative.sh") == []


def test_every_rule_has_its_three_fixtures() -> None:
    for rule in LintRule:
        names = sorted(p.name for p in (FIXTURES / rule.value).iterdir())
        assert names == ["negative.sh", "positive.py", "positive.sh"], rule


def test_suppression_comment_silences_only_the_named_rule() -> None:
    text = (
        "#!/bin/bash\n"
        "source /app/env.sh  # skyrl-lint: ignore[imports-agent-code] (the task's own file)\n"
        "out=$(python3 /app/x.py)  # skyrl-lint: ignore[git-hooks-on]\n"
        "echo $out > /logs/verifier/reward.txt\n"
    )
    found = lint_text(text, LintContext(), "test.sh")
    assert [(f.rule, f.line) for f in found] == [(LintRule.NO_TIMEOUT, 3)]


def test_workdir_and_copy_destinations_are_agent_paths(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM debian\nWORKDIR /src\nCOPY data /data\n")
    ctx = harbor_context(None, dockerfile)
    assert ctx.cwd == "/src" and ctx.is_agent("/data/x.csv") and ctx.is_agent("/src/a")
    assert not ctx.is_agent("/tests/x") and not ctx.is_agent("/logs/verifier/reward.txt")
    text = "want=$(cat /data/expected.csv)\ngit status\necho 0 > /logs/verifier/reward.txt\n"
    rules = {f.rule for f in lint_text(text, ctx, "test.sh")}
    assert rules == {LintRule.AGENT_PATH_EXPECTED, LintRule.GIT_HOOKS_ON}
    # task.toml's workdir wins over the Dockerfile's.
    other = harbor_context("/opt/w", dockerfile)
    assert other.cwd == "/opt/w" and other.is_agent("/opt/w/x") and not other.is_agent("/src/a")


# ---- tasks and the CLI --------------------------------------------------------------------------


def test_bad_task_names_every_pattern() -> None:
    found = lint_task(BAD_TASK)
    assert {f.rule for f in found} == set(LintRule)
    files = {f.path for f in found}
    assert files == {"bad-task/tests/test.sh", "bad-task/tests/test_outputs.py"}
    # Both languages carry most patterns on their own.
    for path in files:
        assert len({f.rule for f in found if f.path == path}) >= 5, path


def test_cli_lint_exit_codes_and_json(tmp_path: Path) -> None:
    from skyrl_sdk.benchmarks.harbor.cli import app

    runner = CliRunner()
    bad = runner.invoke(app, ["lint", str(BAD_TASK), "--json"])
    assert bad.exit_code == 1, bad.output
    doc = json.loads(bad.output)
    assert doc["tasks"] == 1
    assert {f["rule"] for f in doc["findings"]} == {r.value for r in LintRule}
    assert all(f["path"].startswith("bad-task/tests/") and f["line"] > 0 for f in doc["findings"])

    text = runner.invoke(app, ["lint", str(BAD_TASK)])
    assert text.exit_code == 1
    assert "bad-task/tests/test.sh:4: imports-agent-code:" in text.output

    clean = tmp_path / "clean"
    shutil.copytree(BUNDLED / "csv-summary", clean / "csv-summary")
    ok = runner.invoke(app, ["lint", str(clean)])
    assert ok.exit_code == 0, ok.output
    assert "1 task(s): clean" in ok.output
    assert runner.invoke(app, ["lint", str(tmp_path / "missing")]).exit_code == 2


@pytest.mark.parametrize("task", [p.name for p in find_task_dirs(BUNDLED)])
def test_bundled_task_passes_the_lint(task: str) -> None:
    assert [f.format() for f in lint_task(BUNDLED / task)] == []


def test_load_task_warns_once_per_finding(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    task_dir = tmp_path / "bad-task"
    shutil.copytree(BAD_TASK, task_dir)
    with caplog.at_level(logging.WARNING, logger="skyrl_gym.envs.harbor.lint"):
        load_task(task_dir)
        load_task(task_dir)  # the same files again: no second round of warnings
    lines = [r.getMessage() for r in caplog.records if r.name == "skyrl_gym.envs.harbor.lint"]
    expected = [f.format() for f in lint_task(task_dir)]
    assert len(lines) == len(expected) > 0
    for line, finding in zip(lines, expected, strict=True):
        assert finding in line and "\n" not in line
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="skyrl_gym.envs.harbor.lint"):
        load_task(BUNDLED / "csv-summary")
    assert not [r for r in caplog.records if r.name == "skyrl_gym.envs.harbor.lint"]


# ---- the same rules over the terminal env's checks and the SWE harness's commands -----------------

TERMINAL_CONTEXT = LintContext(
    agent_paths=("/workspace",),
    cwd="/workspace",
    safe_path=True,
    deadline_fails=True,
    git_hardened=True,
)
"""The terminal check: cwd is the agent's workspace; `grading_env` sets PYTHONSAFEPATH and
GIT_HARDENING; the private /tmp (check files at /tmp/grader) is the grader's; a check past its
deadline fails."""

TERMINAL_PENDING: dict[str, str] = {}
"""task id -> why its check files are not clean yet (strict xfail). terminal-009's test now
runs fib in a driver script it creates in the workspace, which the exec shim demotes."""


def terminal_sources() -> list[tuple[str, str, str]]:
    rows = [json.loads(line) for line in TERMINAL_TASKS.read_text().splitlines() if line.strip()]
    out = []
    for row in rows:
        out.append((row["task_id"], "check", row["check"]))
        for name, text in (row.get("check_files") or {}).items():
            out.append((row["task_id"], name, text))
    return out


@pytest.mark.parametrize(
    ("task_id", "name", "text"),
    [
        pytest.param(
            t,
            n,
            x,
            id=f"{t}/{n}",
            marks=[pytest.mark.xfail(strict=True, reason=TERMINAL_PENDING[t])]
            if t in TERMINAL_PENDING and n != "check"
            else [],
        )
        for t, n, x in terminal_sources()
    ],
)
def test_terminal_checks_are_clean(task_id: str, name: str, text: str) -> None:
    path = f"{task_id}/{name}" if name != "check" else f"{task_id}/check.sh"
    assert [f.format() for f in lint_text(text, TERMINAL_CONTEXT, path)] == []


SWE_WORKDIR = "/testbed"
SWE_CONTEXT = LintContext(
    agent_paths=(SWE_WORKDIR,), cwd="/", safe_path=True, deadline_fails=True, git_hardened=True
)
"""SWE grading: the patched repository is the agent's (the patch may write any file in it);
the harness's scratch /tmp is its own; its command environment carries GIT_HARDENING; a run
past its deadline is a timeout, never resolved."""


def swe_scripts() -> list[tuple[str, str]]:
    from skyrl_gym.envs.swe.bundled.build import INSTANCES_FILE
    from skyrl_gym.envs.swe.harness import APPLY_COMMANDS, RESET_TREE, build_eval_script
    from skyrl_gym.envs.swe.instances import load_instances

    apply = "\n".join([f"cd {SWE_WORKDIR}", *(f"{c} /tmp/p/patch.diff" for c in APPLY_COMMANDS)])
    out = [("apply", f"{apply}\n{RESET_TREE}\n")]
    for instance in load_instances(INSTANCES_FILE):
        out.append((instance.instance_id, build_eval_script(instance, workdir=SWE_WORKDIR)))
    return out


def test_swe_test_commands_import_nothing_else_and_need_no_timeout() -> None:
    """Every rule but git-hooks-on over the SWE commands: the only finding allowed is pytest
    collecting the repository, which is SWE-bench itself (the code under test runs inside
    pytest, as in the official harness; the harness takes the repository's pytest
    configuration and conftest.py files from the base commit, see swe/harness.py)."""
    scripts = swe_scripts()
    assert len(scripts) > 1
    for name, script in scripts:
        found = [
            f
            for f in lint_text(script, SWE_CONTEXT, f"{name}/eval.sh")
            if f.rule is not LintRule.GIT_HOOKS_ON
        ]
        for f in found:
            assert f.rule is LintRule.IMPORTS_AGENT_CODE and "pytest collects" in f.message, (
                f.format()
            )


def test_swe_git_runs_with_hooks_and_fsmonitor_off() -> None:
    """The eval script's git commands name no -c options: the command environment does it
    (GIT_HARDENING), which the context says; without it they would be findings (a model patch
    that `git apply` refuses, because it touches .git/config, is applied by the `patch -p1`
    fallback, which writes .git/config: its core.fsmonitor would run at the first git)."""
    from skyrl_sdk.sandboxes.grading import GIT_HARDENING, grading_env

    assert GIT_HARDENING.items() <= grading_env().items()
    unhardened = replace(SWE_CONTEXT, git_hardened=False)
    for name, script in swe_scripts():
        assert lint_rule(script, SWE_CONTEXT, LintRule.GIT_HOOKS_ON) == [], name
        assert lint_rule(script, unhardened, LintRule.GIT_HOOKS_ON), name


def lint_rule(text: str, ctx: LintContext, rule: LintRule) -> list[str]:
    return [f.format() for f in RULES[rule](text, ctx, "eval.sh")]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        # Names reused for the agent's output and the expected data (found in real tasks).
        (
            "with_reuse.py",
            "with open('/app/out.txt') as f:\n    got = f.read()\n"
            "with open('/tests/want.txt') as f:\n    expected = f.read()\n",
        ),
        (
            "zip_pairs.py",
            "import json\nEXPECTED_ROWS = [['a', 1]]\nrows = json.load(open('/app/rows.json'))\n"
            "for expected_row, row in zip(EXPECTED_ROWS, rows):\n    assert row == expected_row\n",
        ),
        (
            "subscript_key.py",
            "import hashlib\nEXPECTED = {'x': 1}\n"
            "key = hashlib.sha256(open('/app/in.bin', 'rb').read()).hexdigest()\n"
            "expected = EXPECTED[key]\n",
        ),
        # A reward helper function: its write runs when called, not where it is defined.
        (
            "helpers.sh",
            'write_reward() {\n    echo "$1" > /logs/verifier/reward.txt\n}\n'
            "pass() { write_reward 1; exit 0; }\nfail() { write_reward 0; exit 0; }\n"
            "[ -x /tests/check ] || fail\n",
        ),
        # The usual Terminal-Bench 2 verifier, in its variants.
        (
            "tb2.sh",
            "source $HOME/.local/bin/env\nset +e\nuvx -p 3.13 --with pytest==8.4.1 \\\n"
            "  python -m pytest /tests/test_outputs.py --ctrf /logs/verifier/ctrf.json -rA\n"
            'CODE=$?\nR="/logs/verifier/reward.txt"\necho 0.0 > "$R"\n'
            'if [ "$CODE" -eq 0 ]; then echo 1.0 > "$R"; fi\n',
        ),
    ],
)
def test_near_misses_are_clean(name: str, text: str) -> None:
    assert [f.format() for f in lint_text(text, LintContext(), name)] == []


def test_python_m_pytest_in_the_workspace_without_safe_path() -> None:
    text = "python3 -m pytest /tests/test_outputs.py\necho 0 > /logs/verifier/reward.txt\n"
    assert lint_text(text, LintContext(), "t.sh") == []  # PYTHONSAFEPATH, as our verifier has
    found = lint_text(text, replace(LintContext(), safe_path=False), "t.sh")
    assert [(f.rule, f.line) for f in found] == [(LintRule.IMPORTS_AGENT_CODE, 1)]
    assert "sys.path" in found[0].message


def test_functions_that_run_their_arguments() -> None:
    text = (
        'slow() { "$@" 2>/dev/null; }\n'
        'capped() { timeout -k 1 5 "$@" < /dev/null | head -c 65536; }\n'
        "out=$(slow python3 /app/a.py)\n"
        "out=$(capped python3 /app/b.py)\n"
        "echo $out > /logs/verifier/reward.txt\n"
    )
    found = lint_text(text, LintContext(), "test.sh")
    assert [(f.rule, f.line) for f in found] == [(LintRule.NO_TIMEOUT, 3)]


def test_terminal_gen_tasks_pass_the_lint(tmp_path: Path) -> None:
    """`skyrl terminal gen` writes Harbor task folders: one per family (two seeds) lints clean."""
    from skyrl_gym.envs.terminal_gen.generate import plan, resolve_families, write_tasks

    families = resolve_families(None)
    dirs = write_tasks(plan(2 * len(families), 0, families), tmp_path)
    assert len(dirs) == 2 * len(families)
    assert [f.format() for d in dirs for f in lint_task(d)] == []


def test_git_config_environment_turns_hooks_off() -> None:
    export = (
        "export GIT_CONFIG_COUNT=2 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=/dev/null"
        " GIT_CONFIG_KEY_1=core.fsmonitor GIT_CONFIG_VALUE_1={}\n"
    )
    text = "cd /app/repo\ngit status --porcelain\necho 0 > /logs/verifier/reward.txt\n"
    assert lint_text(export.format("false") + text, LintContext(), "t.sh") == []
    found = lint_text(export.format("/app/hook") + text, LintContext(), "t.sh")
    assert [f.rule for f in found] == [LintRule.GIT_HOOKS_ON]
