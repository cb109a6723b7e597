"""The shared top-k/top-p sampler, on hand-computed probabilities (all exact in float32)."""

from __future__ import annotations

import math

import pytest
import torch

from skyrl_sdk.agents.engine import sampler as sampling
from skyrl_sdk.agents.engine.sampler import _sample
from skyrl_sdk.agents.policy import SamplingParams

# Probabilities 1/2, 1/4, 1/8, 1/8: cumulative 0.5, 0.75, 0.875, 1.0, exact in binary, so the
# top-p boundary cases below are decided by the rule, not by rounding.
PROBS = [0.5, 0.25, 0.125, 0.125]


def _logits(order: list[int] | None = None) -> torch.Tensor:
    probs = PROBS if order is None else [PROBS[i] for i in order]
    return torch.log(torch.tensor(probs))


def _kept(logits: torch.Tensor, **kwargs: float) -> list[int]:
    return torch.isfinite(sampling.truncate(logits, **kwargs)).nonzero().flatten().tolist()


def test_probabilities_are_exact() -> None:
    probs = torch.softmax(_logits(), -1)
    assert probs.tolist() == PROBS
    assert probs.cumsum(-1).tolist() == [0.5, 0.75, 0.875, 1.0]


@pytest.mark.parametrize(
    ("top_p", "kept"),
    [
        (0.3, [0]),  # the first token alone already exceeds top_p
        (0.5, [0]),  # reaches top_p exactly: the next token is not needed
        (0.51, [0, 1]),
        (0.75, [0, 1]),  # boundary again: 0.5 + 0.25 reaches it
        (0.76, [0, 1, 2]),  # one 1/8 token is enough (0.875); its tie twin is dropped
        (0.875, [0, 1, 2]),
        (1.0, [0, 1, 2, 3]),  # off
    ],
)
def test_top_p_keeps_smallest_set_reaching_top_p(top_p: float, kept: list[int]) -> None:
    assert _kept(_logits(), top_p=top_p) == kept


def test_top_p_always_keeps_the_most_likely_token() -> None:
    assert _kept(_logits(), top_p=1e-9) == [0]


def test_top_p_works_on_unsorted_rows_of_a_batch() -> None:
    order = [2, 0, 3, 1]  # row holds 1/8, 1/2, 1/8, 1/4
    batch = torch.stack([_logits(), _logits(order)])
    finite = torch.isfinite(sampling.truncate(batch, top_p=0.75))
    assert finite.tolist() == [[True, True, False, False], [False, True, False, True]]


def test_top_k_then_top_p_on_the_renormalised_rest() -> None:
    assert _kept(_logits(), top_k=2) == [0, 1]
    assert _kept(_logits(), top_k=3) == [0, 1, 2, 3]  # ties with the 3rd largest are kept
    # top-k 2 leaves 2/3 and 1/3: top_p 0.6 is reached by the first, 0.7 needs both
    # (on the full distribution, 0.6 would need two tokens and 0.7 still two).
    assert _kept(_logits(), top_k=2, top_p=0.6) == [0]
    assert _kept(_logits(), top_p=0.6) == [0, 1]
    assert _kept(_logits(), top_k=2, top_p=0.7) == [0, 1]
    assert _kept(_logits(), top_k=1) == [0]
    assert _kept(_logits(), top_k=0) == [0, 1, 2, 3]
    assert _kept(_logits(), top_k=10) == [0, 1, 2, 3]


def test_sample_draws_only_kept_tokens_and_is_seeded() -> None:
    logits = _logits([3, 1, 0, 2])  # the 1/2 token is id 2, the 1/4 token id 1
    gen = torch.Generator().manual_seed(0)
    draws = {
        int(sampling.sample(logits, temperature=1.0, top_p=0.5, generator=gen)) for _ in range(50)
    }
    assert draws == {2}
    gen = torch.Generator().manual_seed(0)
    draws = {
        int(sampling.sample(logits, temperature=1.0, top_p=0.75, generator=gen)) for _ in range(200)
    }
    assert draws == {1, 2}
    a = sampling.sample(
        logits.repeat(8, 1), temperature=1.0, generator=torch.Generator().manual_seed(3)
    )
    b = sampling.sample(
        logits.repeat(8, 1), temperature=1.0, generator=torch.Generator().manual_seed(3)
    )
    assert a.shape == (8,) and a.tolist() == b.tolist()


def test_greedy_ignores_the_generator() -> None:
    logits = _logits([1, 0, 2, 3])
    assert int(sampling.sample(logits, temperature=0.0)) == 1
    assert sampling.sample(logits.repeat(2, 1), temperature=0.0).tolist() == [1, 1]


def test_local_engine_uses_the_shared_sampler_at_the_boundary() -> None:
    # The engine's own sampler once kept the 1/4 token at top_p 0.5 in one of the two copies.
    gen = torch.Generator().manual_seed(0)
    params = SamplingParams(temperature=1.0, top_p=0.5)
    for _ in range(50):
        token, logprob = _sample(_logits(), params, gen)
        assert token == 0
        # the reported logprob is the untruncated one, as vLLM reports it
        assert logprob == pytest.approx(math.log(0.5))


