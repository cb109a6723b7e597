"""Answer scoring as in the common open-domain QA evaluations (SQuAD, Natural Questions).

Both sides are normalised (lower case, punctuation and the articles a/an/the removed, spaces
collapsed); exact match compares the normalised strings, F1 the bags of normalised words.
With several gold answers the best score counts.
"""

from __future__ import annotations

import enum
import re
import string
from collections import Counter
from collections.abc import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


class RewardKind(enum.Enum):
    """Which score becomes the episode's reward."""

    EXACT_MATCH = "em"
    """1.0 if the normalised answer equals a normalised gold answer, else 0.0."""
    F1 = "f1"
    """Word-overlap F1 against the best-matching gold answer, in [0, 1]."""


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and articles, collapse whitespace."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 if `prediction` equals any gold answer after normalisation."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds))


def f1_score(prediction: str, golds: Sequence[str]) -> float:
    """The best word-overlap F1 between `prediction` and any gold answer."""
    pred_words = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        gold_words = normalize_answer(gold).split()
        if not pred_words or not gold_words:
            best = max(best, float(pred_words == gold_words))
            continue
        common = sum((Counter(pred_words) & Counter(gold_words)).values())
        if common:
            precision, recall = common / len(pred_words), common / len(gold_words)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def score_answer(prediction: str, golds: Sequence[str], kind: RewardKind) -> float:
    """The reward of `prediction` under `kind`."""
    if kind is RewardKind.EXACT_MATCH:
        return exact_match(prediction, golds)
    return f1_score(prediction, golds)
