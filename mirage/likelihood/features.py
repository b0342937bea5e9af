"""Per-document features of an attributed answer (or of one sentence of it), from its token scores and passage
signals, no model run: aggregations of the token-level CTI/CCI signals over the context-sensitive tokens, the
leave-one-document-out drop and the attention share (:mod:`mirage.likelihood.signals`). The learned citation rule
(:mod:`mirage.likelihood.classifier`) classifies documents from them; the XOR-AttriQA scorer computes them per passage.

    rows = document_features(cti=..., rows=..., docs=..., n_docs=3, selected=[...], signals=sig.to_dict())
    matrix(rows, FEATURES)                    # [n_docs, n_features]

Every feature is higher when the document looks more used. Families (the names' prefixes):

- ``ex_*``: over the context-sensitive tokens (by default MIRAGE-EX's: mean + k·std of the answer's CTI scores), the
  tokens every run has CCI rows for. ``share_max``: the passage's largest saliency over the context's largest (what
  MIRAGE's ROC-AUC uses); ``mass``: the passage's fraction of the summed saliency; ``cti_mass``: that fraction weighted
  by |CTI|; ``density``: the passage's mean saliency per token over the context's mean (length-normalised); ``kept``:
  the passage's fraction of the context tokens the top-5 % rule keeps. ``content_*``: the same with the template's
  scaffolding tokens (``Document [1]:``, newlines) left out.
- ``all_*``: the same over every answer token, weighting each by |CTI| (needs every token's CCI row: calibration
  files have them, test files only with ``--all-tokens``); used to measure what the selection loses, not by the
  default learned model.
- ``loo_*``: leave-one-passage-out: ``drop`` = log p(answer | all) − log p(answer | all but this passage) in nats,
  ``drop_token_max`` its largest per-token value, ``drop_rank`` the passage's rank by drop among the item's passages
  (1 for the largest, 0 for the smallest).
- ``only_*``: the document alone: ``gain`` = log p(answer | only this document) − log p(answer | no document), in
  nats (sufficiency: does this document by itself make the answer likely?), ``gain_token_max`` its largest per-token
  value, ``vs_full`` = log p(answer | only this document) − log p(answer | all documents), ``gain_rank`` the rank by
  gain, ``gain_gap`` the gain minus the item's largest, ``gain_per_token`` the gain over the answer's length,
  ``min_logprob`` the least likely answer token's log p with this document alone.
- ``logprob_per_token`` / ``contextless_logprob_per_token``: the answer's mean log p with all documents / with none
  (how sure the model is of it either way; the same for every passage of an item).
- ``attention``: the answer's attention share on the passage, times the number of passages (1 = uniform).
- item context: ``cti_max`` (the answer's largest |CTI|), ``inv_docs`` (1 / number of passages), ``length_frac``
  (the passage's fraction of the context tokens).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from mirage.attribution.cci import select_context
from mirage.config import CCIConfig

__all__ = ["ALL_TOKEN_FEATURES", "CCI_FEATURES", "FEATURES", "LOO_FEATURES", "document_features", "matrix"]

#: The features of the default learned model: the single-document family and the item's context. Chosen on the
#: calibration splits only (train + val, English view, smollm2, grouped 5-fold cross-validation): adding the CCI
#: aggregations, the leave-one-out drops and the attention share to them changed the out-of-fold ROC-AUC by less
#: than 0.005 (0.839 with all 24 features, 0.841 with these 12), and these need no gradient and no CCI row.
FEATURES: tuple[str, ...] = (
    "only_gain", "only_gain_token_max", "only_vs_full", "only_gain_rank", "only_gain_gap", "only_gain_per_token",
    "only_min_logprob", "logprob_per_token", "contextless_logprob_per_token", "cti_max", "inv_docs", "length_frac",
)
#: Aggregations of the CCI saliency over the context-sensitive tokens (need their CCI rows).
CCI_FEATURES: tuple[str, ...] = ("ex_share_max", "ex_mass", "ex_cti_mass", "ex_density", "ex_kept",
                                 "content_share_max", "content_mass", "content_density")
#: The leave-one-out family and the attention share (need those signals).
LOO_FEATURES: tuple[str, ...] = ("loo_drop", "loo_drop_token_max", "loo_drop_rank", "attention")
#: Features over every answer token (need every CCI row).
ALL_TOKEN_FEATURES: tuple[str, ...] = ("all_share_max", "all_mass", "all_density")
TOP_PERCENT = CCIConfig(top_k=None, top_percent=5.0)


def _aggregate(rows: Sequence[Sequence[float]], weights: Sequence[float], docs: Sequence[int], n_docs: int,
               mask: Sequence[bool] | None, prefix: str, kept: bool = False) -> dict[str, list[float]]:
    """``share_max``, ``mass``, ``cti_mass``, ``density`` (and ``kept``) per passage over the given CCI rows."""
    n_ctx = [0] * n_docs
    for j, d in enumerate(docs):
        if mask is None or mask[j]:
            n_ctx[d] += 1
    total_ctx = sum(n_ctx) or 1
    share_max = [0.0] * n_docs
    mass = [0.0] * n_docs
    cti_mass = [0.0] * n_docs
    density = [0.0] * n_docs
    kept_frac = [0.0] * n_docs
    for row, w in zip(rows, weights):
        per_doc_max = [0.0] * n_docs
        per_doc_sum = [0.0] * n_docs
        for j, (v, d) in enumerate(zip(row, docs)):
            if mask is not None and not mask[j]:
                continue
            per_doc_sum[d] += v
            per_doc_max[d] = max(per_doc_max[d], v)
        top = max(per_doc_max) or 1.0
        total = sum(per_doc_sum) or 1.0
        mean_all = total / total_ctx
        for d in range(n_docs):
            share_max[d] = max(share_max[d], per_doc_max[d] / top)
            mass[d] += per_doc_sum[d] / total
            cti_mass[d] += abs(w) * per_doc_sum[d] / total
            if n_ctx[d]:
                density[d] = max(density[d], (per_doc_sum[d] / n_ctx[d]) / mean_all)
        if kept:
            keep = select_context(row, TOP_PERCENT)
            for j in keep:
                kept_frac[docs[j]] += 1.0 / len(keep)
    n = max(1, len(rows))
    out = {f"{prefix}_share_max": share_max, f"{prefix}_mass": [m / n for m in mass],
           f"{prefix}_cti_mass": cti_mass, f"{prefix}_density": density}
    if kept:
        out[f"{prefix}_kept"] = [k / n for k in kept_frac]
    return out


def _rank(values: Sequence[float]) -> list[float]:
    """1 for the largest value, 0 for the smallest, evenly in between (ties share the better rank)."""
    n = len(values)
    if n == 1:
        return [1.0]
    order = sorted(values, reverse=True)
    return [1.0 - order.index(v) / (n - 1) for v in values]


def document_features(*, cti: Sequence[float], rows: Mapping[int, Sequence[float]], docs: Sequence[int], n_docs: int,
                      selected: Sequence[int], content: Sequence[bool] | None = None,
                      signals: Mapping[str, Any] | None = None) -> list[dict[str, float]]:
    """Named features per document (see the module docstring).

    ``cti[t]``: CTI score of answer token t; ``rows[t]``: its CCI saliency over the context tokens (needed for every
    ``selected`` token); ``docs[j]``: the 0-based document of context token j; ``content[j]``: whether it is
    document text (None: all are); ``signals``: a :class:`~mirage.likelihood.signals.PassageSignals` as a dict over
    the same answer tokens. A family is left out when what it needs is not there: the CCI family without the
    ``selected`` tokens' rows, ``all_*`` without every token's row, ``loo_*`` and ``attention`` without those
    signals. A single document gets 1 for every CCI and leave-one-out feature: it is the only one there is.
    """
    n = n_docs
    if n == 1:
        one = {name: 1.0 for name in (*FEATURES, *CCI_FEATURES, *LOO_FEATURES, *ALL_TOKEN_FEATURES)}
        one.update(cti_max=max((abs(c) for c in cti), default=0.0), inv_docs=1.0, length_frac=1.0)
        return [one]
    feats: dict[str, list[float]] = {}
    if all(t in rows for t in selected):  # the CCI family needs the context-sensitive tokens' rows
        weights = [cti[t] for t in selected]
        picked = [rows[t] for t in selected]
        feats.update(_aggregate(picked, weights, docs, n, None, "ex", kept=True))
        if content is not None:
            feats.update(_aggregate(picked, weights, docs, n, content, "content"))
        else:
            feats.update({f"content_{k[3:]}": v for k, v in feats.items() if k != "ex_kept"})
    if cti and all(t in rows for t in range(len(cti))):
        every = list(range(len(cti)))
        feats.update(_aggregate([rows[t] for t in every], [cti[t] for t in every], docs, n, None, "all"))
    sig = signals or {}
    full = list(sig.get("logprob") or [])
    loo = [list(r) for r in sig.get("loo_logprob") or []]
    if loo and full:
        drop = [sum(full) - sum(r) for r in loo]
        feats["loo_drop"] = drop
        feats["loo_drop_token_max"] = [max(f - w for f, w in zip(full, r)) for r in loo]
        feats["loo_drop_rank"] = _rank(drop)
    only = [list(r) for r in sig.get("only_logprob") or []]
    none = list(sig.get("none_logprob") or [])
    gain = [sum(r) - sum(none) for r in only] if only and none else [0.0] * n
    feats["only_gain"] = gain
    feats["only_gain_token_max"] = ([max(o - z for o, z in zip(r, none)) for r in only] if only and none
                                    else [0.0] * n)
    feats["only_vs_full"] = [sum(r) - sum(full) for r in only] if only and full else [0.0] * n
    feats["only_gain_rank"] = _rank(gain)
    feats["only_gain_gap"] = [g - max(gain) for g in gain]
    n_tok = max(1, len(none) or len(full))
    feats["only_gain_per_token"] = [g / n_tok for g in gain]
    feats["only_min_logprob"] = [min(r) for r in only] if only and all(only) else [0.0] * n
    feats["logprob_per_token"] = [sum(full) / n_tok if full else 0.0] * n
    feats["contextless_logprob_per_token"] = [sum(none) / n_tok if none else 0.0] * n
    if sig.get("attention"):
        feats["attention"] = [a * n for a in sig["attention"]]
    n_ctx = [0] * n
    for d in docs:
        n_ctx[d] += 1
    feats["cti_max"] = [max((abs(c) for c in cti), default=0.0)] * n
    feats["inv_docs"] = [1.0 / n] * n
    feats["length_frac"] = [c / (sum(n_ctx) or 1) for c in n_ctx]
    return [{name: float(values[d]) if math.isfinite(values[d]) else 0.0 for name, values in feats.items()}
            for d in range(n)]


def matrix(rows: Sequence[dict[str, float]], names: Sequence[str]) -> list[list[float]]:
    """``[n_rows, len(names)]``; a KeyError names a feature the rows lack."""
    out = []
    for row in rows:
        missing = [name for name in names if name not in row]
        if missing:
            raise KeyError(f"features {missing} are not available (the all_* features need every CCI row: "
                           "run with --all-tokens)")
        out.append([row[name] for name in names])
    return out