def test_draw_frequencies_match_the_probabilities() -> None:
    """Each token's frequency over 40,000 seeded draws is its probability (within 4 standard
    errors), and a truncated token is never drawn."""
    probs = torch.tensor([0.5, 0.0, 0.3, 0.15, 0.05, 0.0])
    logits = torch.log(probs)  # -inf for the two impossible tokens
    n = 40_000
    draws = sampling.draw(logits.repeat(n, 1), generator=torch.Generator().manual_seed(7))
    counts = torch.bincount(draws, minlength=len(probs)).double() / n
    stderr = (probs.double() * (1 - probs.double()) / n).sqrt()
    assert torch.all((counts - probs.double()).abs() <= 4 * stderr + 1e-12)
    assert counts[1] == 0 and counts[5] == 0


def test_draws_do_not_move_under_float_rounding_noise() -> None:
    """Batching changes logits by float rounding (~1e-5); a seeded draw must not change with
    it, or "the same tokens alone or batched" breaks. Inverse-CDF sampling fails this over a
    49k vocabulary (every boundary of the cumulative sum drifts: ~0.5% of draws moved to a
    neighbouring token); the sampler's draw does not."""
    gen = torch.Generator().manual_seed(0)
    moved = 0
    for i in range(1000):
        logits = torch.randn(49152, generator=gen) * 4
        noisy = logits + torch.randn(49152, generator=gen) * 1e-5
        a = sampling.draw(logits, generator=torch.Generator().manual_seed(i))
        b = sampling.draw(noisy, generator=torch.Generator().manual_seed(i))
        moved += int(a != b)
    assert moved <= 1


def test_head_first_draws_are_exact_over_a_large_vocabulary() -> None:
    """Over a vocabulary large enough for the head-first path: 10 tokens of 6% each, 990 of
    0.04% (the tail, beyond the 64-token head) and 24 impossible ones. Frequencies over
    20,000 seeded draws match, per head token and for the tail as a whole."""
    probs = torch.cat([torch.full((10,), 0.06), torch.full((990,), 0.4 / 990), torch.zeros(24)])
    assert probs.shape[0] > 4 * sampling.HEAD
    logits = torch.log(probs)
    gen = torch.Generator().manual_seed(11)
    n = 20_000
    draws = torch.stack([sampling.draw(logits, generator=gen) for _ in range(n)])
    counts = torch.bincount(draws, minlength=len(probs)).double() / n

    def within(freq: float, p: float) -> bool:
        return abs(freq - p) <= 4 * (p * (1 - p) / n) ** 0.5

    assert all(within(float(counts[i]), 0.06) for i in range(10))
    assert within(float(counts[10:1000].sum()), 0.4)
    assert counts[1000:].sum() == 0


def _nucleus_by_full_sort(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """The definition, by sorting the whole vocabulary."""
    values, order = torch.sort(logits, dim=-1, descending=True)
    cumulative = torch.softmax(values, dim=-1).cumsum(dim=-1)
    before = torch.cat([torch.zeros_like(cumulative[..., :1]), cumulative[..., :-1]], dim=-1)
    drop = before >= top_p
    drop[..., 0] = False
    return logits.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))


@pytest.mark.parametrize("scale", [0.3, 1.0, 4.0, 12.0])  # flat (falls back) .. peaked
@pytest.mark.parametrize("top_p", [0.1, 0.5, 0.9, 0.99])
def test_top_p_from_candidates_equals_the_full_sort(
    monkeypatch: pytest.MonkeyPatch, scale: float, top_p: float
) -> None:
    monkeypatch.setattr(sampling, "NUCLEUS_CANDIDATES", 16)
    generator = torch.Generator().manual_seed(int(scale * 100 + top_p * 10))
    logits = torch.randn(6, 500, generator=generator) * scale
    for rows in (logits, logits[0]):  # a batch, and one row
        for top_k in (0, 40):
            expected = _nucleus_by_full_sort(sampling.truncate(rows, top_k=top_k), top_p)
            assert torch.equal(sampling.truncate(rows, top_k=top_k, top_p=top_p), expected)


def test_top_p_skips_the_whole_sort_when_the_candidates_hold_the_nucleus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logits = torch.randn(2, 50_000, generator=torch.Generator().manual_seed(0)) * 8
    expected = _nucleus_by_full_sort(logits, 0.9)
    assert sampling.NUCLEUS_CANDIDATES < 50_000

    def no_sort(*args: object, **kwargs: object) -> None:
        raise AssertionError("sorted the whole vocabulary")

    monkeypatch.setattr(torch, "sort", no_sort)
    assert torch.equal(sampling.truncate(logits, top_p=0.9), expected)
    with pytest.raises(AssertionError, match="whole vocabulary"):  # flat rows need the sort
        sampling.truncate(torch.zeros(1, 50_000), top_p=0.9)
