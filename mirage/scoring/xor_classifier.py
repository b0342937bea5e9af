"""The passage-likelihood classifier over stored XOR-AttriQA scores: each passage's features
(:func:`passage_features`, :mod:`mirage.likelihood.features`) from a scored item over MIRAGE-EX's tokens
(:func:`ex_cti_config`), the classifier fitted on calibration items (:func:`fit_learned_model`, :func:`fit_rows`),
with document methods' passage scores as more features (:func:`with_method_features`, ``--classifier-methods``), its
rows as the report tables them (:func:`learned_rows`), and one row per (item, passage) with its scores
(:func:`pair_scores`). Pure functions of :class:`~mirage.scoring.xor_attriqa.ItemScores`; nothing here runs a
model. :mod:`mirage.scoring.xor_eval` tables them beside the other settings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mirage.attribution.cti import select_tokens
from mirage.config import ConfigError, CTIConfig, MirageConfig
from mirage.likelihood.classifier import LearnedModel, fit_learned
from mirage.likelihood.features import FEATURES, document_features, matrix
from mirage.scoring.xor_attriqa import ItemScores
from mirage.scoring.xor_data import XorItem

__all__ = ["PASSAGE_SCORE", "ex_cti_config", "feature_rows", "fit_learned_model", "fit_rows", "learned_rows",
           "method_feature", "pair_scores", "passage_features", "with_method_features"]

#: The threshold-free per-passage score of the ``passage_score`` setting (a feature of
#: :mod:`mirage.likelihood.features`): how much the passage alone raises the answer's log-probability over no passage.
#: Chosen as the single feature with the best ROC-AUC on the calibration splits (train + val, English view,
#: smollm2: 0.798; the leave-one-out drop 0.722, the best CCI aggregation 0.709), never on test rows.
PASSAGE_SCORE = "only_gain"


def ex_cti_config(cfg: MirageConfig) -> CTIConfig:
    """MIRAGE-EX's CTI selector under ``cfg``: mean + k·std of the answer's scores (``cti.std_k``, ``cti.std_kind``)."""
    return CTIConfig(metric=cfg.cti.metric, selector="std", std_k=cfg.cti.std_k, std_kind=cfg.cti.std_kind,
                     threshold_floor=cfg.cti.threshold_floor)


def passage_features(scores: ItemScores, *, cti: CTIConfig | None = None) -> list[dict[str, float]]:
    """The per-passage features (:func:`mirage.likelihood.features.document_features`) of a scored item, over the
    tokens MIRAGE-EX selects (``cti``: its selector; the example-level default)."""
    selected = select_tokens(scores.cti, cti or CTIConfig(selector="std"))[0] if scores.n_docs > 1 else []
    return document_features(cti=scores.cti, rows=scores.cci, docs=scores.docs_per_context_token(),
                             n_docs=scores.n_docs, selected=selected, content=scores.content_per_context_token(),
                             signals=scores.signals)


def feature_rows(items: Sequence[XorItem], scores: dict[str, ItemScores], cti: CTIConfig
                 ) -> list[tuple[XorItem, list[dict[str, float]]]]:
    """(item, :func:`passage_features` per passage) for each of ``items`` that ``scores`` holds."""
    return [(item, passage_features(scores[item.key], cti=cti)) for item in items if item.key in scores]


def fit_learned_model(calibration_items: Sequence[XorItem], scores: dict[str, ItemScores], *, cti: CTIConfig,
                      names: Sequence[str] = FEATURES) -> LearnedModel:
    """The learned classifier fitted on the calibration items' passages (:mod:`mirage.likelihood.classifier`)."""
    return fit_rows(feature_rows(calibration_items, scores, cti), names)


def method_feature(method: str) -> str:
    """The name of the classifier feature holding a document method's score of the passage
    (``--classifier-methods``)."""
    return f"method:{method}"


def with_method_features(rows: Sequence[tuple[XorItem, list[dict[str, float]]]],
                         methods: Sequence[str], method_scores: Mapping[str, Mapping[str, Sequence[float]]]
                         ) -> list[tuple[XorItem, list[dict[str, float]]]]:
    """``rows`` (item, features per passage) with each of ``methods``' passage score added as a feature
    (:func:`method_feature`; ``method_scores``: method → item key → score per passage), keeping the items every one
    of them scored."""
    out = []
    for item, feats in rows:
        found = [method_scores.get(m, {}).get(item.key) for m in methods]
        scored = [f for f in found if f is not None]
        if len(scored) < len(found) or any(len(f) != len(feats) for f in scored):
            continue
        out.append((item, [{**f, **{method_feature(m): float(doc[d]) for m, doc in zip(methods, scored)}}
                           for d, f in enumerate(feats)]))
    return out


def fit_rows(rows: Sequence[tuple[XorItem, list[dict[str, float]]]], names: Sequence[str]) -> LearnedModel:
    """The classifier on features ``names`` fitted on ``rows`` (:func:`feature_rows`), grouped by item; a
    ConfigError saying what to give where the rows cannot fit it."""
    X = [r for _item, feats in rows for r in matrix(feats, names)]
    y = [label for item, _feats in rows for label in item.labels]
    groups = [item.key for item, feats in rows for _ in feats]
    try:
        return fit_learned(X, y, groups=groups, names=names)
    except ValueError as err:
        raise ConfigError(f"the learned setting cannot be fitted on the calibration files' {len(rows)} scored "
                          f"item(s): {err} Give more calibration rows (--calibrate-on train.jsonl val.jsonl), or "
                          "leave the setting out (--settings ex cal).") from err


def learned_rows(model: LearnedModel, rows: Sequence[tuple[XorItem, list[dict[str, float]]]],
                 threshold: float | None = None) -> list[tuple[str, list[bool], list[bool], list[float], str]]:
    """The classifier's rows (lang, predictions at ``threshold`` (default: its own), labels, probabilities, item
    key) per item of ``rows``, as the report tables a setting's."""
    cut = model.threshold if threshold is None else threshold
    out = []
    for item, feats in rows:
        probs = model.predict_proba(matrix(feats, model.features))
        out.append((item.lang, [p >= cut for p in probs], list(item.labels), probs, item.key))
    return out


def pair_scores(items: Sequence[XorItem], scores: dict[str, ItemScores], *, config: MirageConfig | None = None,
                model: LearnedModel | None = None) -> list[dict[str, Any]]:
    """One row per scored (item, passage) pair: key, language, passage index, human label, the ``passage_score``
    and, given the fitted ``model``, the learned probability and prediction (for ROC curves and peer comparisons)."""
    cfg = config or MirageConfig()
    ex_cti = ex_cti_config(cfg)
    out = []
    for item, feats in feature_rows(items, scores, ex_cti):
        probs = model.predict_proba(matrix(feats, model.features)) if model is not None else None
        for d, (f, label) in enumerate(zip(feats, item.labels)):
            row = {"key": item.key, "lang": item.lang, "passage": d, "label": bool(label),
                   "passage_score": f[PASSAGE_SCORE]}
            if model is not None and probs is not None:
                row.update(learned=probs[d], learned_cites=probs[d] >= model.threshold)
            out.append(row)
    return out
