"""`skyrl demo --task distill` at tiny scale: a tiny terminal run teaches a fresh tiny student
by on-policy distillation, against GRPO from the same start for as many sampled tokens (real
bwrap sandboxes and verifiers, the SmolLM2 run's code path)."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from skyrl_sdk.agents.trajectory import read_trajectories
from skyrl_sdk.trainer.config import merge
from skyrl_sdk.trainer.demos.distill import (
    DistillSettings,
    TeacherRunError,
    find_teacher,
    run_distill_demo,
)
from skyrl_sdk.trainer.demos.terminal import run_terminal_demo
from skyrl_sdk.trainer.heldout import read_results

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap")
TINY = {
    "model": {"source": "tiny", "lora": {"enabled": True, "target_modules": ["q_proj", "v_proj"]}},
    "env": {"kwargs": {"families": ["echo-word", "make-dirs"], "per_family": 16}},
    "rollout": {"group_size": 2, "max_tokens": 24},
    "trainer": {"groups_per_step": 1, "max_staleness": 0},
    "heldout": {"env_kwargs": {"split": "heldout", "per_family": 2}, "episodes": 4},
}


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A finished tiny terminal run, held-out before and after. A random tiny model solves
    no task, so GRPO would leave it the fresh model; 3 steps of distillation from another
    random model (`tiny:1`) make it differ from the student's start (and make the baseline's
    GRPO a choice of the demo, not the teacher run's algorithm)."""
    run = tmp_path_factory.mktemp("teacher") / "rl"
    other = {"algorithm": {"advantage": "opd", "teacher": "tiny:1"}, "optim": {"lr": 3e-2}}
    run_terminal_demo(steps=3, out_dir=run, seed=0, overrides=merge(TINY, other))
    return run


def test_distill_writes_teacher_student_and_rl_baseline_results(teacher, tmp_path):
    out = tmp_path / "distill"
    settings = DistillSettings(steps=2, opd_reward_coef=0.1, max_rl_steps=8)
    results = run_distill_demo(teacher.parent, out, settings=settings)
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(results))
    assert results["teacher"] == str(teacher)
    # The teacher's own last evaluation, on the episodes the student is evaluated on.
    assert results["evaluations"]["teacher"]["success"] == read_results(teacher)[-1].success
    student_evals = read_results(out / "student")
    assert [e.step for e in student_evals] == [0, 2]
    assert student_evals[0].per_task.keys() == read_results(teacher)[-1].per_task.keys()
    for name in ("teacher", "base", "student", "rl_baseline"):
        rate = results["evaluations"][name]
        assert rate["episodes"] == 4 and set(rate["families"]) == {"echo-word", "make-dirs"}
        lo, hi = rate["ci95"]
        assert 0 <= lo <= rate["success"] <= hi <= 1
    teacher_success = results["evaluations"]["teacher"]["success"]
    if teacher_success:
        ratio = results["evaluations"]["student"]["success"] / teacher_success
        assert results["student_vs_teacher"] == pytest.approx(ratio, abs=1e-4)
    # The student was distilled: the teacher scored every step's sampled tokens.
    config = (out / "student" / "config.yaml").read_text()
    assert "advantage: opd" in config and str(teacher) in config and "init_from: null" in config
    kl = results["opd"]["reverse_kl"]
    assert len(kl) == 2 and all(isinstance(v, float) for v in kl)
    # The trained run teaches, not the fresh model (whose reverse KL to itself is 0).
    assert abs(kl[0]) > 1e-3 and all(t > 0 for t in results["opd"]["teacher_s"])
    # The RL baseline: GRPO from the same fresh start, matched on sampled tokens.
    assert "advantage: grpo" in (out / "rl-baseline" / "config.yaml").read_text()
    tokens = results["sampled_tokens"]
    per_step = results["sampled_tokens_per_step"]
    assert tokens["student"] >= sum(per_step["student"]) > 0
    # Every training episode sampled counts (set-aside and unclaimed groups too).
    played = read_trajectories(out / "student" / "trajectories.jsonl")
    assert tokens["student"] == sum(t.num_generated_tokens for t in played)
    assert tokens["rl_baseline"] >= sum(per_step["rl_baseline"])
    assert tokens["rl_baseline"] >= tokens["student"] or results["steps"]["rl_baseline"] == 8
    assert tokens["rl_baseline"] - tokens["student"] <= max(per_step["rl_baseline"])
    for name in ("student", "rl_baseline"):
        p = results["per_1k_sampled_tokens"][name]
        success = results["evaluations"][name]["success"]
        assert p["success_per_1k_tokens"] == pytest.approx(success / (tokens[name] / 1000))
    assert set(results["phases_s"]) == {
        "teacher_eval_s",
        "student_s",
        "rl_baseline_s",
        "rl_baseline_eval_s",
    }
    report = (out / "report.md").read_text()
    assert "| family | teacher | fresh model | student (OPD) | RL baseline (GRPO) |" in report
    assert "| make-dirs |" in report and "sampled tokens" in report


