"""The learned passage classifier: a regularised logistic regression over the per-document features
(:mod:`mirage.likelihood.features`), fitted on calibration files only and applied unchanged to test files; and the
passage-likelihood citation rule of ``mirage attribute`` (``aggregation.rule: likelihood``, formerly ``learned``)
that applies it per sentence.

    model = fit_learned(X_cal, y_cal, groups=item_ids, names=FEATURES)
    model.predict_proba(X_test); model.predict(X_test)
    LearnedModel.from_dict(model.to_dict())     # the same predictions, from plain JSON

Fitting: features are standardised (mean and scale of the calibration rows), the classes weighted to balance, and
the inverse regularisation ``C`` chosen from :data:`C_GRID` by grouped cross-validation (folds never split an
item's passages) maximising ROC-AUC. The decision threshold is the probability that maximises F1 on the
out-of-fold predictions of the chosen ``C`` (positives are the minority: F1 on them is the measure that a rule
citing nothing cannot win). Applying needs only numpy: the model is the scaler, the coefficients, the intercept
and the threshold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from mirage.attribution.serialization import JSONRecord
from mirage.config import ConfigError
from mirage.data.readers import parse_json, read_text
from mirage.likelihood.features import document_features, matrix

__all__ = ["C_GRID", "LearnedModel", "best_threshold", "fit_learned", "learned_citations", "load_learned",
           "shipped_model_spec"]

#: Inverse regularisation strengths tried.
C_GRID: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
FOLDS = 5


@dataclass
class LearnedModel(JSONRecord):
    """A fitted passage classifier: ``p = sigmoid(coef · (x - mean) / scale + intercept)``, cited when
    ``p >= threshold``. ``cv`` records the model selection (ROC-AUC per C, out-of-fold F1 at the threshold) and
    ``agreement_threshold``, the probability that maximises out-of-fold agreement instead (an operating point for
    readers who weigh every passage alike; cites fewer)."""

    features: list[str]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    threshold: float
    C: float
    n_rows: int
    n_items: int
    cv: dict[str, Any] = field(default_factory=dict)

    def decision(self, X: Sequence[Sequence[float]]) -> np.ndarray:
        x = np.asarray(X, dtype=np.float64).reshape(-1, len(self.features))
        z = (x - np.asarray(self.mean)) / np.asarray(self.scale)
        return z @ np.asarray(self.coef) + self.intercept

    def predict_proba(self, X: Sequence[Sequence[float]]) -> list[float]:
        """Probability that each row's passage supports the answer."""
        return (1.0 / (1.0 + np.exp(-self.decision(X)))).tolist()

    def predict(self, X: Sequence[Sequence[float]]) -> list[bool]:
        return [p >= self.threshold for p in self.predict_proba(X)]

    def coefficients(self) -> dict[str, float]:
        """Standardised coefficient per feature, largest magnitude first (what carries the signal)."""
        return dict(sorted(zip(self.features, self.coef), key=lambda kv: -abs(kv[1])))


def best_threshold(scores: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray,
                   metric: str = "f1") -> tuple[float, float]:
    """The global threshold on ``scores`` (cite when score >= threshold) that maximises ``metric`` ("f1" or
    "agreement") on ``labels``, and that value as a fraction. Candidates lie between neighbouring distinct scores
    (the midpoint; equal scores move together), plus one above all (citing nothing); ties go to the lower
    threshold."""
    if len(scores) != len(labels) or not len(scores):
        raise ValueError(f"need one label per score and at least one score; got {len(scores)} and {len(labels)}.")
    if metric not in ("f1", "agreement"):
        raise ValueError(f"metric must be 'f1' or 'agreement', got {metric!r}.")
    pairs = sorted(zip((float(s) for s in scores), (bool(y) for y in labels)), key=lambda p: -p[0])
    positives = sum(y for _s, y in pairs)
    n = len(pairs)
    tp = fp = 0
    value = (0.0 if metric == "f1" else (n - positives) / n)
    best_t, best = pairs[0][0] + 1.0, value
    i = 0
    while i < n:
        s = pairs[i][0]
        while i < n and pairs[i][0] == s:  # equal scores are cited together
            tp, fp, i = tp + pairs[i][1], fp + (not pairs[i][1]), i + 1
        value = (2 * tp / (tp + fp + positives) if metric == "f1"
                 else (tp + (n - positives - fp)) / n)
        if value >= best:
            below = pairs[i][0] if i < n else s - 1.0
            best_t, best = (s + below) / 2, value
    return best_t, best


