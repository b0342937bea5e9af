"""Metric arithmetic for the benchmarks: binary agreement scores, ROC-AUC, ALCE citation quality, citation-set overlap.

Every score is a percentage in [0, 100], or ``None`` where it is undefined (no pairs, a class absent, …); averages
skip undefined values. ROC-AUC is a fraction in [0, 1], as usual. The binary scores are computed here from the
confusion counts, in the same floating-point operations as scikit-learn's (``accuracy_score``,
``precision_recall_fscore_support`` with ``zero_division=nan``, ``balanced_accuracy_score``; ``roc_auc_score`` through
its ROC curve and trapezoids), so that they equal them bit for bit (tests/scoring/test_binary_metrics.py compares them)
without importing scikit-learn, about a second of every scoring command.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mirage.registry import BINARY_METRICS

if TYPE_CHECKING:
    from mirage.attribution.results import AttributionResult

__all__ = ["BINARY_METRICS", "BinaryCounts", "BinaryMetric", "CachedJudge", "CitationSetAgreement", "NLIJudge",
           "SentenceCitationScore", "agreement", "answer_recall_precision", "attribution_details", "attribution_parity",
           "balanced_accuracy", "citation_quality", "citation_set_agreement", "f1", "harmonic_mean", "item_counts",
           "mean_defined", "mean_or_none", "paired_bootstrap", "percent", "precision", "recall",
           "register_binary_metric", "roc_auc", "score_sentence", "spearman"]

# -- binary predictions against human labels ----------------------------------------------------------------------


@dataclass(frozen=True)
class BinaryCounts:
    """Confusion counts of binary predictions against binary labels (positive = "the passage supports the answer")."""

    tp: int = 0
    fp: int = 0
    tn: int = 0
    fn: int = 0

    @classmethod
    def of(cls, predictions: Sequence[bool], labels: Sequence[bool]) -> BinaryCounts:
        if len(predictions) != len(labels):
            raise ValueError(f"{len(predictions)} predictions for {len(labels)} labels.")
        cells = [0, 0, 0, 0]  # tp, fp, tn, fn
        for p, y in zip(predictions, labels):
            cells[(0 if y else 1) if p else (3 if y else 2)] += 1
        return cls(*cells)

    @property
    def total(self) -> int:
        return self.tp + self.fp + self.tn + self.fn


def percent(num: float, den: float) -> float | None:
    """100 · num / den, or None when den is 0."""
    return None if den == 0 else 100.0 * num / den


def _ratio(num: int, den: int) -> float:
    """num / den in float64, nan when den is 0 (scikit-learn's ``zero_division=nan``)."""
    return float(num) / float(den) if den else math.nan


def _as_percent(value: float) -> float | None:
    return None if math.isnan(value) else 100.0 * float(value)


def _prf(c: BinaryCounts) -> tuple[float | None, float | None, float | None]:
    """Precision, recall and F1 (%) on the supporting class; None where scikit-learn's ``zero_division`` applies
    (F1 = 2TP / (2TP + FP + FN), undefined only with no supporting pair and no positive prediction)."""
    if c.total == 0:
        return None, None, None
    return (_as_percent(_ratio(c.tp, c.tp + c.fp)), _as_percent(_ratio(c.tp, c.tp + c.fn)),
            _as_percent(_ratio(2 * c.tp, 2 * c.tp + c.fp + c.fn)))


def agreement(c: BinaryCounts) -> float | None:
    """% of pairs where the prediction equals the label (accuracy)."""
    if c.total == 0:
        return None
    return _as_percent(_ratio(c.tp + c.tn, c.total))


def precision(c: BinaryCounts) -> float | None:
    """% of predicted supporting passages that humans judged supporting; undefined with no positive prediction."""
    return _prf(c)[0]


def recall(c: BinaryCounts) -> float | None:
    """% of supporting passages predicted as supporting; undefined with no supporting passage."""
    return _prf(c)[1]


def f1(c: BinaryCounts) -> float | None:
    """F1 on the supporting class, 2TP / (2TP + FP + FN): 0 when nothing is predicted but something supports."""
    return _prf(c)[2]


def balanced_accuracy(c: BinaryCounts) -> float | None:
    """Mean of the recalls of both classes (with one class present, that class's recall)."""
    if c.total == 0:
        return None
    recalls = [r for r in (_ratio(c.tn, c.tn + c.fp), _ratio(c.tp, c.tp + c.fn)) if not math.isnan(r)]
    return _as_percent(sum(recalls) / len(recalls))


def item_counts(records: Iterable[Mapping[str, Any]], setting: str) -> dict[str, tuple[int, int, int, int]]:
    """Per item key, the (TP, FP, FN, TN) of ``setting``'s citations against the labels, from ``pairs.jsonl``
    records (:func:`mirage.scoring.xor_eval.pair_records`); pairs where the setting cited nothing recorded are
    skipped."""
    out: dict[str, list[int]] = {}
    for rec in records:
        cited = (rec.get("settings", {}).get(setting) or {}).get("cited")
        if cited is None:
            continue
        slot = (0 if cited else 2) if rec["label"] else (1 if cited else 3)
        out.setdefault(rec["key"], [0, 0, 0, 0])[slot] += 1
    return {key: (c[0], c[1], c[2], c[3]) for key, c in out.items()}


def paired_bootstrap(base: Mapping[str, Sequence[int]], other: Mapping[str, Sequence[int]], *, resamples: int = 2000,
                     seed: int = 0) -> dict[str, Any] | None:
    """The change in F1 and balanced accuracy (%, pooled over all pairs) from ``base`` to ``other``, per-item
    (TP, FP, FN, TN) counts (:func:`item_counts`), on the items both scored, with 95 % percentile intervals from
    ``resamples`` resamples of those items (the same items for both: paired). None when they share no item."""
    import numpy as np

    keys = sorted(set(base) & set(other))
    if not keys:
        return None
    a = np.array([base[k] for k in keys], dtype=float)
    b = np.array([other[k] for k in keys], dtype=float)

    def pooled(counts: Any) -> tuple[Any, Any]:
        tp, fp, fn, tn = np.moveaxis(counts, -1, 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            return 100 * 2 * tp / (2 * tp + fp + fn), 100 * (tp / (tp + fn) + tn / (tn + fp)) / 2

    idx = np.random.default_rng(seed).integers(0, len(keys), size=(resamples, len(keys)))
    out: dict[str, Any] = {"items": len(keys)}
    for name, base_value, other_value, base_draws, other_draws in zip(
            ("f1", "balanced_accuracy"), pooled(a.sum(0)), pooled(b.sum(0)), pooled(a[idx].sum(1)),
            pooled(b[idx].sum(1))):
        diffs = other_draws - base_draws
        diffs = diffs[np.isfinite(diffs)]
        point = float(other_value - base_value)
        out[f"pooled_{name}_change"] = round(point, 2) if math.isfinite(point) else None
        out[f"pooled_{name}_change_ci95"] = ([round(float(np.percentile(diffs, q)), 2) for q in (2.5, 97.5)]
                                             if len(diffs) else None)
    return out


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Area under the ROC curve of ``scores`` for ``labels``; undefined (None) unless both classes are present."""
    if len(scores) != len(labels):
        raise ValueError(f"{len(scores)} scores for {len(labels)} labels.")
    if len({bool(y) for y in labels}) < 2:
        return None
    import numpy as np

    # scikit-learn's roc_auc_score, step by step: thresholds at the distinct scores (descending), cumulative true
    # and false positives there, collinear points dropped, (0, 0) prepended, the trapezoids summed
    y = np.asarray([bool(v) for v in labels], dtype=np.float64)
    x = np.asarray([float(v) for v in scores], dtype=np.float64)
    order = np.argsort(-x, kind="stable")
    x, y = x[order], y[order]
    idx = np.concatenate([np.nonzero(np.diff(x))[0], [len(y) - 1]])
    tps = np.cumsum(y)[idx]
    fps = 1 + idx.astype(np.float64) - tps
    if len(fps) > 2:
        keep = np.concatenate([[True], np.logical_or(np.diff(fps, 2), np.diff(tps, 2)), [True]])
        fps, tps = fps[keep], tps[keep]
    fpr = np.concatenate([[0.0], fps]) / fps[-1]
    tpr = np.concatenate([[0.0], tps]) / tps[-1]
    return float((np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2.0).sum())


def mean_or_none(values: Sequence[float]) -> float | None:
    """The mean of ``values`` (a rate, for booleans); None for no values. Every value counts (see
    :func:`mean_defined` to skip undefined ones)."""
    return sum(values) / len(values) if values else None


def mean_defined(values: Iterable[float | None]) -> float | None:
    """Mean of the values that are defined; None if none is."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return sum(vals) / len(vals) if vals else None


@dataclass(frozen=True)
class BinaryMetric:
    """A binary score of predictions against labels (:data:`mirage.registry.BINARY_METRICS`): ``fn(counts)`` is a
    percentage, None where undefined; ``title`` heads its table. Called as ``fn``."""

    fn: Callable[[BinaryCounts], float | None]
    title: str

    def __call__(self, counts: BinaryCounts) -> float | None:
        return self.fn(counts)


def register_binary_metric(name: str, fn: Callable[[BinaryCounts], float | None], *, title: str,
                           overwrite: bool = False) -> None:
    """Add a binary score: ``mirage score xor-attriqa`` then reports it for every setting and language
    (``results.json``: under ``registered_metrics``; the first five have fields of their own), its table titled
    ``title``, and the metric conformance test checks it."""
    BINARY_METRICS.register(name, BinaryMetric(fn, title), overwrite=overwrite)


# The built-in binary scores, reported for every setting (:data:`BINARY_METRICS`).
register_binary_metric("agreement", agreement, title="Agreement with human labels (%)")
register_binary_metric("precision", precision, title="Precision on supporting passages (%)")
register_binary_metric("recall", recall, title="Recall on supporting passages (%)")
register_binary_metric("f1", f1, title="F1 on supporting passages (%)")
register_binary_metric("balanced_accuracy", balanced_accuracy, title="Balanced accuracy (%)")


# -- NLI judges -----------------------------------------------------------------------------------------------------


class NLIJudge(Protocol):
    """Decides whether a premise (cited passages) entails a hypothesis (an answer sentence)."""

    name: str

    def entails(self, premise: str, hypothesis: str) -> bool: ...


class CachedJudge:
    """Wraps a judge with a cache of its decisions. ``cache`` maps ``(premise, hypothesis)`` to a decision and may be
    pre-filled from a previous run; ``on_new(premise, hypothesis, decision)`` is called for each new decision (e.g.
    to append it to a file), so that a killed run loses none."""

    def __init__(self, judge: NLIJudge, cache: dict[tuple[str, str], bool] | None = None,
                 on_new: Callable[[str, str, bool], None] | None = None) -> None:
        self.judge = judge
        self.name = judge.name
        self.cache: dict[tuple[str, str], bool] = dict(cache or {})
        self.on_new = on_new
        self.calls = 0

    def entails(self, premise: str, hypothesis: str) -> bool:
        key = (premise, hypothesis)
        if key not in self.cache:
            decision = bool(self.judge.entails(premise, hypothesis))
            self.calls += 1
            self.cache[key] = decision
            if self.on_new is not None:
                self.on_new(premise, hypothesis, decision)
        return self.cache[key]


# -- ALCE citation quality ------------------------------------------------------------------------------------------


def format_document(doc: dict[str, str]) -> str:
    """A document as ALCE's judge reads it: ``Title: {title}\\n{text}``."""
    return f"Title: {doc.get('title', '')}\n{doc.get('text', '')}"


_CITE = re.compile(r"\s*\[\d+(?:\s*[,;]\s*\d+)*\]")


def remove_citations(sentence: str) -> str:
    """The sentence without ``[n]`` marks (what the judge checks)."""
    return _CITE.sub("", sentence).replace(" |", "").replace("]", "").strip()


@dataclass(frozen=True)
class SentenceCitationScore:
    """ALCE's verdicts on one sentence: whether its citations jointly entail it (recall), how many citations it has
    (at most ``at_most``) and how many of them are not superfluous (precision numerator)."""

    supported: bool
    n_citations: int
    n_precise: int


def score_sentence(sentence: str, cited: Sequence[int], docs: Sequence[dict[str, str]], judge: NLIJudge, *,
                   at_most: int = 3) -> SentenceCitationScore:
    """ALCE's citation recall and precision for one sentence (Gao et al., 2023, ``compute_autoais``).

    ``cited`` are 1-based document ids. No citation, or a citation naming no document, means unsupported (and counts
    no citation for precision, as in ALCE). A citation is
    precise unless the sentence is supported, has several citations, that citation alone does not entail it and the
    others without it still do.
    """
    refs = [c - 1 for c in cited]
    if not refs or any(r < 0 or r >= len(docs) for r in refs):
        return SentenceCitationScore(supported=False, n_citations=0, n_precise=0)
    refs = refs[:at_most]
    claim = remove_citations(sentence)
    joint = "\n".join(format_document(docs[r]) for r in refs)
    supported = judge.entails(joint, claim)
    if not supported:
        return SentenceCitationScore(supported=False, n_citations=len(refs), n_precise=0)
    if len(refs) == 1:
        return SentenceCitationScore(supported=True, n_citations=1, n_precise=1)
    precise = 0
    for r in refs:
        if judge.entails(format_document(docs[r]), claim):
            precise += 1
            continue
        rest = "\n".join(format_document(docs[o]) for o in refs if o != r)
        if not judge.entails(rest, claim):
            precise += 1
    return SentenceCitationScore(supported=True, n_citations=len(refs), n_precise=precise)


@dataclass(frozen=True)
class CitationQuality:
    """ALCE citation recall and precision (%), averaged over answers, and their harmonic mean."""

    recall: float | None
    precision: float | None
    f1: float | None
    n_answers: int
    n_sentences: int


def answer_recall_precision(scores: Sequence[SentenceCitationScore]) -> tuple[float, float]:
    """One answer's ALCE recall (supported sentences / sentences) and precision (precise citations / citations; 0
    with no citation), as fractions."""
    if not scores:
        return 0.0, 0.0
    rec = sum(s.supported for s in scores) / len(scores)
    n_cit = sum(s.n_citations for s in scores)
    prec = sum(s.n_precise for s in scores) / n_cit if n_cit else 0.0
    return rec, prec


def harmonic_mean(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return 0.0 if a + b == 0 else 2 * a * b / (a + b)


def citation_quality(per_answer: Sequence[Sequence[SentenceCitationScore]]) -> CitationQuality:
    """ALCE's corpus scores: recall and precision averaged over answers (in %), F1 their harmonic mean."""
    if not per_answer:
        return CitationQuality(recall=None, precision=None, f1=None, n_answers=0, n_sentences=0)
    pairs = [answer_recall_precision(a) for a in per_answer]
    rec = 100 * sum(r for r, _ in pairs) / len(pairs)
    prec = 100 * sum(p for _, p in pairs) / len(pairs)
    return CitationQuality(recall=rec, precision=prec, f1=harmonic_mean(rec, prec), n_answers=len(per_answer),
                           n_sentences=sum(len(a) for a in per_answer))


# -- citation sets ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CitationSetAgreement:
    """How two citation sets ``a`` and ``b`` over the same sentences compare. Each sentence falls in one group
    (counts): neither side cites it (``neither``), only ``a`` does (``only_a``), only ``b`` does (``only_b``), both do
    (``both``). A sentence that one side or both leave uncited is no agreement and is counted as what it is; the
    agreement figures are over the sentences both cite: % with the same set (``both_same_set``), mean Jaccard %
    (``both_jaccard``) and % of their (sentence, document) pairs that both cite or both leave out
    (``both_pair_agreement``); None when no sentence is cited by both."""

    n_sentences: int
    neither: int
    only_a: int
    only_b: int
    both: int
    both_same_set: float | None
    both_jaccard: float | None
    both_pair_agreement: float | None


def citation_set_agreement(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]],
                           n_docs: Sequence[int]) -> CitationSetAgreement:
    """Agreement of citation sets ``a[i]`` and ``b[i]`` of sentence i, whose answer had ``n_docs[i]`` documents."""
    if not (len(a) == len(b) == len(n_docs)):
        raise ValueError("a, b and n_docs must have one entry per sentence.")
    groups = {"neither": 0, "only_a": 0, "only_b": 0, "both": 0}
    exact = jac = 0.0
    same = pairs = 0
    for x, y, n in zip(a, b, n_docs):
        sx, sy = set(x), set(y)
        groups["both" if sx and sy else "only_a" if sx else "only_b" if sy else "neither"] += 1
        if sx and sy:
            exact += sx == sy
            jac += len(sx & sy) / len(sx | sy)
            same += sum(1 for d in range(1, n + 1) if (d in sx) == (d in sy))
            pairs += n
    both = groups["both"]
    return CitationSetAgreement(n_sentences=len(a), **groups, both_same_set=percent(exact, both),
                                both_jaccard=percent(jac, both), both_pair_agreement=percent(same, pairs))


# -- parity of two attributions of the same answer (another dtype, thread count or device) --------------------------


def rank_correlation(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation of two equally long score rows (ranks by sort order; ties are not averaged: for
    float rows of one attribution computed twice, where ties are rare; :func:`spearman` averages them)."""
    import torch

    ra = torch.tensor(a, dtype=torch.float64).argsort().argsort().double()
    rb = torch.tensor(b, dtype=torch.float64).argsort().argsort().double()
    return float(torch.corrcoef(torch.stack([ra, rb]))[0, 1])


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks of ``values``, tied values given their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation of two equally long score rows with :func:`average_ranks` (the tie-aware form,
    for rounded or sparse scores); None where either row is constant."""
    ra, rb = average_ranks(a), average_ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return None
    return sum((x - ma) * (y - mb) for x, y in zip(ra, rb)) / (va * vb) ** 0.5


def attribution_details(res: AttributionResult) -> dict[str, Any]:
    """What :func:`attribution_parity` compares of one attribution, as plain JSON: every answer token's CTI score,
    the selected tokens, each sentence's citations and the saliency rows (kept with ``aggregation.keep_saliency``)."""
    rows = dict(zip(res.saliency.answer_tokens, res.saliency.to_numpy().tolist())) if res.saliency else {}
    return {"cti": [t.cti for t in res.tokens], "selected": [t.index for t in res.tokens if t.context_sensitive],
            "citations": [s.mirage_citations for s in res.sentences],
            "saliency": {str(i): row for i, row in rows.items()}}


def attribution_parity(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """How closely an attribution of an answer (:func:`attribution_details`) agrees with a baseline's of the same
    answer: the largest CTI difference (beside the largest CTI), whether the selected tokens and the citations are
    the same, and the least and mean :func:`rank_correlation` of the saliency rows of the tokens both selected."""
    rows_a, rows_b = base["saliency"], other["saliency"]
    both = sorted(set(rows_a) & set(rows_b), key=int)
    corr = [rank_correlation(rows_a[i], rows_b[i]) for i in both]
    return {"max_cti_abs_diff": max(abs(x - y) for x, y in zip(base["cti"], other["cti"])),
            "max_cti": max(abs(x) for x in base["cti"]),
            "same_selected": base["selected"] == other["selected"],
            "same_citations": base["citations"] == other["citations"],
            "saliency_spearman_min": min(corr) if corr else None,
            "saliency_spearman_mean": sum(corr) / len(corr) if corr else None}
