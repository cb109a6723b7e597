"""`skyrl sft`: chat rows rendered with loss on the assistant only, trajectories filtered by
reward and trained on their sampled ids, and a tiny model whose held-out NLL goes down (with
checkpoints that `model.init_from` loads and a resume that continues the same run)."""

import json
import random
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner

from skyrl_gym.cli import CommandEntry, load_command
from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.policy import FinishReason
from skyrl_sdk.agents.trajectory import (
    Segment,
    StopReason,
    TrainingSample,
    Trajectory,
    Turn,
    read_trajectories,
)
from skyrl_sdk.trainer.config import SFTConfig, build_config
from skyrl_sdk.trainer.learner import Learner, LearnerSettings
from skyrl_sdk.trainer.models import load_model
from skyrl_sdk.trainer.sft import (
    SFTDataError,
    batch_indices,
    chat_sample,
    packs,
    read_samples,
    sft_config,
    train_sft,
)

SFT = load_command(CommandEntry("sft", "skyrl_sdk.trainer.sft:sft_command"))
WORDS = ["apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "piano"]


@pytest.fixture(scope="module")
def renderer():
    _, tokenizer = load_model(build_config({}, ["model.hidden_size=32"]).model)
    return ChatRenderer(tokenizer)


def _chat_rows(n, seed=0):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        word = rng.choice(WORDS)
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": f"Repeat: {word}"},
                    {"role": "assistant", "content": f"{word} {word}"},
                ]
            }
        )
    return rows


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_chat_rows_train_on_the_assistant_tokens_only(renderer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "bye"},
    ]
    sample = chat_sample(renderer, messages)
    whole = renderer.render(messages, add_generation_prompt=False)
    assert renderer.decode(sample.input_ids) == whole
    trained = [i for i, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m]
    text = renderer.decode(trained)
    assert "hello" in text and "bye" in text
    assert "hi" not in text and "again" not in text and "brief" not in text
    # each assistant message ends with its end-of-turn marker, which is trained
    assert text.count(renderer.decode([renderer.end_of_turn_id])) == 2


def _trajectory(reward, ids=(40, 41)):
    turn = Turn(
        index=0,
        segment=0,
        action="x",
        token_ids=ids,
        logprobs=(-1.0,) * len(ids),
        policy_versions=(3,) * len(ids),
        finish_reason=FinishReason.STOP,
        observation=(),
        observation_ids=(),
        reward=reward,
    )
    return Trajectory(
        episode_id=f"e{reward}",
        task_id="t",
        env_id="env",
        policy="p",
        stop_reason=StopReason.DONE,
        turns=(turn,),
        segments=(Segment(prompt_ids=(1, 2, 3), prompt_messages=(), first_turn=0),),
        prompt_messages=(),
        reward=reward,
        success=reward > 0,
    )


def test_trajectories_are_filtered_by_reward_and_kept_token_exact(tmp_path, renderer):
    path = _write(tmp_path / "t.jsonl", [_trajectory(r).to_json() for r in (0.0, 1.0, 0.5)])
    samples, dropped = read_samples(path, renderer, SFTConfig(min_reward=0.5))
    assert dropped == 1 and len(samples) == 2
    assert samples[0].input_ids == (1, 2, 3, 40, 41) and samples[0].loss_mask == (0, 0, 0, 1, 1)
    # a capture directory: every JSONL file in it
    (tmp_path / "dir").mkdir()
    _write(tmp_path / "dir" / "a.jsonl", [_trajectory(1.0).to_json()])
    _write(tmp_path / "dir" / "b.jsonl", _chat_rows(1))
    samples, _ = read_samples(tmp_path / "dir", renderer, SFTConfig())
    assert len(samples) == 2
    with pytest.raises(SFTDataError, match="no JSONL"):
        read_samples(tmp_path / "none.jsonl", renderer, SFTConfig())


def test_the_loss_must_be_cross_entropy():
    cfg = build_config({}, ["sft.data=x.jsonl"])
    assert sft_config(cfg).algorithm.loss.value == "cross_entropy"
    with pytest.raises(SFTDataError, match="cross_entropy"):
        sft_config(build_config({}, ["sft.data=x.jsonl", "algorithm.loss=ppo"]))
    with pytest.raises(SFTDataError, match=r"sft\.data is required"):
        sft_config(build_config({}, []))
    with pytest.raises(SFTDataError, match="backend 'local'"):
        sft_config(build_config({}, ["sft.data=x.jsonl", "distributed.strategy=fsdp"]))