def fit_learned(X: Sequence[Sequence[float]], y: Sequence[bool], *, groups: Sequence[Any], names: Sequence[str],
                C_grid: Sequence[float] = C_GRID, folds: int = FOLDS, seed: int = 0) -> LearnedModel:
    """Fit the classifier on calibration rows (``groups``: each row's item, so folds keep items whole)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import GroupKFold

    x = np.asarray(X, dtype=np.float64)
    labels = np.asarray(y, dtype=bool)
    if x.ndim != 2 or x.shape[0] != len(labels) or x.shape[1] != len(names):
        raise ValueError(f"X must be [n_rows, {len(names)}] with one label per row; got {x.shape} and {len(labels)}.")
    if labels.all() or not labels.any():
        raise ValueError("the calibration rows need both supporting and unsupporting passages to fit a classifier.")
    if len(set(map(str, groups))) < 2:
        raise ValueError("the calibration rows come from one item; cross-validation needs passages of 2 items or "
                         "more.")
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    z = (x - mean) / scale
    group_ids = np.unique(np.asarray([str(g) for g in groups]), return_inverse=True)[1]
    n_folds = max(2, min(folds, len(np.unique(group_ids))))
    splits = list(GroupKFold(n_splits=n_folds).split(z, labels, group_ids))

    def model(c: float) -> Any:
        return LogisticRegression(C=c, class_weight="balanced", max_iter=5000, random_state=seed)

    aucs, oof_by_c = {}, {}
    for c in C_grid:
        oof = np.zeros(len(labels))
        for train, test in splits:
            if labels[train].all() or not labels[train].any():
                oof[test] = 0.5
                continue
            oof[test] = model(c).fit(z[train], labels[train]).predict_proba(z[test])[:, 1]
        oof_by_c[c] = oof
        aucs[c] = float(roc_auc_score(labels, oof))
    best_c = max(C_grid, key=lambda c: (aucs[c], -c))  # ties: the stronger regularisation
    threshold, oof_f1 = best_threshold(oof_by_c[best_c], labels, "f1")
    agreement_threshold, oof_agreement = best_threshold(oof_by_c[best_c], labels, "agreement")
    fitted = model(best_c).fit(z, labels)
    return LearnedModel(features=list(names), mean=mean.tolist(), scale=scale.tolist(),
                        coef=fitted.coef_[0].tolist(), intercept=float(fitted.intercept_[0]), threshold=threshold,
                        C=float(best_c), n_rows=len(labels), n_items=len(np.unique(group_ids)),
                        cv={"folds": n_folds, "roc_auc_by_C": {str(c): a for c, a in aucs.items()},
                            "oof_f1_at_threshold": oof_f1, "agreement_threshold": agreement_threshold,
                            "oof_agreement_at_threshold": oof_agreement})


# -- the learned citation rule of ``mirage attribute`` ---------------------------------------------------------------

#: Learned classifiers shipped with the package, by the embedded model name they were fitted for.
SHIPPED_DIR = Path(__file__).parents[1] / "assets" / "learned"


#: How a config names a shipped classifier without this machine's install folder: ``shipped:MODEL``.
SHIPPED_PREFIX = "shipped:"


def shipped_model_path(model_name: str) -> Path | None:
    """The classifier shipped for an embedded model (fitted on XOR-AttriQA train + val), or None."""
    path = SHIPPED_DIR / f"{model_name}.json"
    return path if path.exists() else None


def shipped_model_spec(model_name: str) -> str | None:
    """``shipped:MODEL``, the portable name of the classifier shipped for ``model_name`` (what a config and a
    recorded run hold, whatever folder mirage is installed in), or None where none ships."""
    return f"{SHIPPED_PREFIX}{model_name}" if shipped_model_path(model_name) is not None else None


def _shipped_names() -> str:
    """The models a classifier ships for, for messages."""
    return ", ".join(sorted(p.stem for p in SHIPPED_DIR.glob("*.json"))) or "none"


@lru_cache(maxsize=8)
def _load(path: str) -> LearnedModel:
    try:
        data = parse_json(read_text(path, what="learned classifier file"))
        return LearnedModel.from_dict(data.get("learned", data) if "features" not in data else data)
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ConfigError(f"aggregation.learned_model={path!r} is not a learned classifier file ({err}); give the "
                          "learned.json a `mirage score xor-attriqa --calibrate-on …` run wrote.") from None


def load_learned(path: str | None, model_name: str) -> LearnedModel:
    """The classifier at ``path`` (``shipped:MODEL``: the one shipped for MODEL), or the one shipped for
    ``model_name``; ConfigError naming the fix otherwise."""
    if path is not None and str(path).startswith(SHIPPED_PREFIX):
        name = str(path).removeprefix(SHIPPED_PREFIX)
        shipped = shipped_model_path(name)
        if shipped is None:
            raise ConfigError(f"aggregation.learned_model={path!r}: no classifier ships for {name!r} (shipped: "
                              f"{_shipped_names()}).")
        return _load(str(shipped))
    if path is None:
        shipped = shipped_model_path(model_name)
        if shipped is None:
            raise ConfigError(
                f"aggregation.rule='likelihood' needs a classifier fitted for {model_name!r}; none ships with mirage "
                f"(shipped: {_shipped_names()}). Fit "
                "one with `mirage score xor-attriqa TEST… --calibrate-on train.jsonl val.jsonl --model "
                f"{model_name} -o DIR` and set aggregation.learned_model=DIR/learned.json.")
        path = str(shipped)
    return _load(str(path))


def learned_citations(model: LearnedModel, *, cti: Sequence[float], rows: Mapping[int, Sequence[float]],
                      docs: Sequence[int], n_docs: int, selected: Sequence[int], sentences: Sequence[Sequence[int]],
                      content: Sequence[bool] | None, signals: Mapping[str, Any],
                      max_citations: int) -> list[tuple[list[int], list[float]]]:
    """Per sentence (``sentences[s]``: its answer token indices), the 1-based documents the classifier cites
    (probability at or above its threshold, most probable first, at most ``max_citations``) and every document's
    probability. A sentence without a context-sensitive token cites nothing, as in the reference rule. Features are
    those of :func:`mirage.likelihood.features.document_features` over the sentence's tokens: its context-sensitive
    tokens' CCI rows and its tokens' leave-one-out and single-document log-probabilities (attention over the whole
    answer)."""
    chosen = set(selected)
    out: list[tuple[list[int], list[float]]] = []
    for members in sentences:
        members = list(members)
        picked = [i for i, t in enumerate(members) if t in chosen]
        if not picked or n_docs < 1:
            out.append(([], [0.0] * n_docs))
            continue
        sig = {"attention": signals.get("attention") or []}
        for name in ("logprob", "none_logprob"):
            if signals.get(name):
                sig[name] = [signals[name][t] for t in members]
        for name in ("loo_logprob", "only_logprob"):
            if signals.get(name):
                sig[name] = [[row[t] for t in members] for row in signals[name]]
        feats = document_features(cti=[cti[t] for t in members], rows={i: rows[members[i]] for i in picked},
                                  docs=docs, n_docs=n_docs, selected=picked, content=content, signals=sig)
        probs = model.predict_proba(matrix(feats, model.features))
        cited = sorted((d for d in range(n_docs) if probs[d] >= model.threshold), key=lambda d: -probs[d])
        out.append(([d + 1 for d in cited[:max_citations]], probs))
    return out
