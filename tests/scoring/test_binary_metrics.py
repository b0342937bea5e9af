"""The binary scores and ROC-AUC, computed without scikit-learn, equal scikit-learn's bit for bit: on every
confusion table of up to 6 pairs and on random score lists with ties, one class, or both."""

from __future__ import annotations

import itertools
import math
import random
import warnings

import pytest

from mirage.scoring.metrics import BinaryCounts, agreement, balanced_accuracy, f1, precision, recall, roc_auc


def _sklearn(c: BinaryCounts) -> dict[str, float | None]:
    from sklearn.metrics import accuracy_score, balanced_accuracy_score, precision_recall_fscore_support

    labels, predictions, weights = [1, 0, 0, 1], [1, 1, 0, 0], [c.tp, c.fp, c.tn, c.fn]

    def pct(v: float) -> float | None:
        return None if math.isnan(v) else 100.0 * float(v)

    p, r, f, _ = precision_recall_fscore_support(labels, predictions, sample_weight=weights, average="binary",
                                                 zero_division=math.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bal = balanced_accuracy_score(labels, predictions, sample_weight=weights)
    return {"agreement": pct(accuracy_score(labels, predictions, sample_weight=weights)), "precision": pct(p),
            "recall": pct(r), "f1": pct(f), "balanced_accuracy": pct(bal)}


def test_binary_scores_equal_scikit_learns_on_every_small_table():
    ours = {"agreement": agreement, "precision": precision, "recall": recall, "f1": f1,
            "balanced_accuracy": balanced_accuracy}
    tables = [BinaryCounts(*cells) for cells in itertools.product(range(4), repeat=4) if sum(cells)]
    tables += [BinaryCounts(37, 11, 203, 19), BinaryCounts(0, 0, 50, 7), BinaryCounts(13, 0, 0, 0)]
    for c in tables:
        want = _sklearn(c)
        got = {name: fn(c) for name, fn in ours.items()}
        assert got == want, (c, got, want)
    assert all(fn(BinaryCounts()) is None for fn in ours.values())


def test_counts_of_predictions_and_labels():
    c = BinaryCounts.of([True, True, False, False, True], [True, False, False, True, True])
    assert (c.tp, c.fp, c.tn, c.fn) == (2, 1, 1, 1)
    assert BinaryCounts.of([], []) == BinaryCounts()
    with pytest.raises(ValueError, match="2 predictions for 1 labels"):
        BinaryCounts.of([True, False], [True])


@pytest.mark.parametrize("seed", range(40))
def test_roc_auc_equals_scikit_learns_bit_for_bit(seed):
    from sklearn.metrics import roc_auc_score

    rng = random.Random(seed)
    n = rng.randint(2, 60)
    levels = rng.choice([3, 10, None])  # few distinct scores (many ties) or continuous ones
    scores = [rng.randrange(levels) / levels if levels else rng.random() for _ in range(n)]
    labels = [rng.random() < 0.3 for _ in range(n)]
    if len(set(labels)) < 2:
        assert roc_auc(scores, labels) is None
        return
    assert roc_auc(scores, labels) == float(roc_auc_score([int(y) for y in labels], scores))


def test_roc_auc_edge_cases():
    assert roc_auc([0.1, 0.9], [False, True]) == 1.0 and roc_auc([0.9, 0.1], [False, True]) == 0.0
    assert roc_auc([0.5, 0.5, 0.5], [True, False, True]) == 0.5
    assert roc_auc([0.2, 0.3], [True, True]) is None
    with pytest.raises(ValueError, match="3 scores for 2 labels"):
        roc_auc([1, 2, 3], [True, False])
