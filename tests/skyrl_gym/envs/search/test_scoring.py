from __future__ import annotations

import pytest

from skyrl_gym.envs.search.scoring import (
    RewardKind,
    exact_match,
    f1_score,
    normalize_answer,
    score_answer,
)


def test_normalize_answer_drops_case_punctuation_articles_and_spaces() -> None:
    assert normalize_answer("  The  Quick, brown fox! ") == "quick brown fox"
    assert normalize_answer("an apple a day") == "apple day"
    assert normalize_answer("'strict'") == "strict"


def test_exact_match_takes_the_best_gold() -> None:
    assert exact_match("heapq.nlargest", ["nlargest", "heapq.nlargest"]) == 1.0
    assert exact_match("The nlargest.", ["nlargest"]) == 1.0
    assert exact_match("nsmallest", ["nlargest"]) == 0.0


def test_f1_is_word_overlap() -> None:
    # prediction 3 words, gold 2 words, 2 in common: p=2/3, r=1, f1=0.8
    assert f1_score("quick brown fox", ["brown fox"]) == pytest.approx(0.8)
    assert f1_score("red", ["brown fox", "red"]) == 1.0
    assert f1_score("cat", ["dog"]) == 0.0
    assert f1_score("", ["dog"]) == 0.0


def test_score_answer_selects_the_metric() -> None:
    assert score_answer("quick brown fox", ["brown fox"], RewardKind.EXACT_MATCH) == 0.0
    assert score_answer("quick brown fox", ["brown fox"], RewardKind.F1) == pytest.approx(0.8)
    assert RewardKind("f1") is RewardKind.F1