def test_the_pipelines_base_evaluation_stands_for_the_fresh_student(teacher, tmp_path):
    """A teacher from the terminal pipeline (`base/` beside `rl/`) has had the fresh model
    evaluated on these episodes: the student's loop then evaluates only after training, and
    the results say where the fresh model's figures come from."""
    pipeline = tmp_path / "pipeline"
    shutil.copytree(teacher, pipeline / "rl")
    # The tiny teacher trained from the fresh model at seed 0: its first evaluation is the
    # fresh model's, as the pipeline's `base/` would hold it.
    (pipeline / "base").mkdir()
    first = (teacher / "heldout.jsonl").read_text().splitlines()[0]
    (pipeline / "base" / "heldout.jsonl").write_text(first + "\n")
    settings = DistillSettings(steps=1, max_rl_steps=1)
    results = run_distill_demo(pipeline, tmp_path / "distill", settings=settings)
    assert [e.step for e in read_results(tmp_path / "distill" / "student")] == [1]
    base = read_results(pipeline / "base")[0]
    assert results["evaluations"]["base"]["success"] == base.success
    assert results["base_evaluation"].startswith(str(pipeline / "base"))
    # Episodes sampled otherwise (here: at another temperature) are not these: the student's
    # loop evaluates the fresh model itself.
    record = json.loads(first)
    record["temperature"] = record["temperature"] / 2
    (pipeline / "base" / "heldout.jsonl").write_text(json.dumps(record) + "\n")
    other = run_distill_demo(pipeline, tmp_path / "other", settings=settings)
    assert [e.step for e in read_results(tmp_path / "other" / "student")] == [0, 1]
    assert "(step 0)" in other["base_evaluation"]


def test_the_rl_baseline_stops_within_a_step_when_dynamic_sampling_sets_groups_aside(
    teacher, tmp_path
):
    """A fresh tiny model fails every group alike, so dynamic sampling sets them aside and a
    step samples many times the tokens it trains: the baseline still stops within one step's
    sampled tokens of the student's (chunks sized by all that was sampled, not trained)."""
    settings = DistillSettings(steps=4, max_rl_steps=8)
    dynamic = {"algorithm": {"dynamic_sampling": True, "max_set_aside": 4}}
    results = run_distill_demo(teacher.parent, tmp_path / "d", settings=settings, overrides=dynamic)
    played = read_trajectories(tmp_path / "d" / "rl-baseline" / "trajectories.jsonl")
    by_step: dict[int, int] = {}
    for t in played:  # max_staleness 0: a step's episodes are sampled at the version before it
        version = t.turns[0].policy_versions[0] if t.turns and t.turns[0].policy_versions else 0
        by_step[version] = by_step.get(version, 0) + t.num_generated_tokens
    tokens = results["sampled_tokens"]
    assert sum(by_step.values()) == tokens["rl_baseline"]
    assert max(by_step.values()) > max(results["sampled_tokens_per_step"]["rl_baseline"])
    assert tokens["rl_baseline"] >= tokens["student"] or results["steps"]["rl_baseline"] == 8
    assert tokens["rl_baseline"] - tokens["student"] < max(by_step.values())


def test_the_cli_says_in_one_line_what_is_wrong_with_the_teacher(tmp_path):
    import typer

    from skyrl_sdk.trainer.demos.cli import demo_command

    app = typer.Typer()
    app.command()(demo_command)
    runner = CliRunner()
    missing = runner.invoke(app, ["--task", "distill"], env={"COLUMNS": "300"})
    assert missing.exit_code == 2 and "--task distill needs --teacher DIR" in missing.output
    (tmp_path / "notarun").mkdir()
    bad = runner.invoke(
        app, ["--task", "distill", "--teacher", str(tmp_path / "notarun")], env={"COLUMNS": "300"}
    )
    assert bad.exit_code == 2 and "not a finished terminal run" in bad.output
    for case in (tmp_path / "notarun", tmp_path / "nowhere"):
        with pytest.raises(TeacherRunError) as e:
            find_teacher(case)
        assert "\n" not in str(e.value) and str(case) in str(e.value)


