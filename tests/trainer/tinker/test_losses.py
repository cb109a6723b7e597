"""The built-in losses beyond cross-entropy, checked against their Tinker definitions through
the SDK, plus the rejection of losses and configs the server does not serve."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trainer.tinker.conftest import API_KEY, TinkerServer

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

TEXTS = ("the cat sat on the mat", "two plus two is four", "hello world again")


def _trainer(server: TinkerServer):
    service = tinker.ServiceClient(base_url=server.base_url, api_key=API_KEY)
    return service.create_lora_training_client(server.base_model, rank=4, seed=0).result()


def _ce(tokens: list[int]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )


def _rl_batch(trainer, shift: float) -> tuple[list[types.Datum], list[dict[str, np.ndarray]]]:
    """RL datums whose sampler logprobs are the learner's shifted per token (so the ratios
    straddle the clip range unless `shift` is small), with mixed-sign advantages."""
    tok = trainer.get_tokenizer()
    ids = [tok.encode(t) for t in TEXTS]
    out = trainer.forward([_ce(i) for i in ids], "cross_entropy").result()
    data, arrays = [], []
    for k, (i, o) in enumerate(zip(ids, out.loss_fn_outputs, strict=True)):
        lp = o["logprobs"].to_numpy().astype(np.float64)
        n = len(lp)
        offsets = shift * np.linspace(-1.0, 1.0, n) if shift > 0.1 else np.full(n, shift)
        old = lp + offsets
        adv = np.where(np.arange(n) % 2 == 0, 1.0, -0.5) * (1 + k)
        mask = (np.arange(n) >= 1).astype(np.float64)
        arrays.append({"lp": lp, "old": old, "adv": adv, "mask": mask})
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(i[:-1]),
                loss_fn_inputs={
                    "target_tokens": i[1:],
                    "logprobs": old.astype(np.float32).tolist(),
                    "advantages": adv.astype(np.float32).tolist(),
                    "sequence_ratio_mask": mask.astype(np.float32).tolist(),
                },
            )
        )
    return data, arrays


def _expected(loss: str, a: dict[str, np.ndarray], cfg: dict[str, float]) -> float:
    lp, old, adv = a["lp"], a["old"], a["adv"]
    lo, hi = cfg.get("clip_low_threshold", 0.8), cfg.get("clip_high_threshold", 1.2)
    ratio = np.exp(lp - old)
    if loss == "importance_sampling":
        return float(-(ratio * adv).sum())
    if loss == "ppo":
        return float(-np.minimum(ratio * adv, np.clip(ratio, lo, hi) * adv).sum())
    if loss == "cispo":
        return float(-(np.clip(ratio, lo, hi) * lp * adv).sum())
    if loss == "dro":
        return float(-(lp * adv - 0.5 * cfg["beta"] * (lp - old) ** 2).sum())
    assert loss == "gspo"
    seq = np.exp(((lp - old) * a["mask"]).sum() / a["mask"].sum())
    return float(-np.minimum(seq * adv, np.clip(seq, lo, hi) * adv).sum())


CASES = [
    ("importance_sampling", {}),
    ("ppo", {}),
    ("ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.05}),
    ("cispo", {}),
    ("dro", {"beta": 0.5}),
    ("gspo", {"clip_low_threshold": 0.95, "clip_high_threshold": 1.05}),
]


def test_loss_values_match_definitions(tinker_server: TinkerServer) -> None:
    trainer = _trainer(tinker_server)
    data, arrays = _rl_batch(trainer, shift=0.6)
    for loss, cfg in CASES:
        out = trainer.forward(data, loss, cfg or None).result()
        want = sum(_expected(loss, a, cfg) for a in arrays)
        assert out.metrics["loss:sum"] == pytest.approx(want, rel=1e-4, abs=1e-4), (loss, cfg)
        for o, a in zip(out.loss_fn_outputs, arrays, strict=True):
            np.testing.assert_allclose(o["logprobs"].to_numpy(), a["lp"], atol=1e-5)


def test_unclipped_gradients_match_importance_sampling(tinker_server: TinkerServer) -> None:
    """Inside the clip range, PPO, CISPO and GSPO have the importance-sampling gradient."""
    after = {}
    for loss in ("importance_sampling", "ppo", "cispo", "gspo"):
        trainer = _trainer(tinker_server)
        data, _ = _rl_batch(trainer, shift=0.05)
        fb = trainer.forward_backward(data, loss)
        trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
        fb.result()
        probe = [_ce(trainer.get_tokenizer().encode(t)) for t in TEXTS]
        after[loss] = trainer.forward(probe, "cross_entropy").result().metrics["loss:sum"]
    base = after.pop("importance_sampling")
    for loss, value in after.items():
        assert value == pytest.approx(base, rel=1e-4), (loss, value, base)


def test_unserved_losses_and_configs_get_400(tinker_server: TinkerServer) -> None:
    trainer = _trainer(tinker_server)
    data, _ = _rl_batch(trainer, shift=0.0)
    with pytest.raises(tinker.BadRequestError, match=r"supported: .*cispo"):
        trainer.forward_backward(data, "stable_reinforce").result()
    with pytest.raises(tinker.BadRequestError, match="beta"):
        trainer.forward_backward(data, "dro").result()
    with pytest.raises(tinker.BadRequestError, match="do not apply"):
        trainer.forward_backward(data, "ppo", {"beta": 0.1}).result()
    # The model is still usable after the refusals.
    assert trainer.forward_backward(data, "dro", {"beta": 0.1}).result().metrics["loss:sum"]