def test_batches_cover_every_sequence_each_epoch():
    seen = [i for step in range(4) for i in batch_indices(8, 4, step, seed=0)]
    assert sorted(seen[:8]) == sorted(seen[8:]) == list(range(8))
    assert seen[:8] != seen[8:]  # reshuffled


@pytest.mark.parametrize("pack", [False, True])
def test_every_sequence_is_trained_once_each_epoch_packed_or_padded(pack):
    # What the model is fed over two epochs of 8 sequences (mixed lengths, batches of 4),
    # split back into sequences: each sequence's first id is its number (the pad id is 0).
    samples = [
        TrainingSample((i, *range(20, 20 + n)), (0,) + (1,) * n, (0.0,) * (n + 1), (0,) * (n + 1))
        for i, n in enumerate((3, 17, 5, 11, 2, 23, 7, 13), 1)
    ]
    cfg = build_config({}, ["model.hidden_size=32", "model.num_layers=1", "sft.data=x"])
    model, tokenizer = load_model(cfg.model)
    settings = replace(LearnerSettings.from_config(cfg, tokenizer), micro_batch_size=2)
    learner = Learner(model, replace(settings, pack=pack, pack_tokens=30))
    rows = []
    model.register_forward_pre_hook(
        lambda _, args, kwargs: rows.append((kwargs["input_ids"], kwargs.get("position_ids"))),
        with_kwargs=True,
    )
    for step in range(4):
        learner.train_step([samples[i] for i in batch_indices(8, 4, step, seed=0)], [1.0] * 4)
    fed = []
    for ids, positions in rows:
        starts = (positions == 0) if pack else torch.zeros_like(ids, dtype=torch.bool)
        starts[:, 0] = True
        for r in range(ids.shape[0]):
            fed += [int(ids[r, c]) for c in starts[r].nonzero().flatten()]
    fed = [i for i in fed if i != tokenizer.pad_token_id]  # a packed row's padding starts at 0
    assert sorted(fed[:8]) == sorted(fed[8:]) == list(range(1, 9))
    assert len(rows) < 8 if pack else len(rows) == 8  # packed: fewer, fuller forwards
    if pack:
        assert all(ids.shape[1] <= 30 for ids, _ in rows[:8]) and rows[0][0].shape[0] == 2


def test_packing_keeps_the_objective(tmp_path):
    # The same run packed and padded: the same held-out NLL after the same steps.
    data = _write(tmp_path / "chat.jsonl", _chat_rows(24))
    common = [f"sft.data={data}", "trainer.steps=3", *SMALL]
    nll = [
        train_sft(
            build_config({}, [*common, f"out_dir={tmp_path / str(pack)}", f"sft.pack={pack}"])
        ).heldout_nll_end
        for pack in (False, True)
    ]
    assert nll[1] == pytest.approx(nll[0], abs=1e-4)
    sequence_mean = build_config({}, [*common, "algorithm.reduction=sequence_mean"])
    assert not packs(sequence_mean)  # a per-sequence mean trains padded
    assert packs(build_config({}, common)) and not packs(build_config({}, [*common, "sft.pack=0"]))


SMALL = (
    "model.hidden_size=32",
    "model.num_layers=1",
    "optim.lr=0.003",
    "sft.batch_size=8",
    "sft.heldout_fraction=0.2",
    "trainer.micro_batch_size=8",
    "logging.console=false",
)