def test_a_teacher_without_its_evaluation_is_re_evaluated_to_the_same_result(teacher, tmp_path):
    """The teacher's checkpoint evaluated here (the path a run without `heldout.jsonl`, or
    another seed, takes) plays the held-out episodes exactly as its own last evaluation did."""
    from skyrl_sdk.trainer.demos.distill import _teacher_evaluation

    copy = tmp_path / "rl"
    shutil.copytree(teacher, copy)
    (copy / "heldout.jsonl").unlink()
    result, source = _teacher_evaluation(find_teacher(copy), tmp_path / "out", seed=0)
    assert "re-evaluated" in source
    recorded = read_results(teacher)[-1]
    assert result.per_task == recorded.per_task and result.success == recorded.success
    # The same episodes, opening with the same ids. (Not token-exact replies: the merged
    # adapters round differently from the run's peft ones, and a near-uniform tiny model
    # then samples an occasional other token.)
    mine = read_trajectories(tmp_path / "out" / "teacher-eval" / "heldout_trajectories.jsonl")
    theirs = read_trajectories(teacher / "heldout_trajectories.jsonl")[-len(mine) :]
    assert len(mine) == recorded.episodes
    assert [(e.episode_id, e.prompt_ids) for e in mine] == [
        (e.episode_id, e.prompt_ids) for e in theirs
    ]


def test_an_output_holding_an_earlier_run_is_refused_and_kept(tmp_path):
    from skyrl_sdk.trainer.demos.distill import OutputInUseError

    earlier = tmp_path / "out" / "student"
    earlier.mkdir(parents=True)
    (earlier / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(OutputInUseError, match="already holds an earlier run \\(student\\)"):
        run_distill_demo(tmp_path / "nowhere", tmp_path / "out")
    assert (earlier / "metrics.jsonl").read_text() == '{"step": 1}\n'  # nothing deleted
    import typer

    from skyrl_sdk.trainer.demos.cli import demo_command

    app = typer.Typer()
    app.command()(demo_command)
    result = CliRunner().invoke(
        app,
        ["--task", "distill", "--teacher", str(tmp_path), "--out", str(tmp_path / "out")],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 2 and "already holds an earlier run" in result.output


def test_a_pipeline_teacher_is_first_distilled_on_its_demonstrations(teacher, tmp_path):
    """A teacher from the pipeline (`demos.jsonl` and `sft/` beside `rl/`): the student first
    distils it on those demonstrations with the SFT run's settings (`sft.teacher`: the
    teacher's top tokens are the targets), then OPD starts from that checkpoint; the fresh
    model is evaluated on its own, since the student's step 0 is no longer it."""
    from skyrl_sdk.agents.chat import ChatRenderer
    from skyrl_sdk.trainer.config import build_config
    from skyrl_sdk.trainer.demos.demonstrations import DemoSettings, write_demonstrations
    from skyrl_sdk.trainer.demos.terminal import ENV_ID
    from skyrl_sdk.trainer.models import load_model
    from skyrl_sdk.trainer.sft import train_sft

    pipeline = tmp_path / "pipeline"
    shutil.copytree(teacher, pipeline / "rl")
    run = find_teacher(pipeline)
    _, tokenizer = load_model(run.config.model, seed=run.config.seed)
    demos = DemoSettings(n=4, families=("echo-word", "make-dirs"), env_id=ENV_ID, max_tokens=48)
    assert write_demonstrations(demos, ChatRenderer(tokenizer), pipeline / "demos.jsonl").kept
    sft = run.config.model_dump(mode="json")
    sft.update(out_dir=str(pipeline / "sft"))
    sft["sft"].update(data=str(pipeline / "demos.jsonl"), batch_size=2, heldout_fraction=0.25)
    sft["trainer"]["steps"] = 2
    sft["algorithm"] = {"loss": "cross_entropy"}  # as the pipeline's SFT phase writes it
    train_sft(build_config(sft))  # the pipeline's SFT run: its config.yaml is what is reused

    results = run_distill_demo(
        pipeline, tmp_path / "d", settings=DistillSettings(steps=1, max_rl_steps=1)
    )
    warm = results["warm_start"]
    assert warm["steps"] == 2 and warm["data"] == str(pipeline / "demos.jsonl")
    kd_config = (tmp_path / "d" / "student-kd" / "config.yaml").read_text()
    assert f"teacher: {pipeline / 'rl'}" in kd_config and "init_from: null" in kd_config
    assert all(v > 0 for v in warm["logit_kl_first_last"])
    student_config = (tmp_path / "d" / "student" / "config.yaml").read_text()
    assert f"init_from: {tmp_path / 'd' / 'student-kd'}" in student_config
    assert [e.step for e in read_results(tmp_path / "d" / "student")] == [1]
    assert results["base_evaluation"].endswith("(the fresh model)")
    assert results["evaluations"]["base"]["episodes"] == 4
    assert "student_kd_s" in results["phases_s"]
    assert (
        "| family | teacher | fresh model | student (KD + OPD) |"
        in (tmp_path / "d" / "report.md").read_text()
    )