def test_sft_lowers_heldout_nll_through_the_command(tmp_path):
    data = _write(tmp_path / "chat.jsonl", _chat_rows(40))
    out = tmp_path / "run"
    args = ["-", f"sft.data={data}", f"out_dir={out}", "trainer.steps=30", *SMALL]
    result = CliRunner().invoke(SFT, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["heldout_sequences"] == 8 and summary["train_sequences"] == 32
    assert summary["heldout_nll_end"] < summary["heldout_nll_start"] - 1.0, summary
    assert "held-out NLL" in result.output
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 30 and "sft/heldout_nll" in metrics[-1]
    # the checkpoint is a run's: model.init_from starts from it
    cfg = build_config({}, [*SMALL, f"model.init_from={out}"])
    model, _ = load_model(cfg.model, seed=cfg.seed)
    base, _ = load_model(build_config({}, list(SMALL)).model)
    assert not torch.equal(model.lm_head.weight, base.lm_head.weight)


def test_a_resumed_run_trains_what_one_run_would(tmp_path):
    data = _write(tmp_path / "chat.jsonl", _chat_rows(12))
    common = [f"sft.data={data}", "model.lora.enabled=true", "trainer.checkpoint_every=2", *SMALL]
    whole = train_sft(build_config({}, [*common, f"out_dir={tmp_path / 'a'}", "trainer.steps=4"]))
    first = build_config({}, [*common, f"out_dir={tmp_path / 'b'}", "trainer.steps=2"])
    train_sft(first)
    resumed = train_sft(
        build_config({}, [*common, f"out_dir={tmp_path / 'b'}", "trainer.steps=4"]), resume=True
    )
    assert resumed.steps == whole.steps == 4
    assert resumed.heldout_nll_end == pytest.approx(whole.heldout_nll_end, abs=1e-6)


EVAL = load_command(CommandEntry("eval", "skyrl_sdk.agents.cli:eval_command"))


def test_sft_on_eval_trajectories_filtered_by_reward(tmp_path, renderer):
    out = tmp_path / "eval"
    args = ["math", "--policy", "tiny", "--num", "4", "--max-turns", "2", "--max-tokens", "12"]
    played = CliRunner().invoke(EVAL, [*args, "--seed", "0", "--out", str(out)])
    assert played.exit_code == 0, played.output
    data = out / "trajectories.jsonl"
    samples, _ = read_samples(data, renderer, SFTConfig())
    played_ids = [s.input_ids for t in read_trajectories(data) for s in t.training_samples()]
    assert [s.input_ids for s in samples] == played_ids and len(played_ids) == 4
    run = tmp_path / "sft"
    common = ["-", f"sft.data={data}", f"out_dir={run}", "trainer.steps=2", "logging.console=false"]
    # the eval's policy is `tiny`, the default model.source: its sampled ids train token-exact
    result = CliRunner().invoke(SFT, [*common, "--min-reward", "-1"])
    assert result.exit_code == 0, result.output
    summary = json.loads((run / "summary.json").read_text())
    assert summary["train_sequences"] + summary["heldout_sequences"] >= 4
    assert (run / "checkpoints" / "latest").is_file()
    # a reward no episode reached leaves nothing: one line, exit 2
    refused = CliRunner().invoke(SFT, [*common, f"out_dir={tmp_path / 'x'}", "--min-reward", "2"])
    assert refused.exit_code == 2 and "no sequence to train on" in refused.output


def test_sft_with_a_teacher_distils_its_distribution(tmp_path):
    """`sft.teacher`: the loss is the KL from the teacher's top tokens to the student's
    distribution (`sft/logit_kl`), not the data's NLL. A teacher trained on the rows teaches a
    fresh student: the KL falls, and so does the student's held-out NLL of the data, which it
    never trained on directly."""
    data = _write(tmp_path / "chat.jsonl", _chat_rows(40))
    teacher = tmp_path / "teacher"
    train_sft(
        build_config({}, [f"sft.data={data}", f"out_dir={teacher}", "trainer.steps=30", *SMALL])
    )
    out = tmp_path / "student"
    args = [f"sft.data={data}", f"out_dir={out}", "trainer.steps=20", f"sft.teacher={teacher}"]
    result = train_sft(build_config({}, [*args, "sft.teacher_top_k=8", "seed=1", *SMALL]))
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    kl = [m["sft/logit_kl"] for m in metrics]
    assert "sft/train_nll" not in metrics[0]
    print(
        f"logit KL {kl[0]:.3f} -> {kl[-1]:.3f}; held-out NLL {result.heldout_nll_start:.3f} -> "
        f"{result.heldout_nll_end:.3f}"
    )
    assert sum(kl[-3:]) / 3 < 0.5 * kl[0]
    assert result.heldout_nll_end < result.heldout_nll_start - 1.0
    assert all(m["sft/label_loss"] == 0.0 for m in metrics)  # label_weight 0: KL alone
    # With the data's own tokens weighted in (Hinton's hard labels), both terms train.
    mixed = tmp_path / "mixed"
    train_sft(
        build_config(
            {}, [*args[:-3], f"out_dir={mixed}", "trainer.steps=2", f"sft.teacher={teacher}",
                 "sft.label_weight=0.5", *SMALL]
        )
    )  # fmt: skip
    rows = [json.loads(line) for line in (mixed / "metrics.jsonl").read_text().splitlines()]
    assert all(r["sft/label_loss"] > 0 and r["sft/logit_kl"] > 0 for r in rows)


def test_a_teacher_that_is_not_there_is_a_one_line_error(tmp_path):
    data = _write(tmp_path / "chat.jsonl", _chat_rows(8))
    args = ["-", f"sft.data={data}", f"out_dir={tmp_path / 'run'}", "trainer.steps=1", *SMALL]
    result = CliRunner().invoke(SFT, [*args, f"sft.teacher={tmp_path / 'nowhere'}"])
    assert result.exit_code == 2, result.output
    assert "sft.teacher:" in result.output and "nowhere" in result.output
    assert "Traceback" not in result.output
