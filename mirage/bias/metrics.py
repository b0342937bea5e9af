"""Attribution quality per query, and attribution sensitivity (CAS) and bias (CAB) over queries.

Per query (for one citation set, the union of its sentences' citations): precision and recall against the relevant
documents, F1, the number of distinct citations, the response length in words, exact-match correctness
(SQuAD/ALCE normalisation: a normalised gold answer occurs in the normalised answer), and attribution confidence
(AC: the generation probability of citations to relevant / non-relevant documents, pooled over queries).

Over queries (Abolghasemi et al., 2025): for M in {precision, recall},
``CAS = mean_q |M_mode(q) - M_vanilla(q)|`` and ``CAB = ω · mean_q (M_informed(q) - M_counterfactual(q))``, ω = +1
when the relevant documents carry the first side's label in the informed mode and -1 otherwise, so a positive CAB is
a bias toward the first label.

Each p-value tests what its number measures:
- CAB (a signed mean difference): two-sided paired t-test (``scipy.stats.ttest_rel``) over the same queries.
- CAS (a mean *absolute* difference): one-sided one-sample t-test that the mean of ``|M_mode(q) - M_vanilla(q)|``
  exceeds zero, i.e. that the labels change quality on queries beyond this sample. The paired signed test, which the
  paper's code reports beside CAS, answers another question (does the mode shift quality in one direction?); it is
  kept as ``shift_p_value``. With greedy decoding any change is caused by the labels, so CAS > 0 on one query is
  already a real change; the test says whether the mean change generalises over queries.
- Mode against mode (precision, recall): two-sided paired t-tests (the † marks of the paper's quality tables).
- Attribution confidence, relevant vs non-relevant citations: Welch's two-sided t-test (citations are pooled over
  queries, so the two groups are not paired).
CAS and CAB also carry a 95 % percentile bootstrap interval over queries (``ci``).
The random-citation baseline cites, in each mode and query, as many distinct documents as the model did, drawn
uniformly: what CAS and CAB look like when citations ignore the labels.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy import stats

from mirage.attribution.citations import CitationSource
from mirage.attribution.serialization import JSONRecord
from mirage.bias.records import BiasRecord
from mirage.scoring.metrics import mean_or_none

__all__ = ["METRICS", "Defect", "Effect", "FollowSide", "ModeSummary", "QueryMetrics", "Stat", "abs_change_p_value",
           "align", "answer_defect", "attribution_confidence", "bootstrap_ci", "cab", "cab_effect", "cas", "cas_effect",
           "citation_set_prf", "cited_docs", "contrast_effect", "exact_match", "follows", "mean_citation_set_prf",
           "mode_tests", "no_test_reason", "normalize_answer", "paired_p_value", "query_metrics", "random_baseline",
           "random_follow_probability", "random_side", "side_of", "sound_pairs", "summarize_mode", "welch_p_value"]

METRICS = ("precision", "recall")


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation (as in ALCE): lower-case, drop punctuation and articles, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, golds: Sequence[str]) -> bool | None:
    """ALCE's exact match for short answers: some normalised gold answer occurs in the normalised prediction
    (None without gold answers)."""
    golds = [g for g in golds if normalize_answer(g)]
    if not golds:
        return None
    pred = f" {normalize_answer(prediction)} "
    return any(f" {normalize_answer(g)} " in pred for g in golds)


def citation_set_prf(cited: Iterable[int], relevant: Iterable[int]) -> tuple[float, float, float]:
    """Precision, recall and F1 of a set of cited document ids against the set of relevant ones (0 when nothing is
    cited, as scikit-learn's ``zero_division=0`` in the studies' code). Not ALCE's NLI citation quality
    (:func:`mirage.scoring.metrics.citation_quality`).

    Set arithmetic rather than ``precision_recall_fscore_support`` over the documents: the same numbers (a test
    checks), but the study calls it for every query, mode and metric, and scikit-learn's validation made summarising
    the 423-answer bias study 30 times slower (0.8 s to 24 s)."""
    cited_set, relevant_set = set(cited), set(relevant)
    hits = len(cited_set & relevant_set)
    precision = hits / len(cited_set) if cited_set else 0.0
    recall = hits / len(relevant_set) if relevant_set else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def mean_citation_set_prf(answers: Iterable[Mapping[str, Any]], *, cite_first: bool = False,
                          ) -> tuple[float | None, float | None, float | None]:
    """Mean :func:`citation_set_prf` of the answers' ``cited`` documents against their ``supporting`` ones, over the
    answers that have a supporting document (None each when none has); with ``cite_first``, of citing document 1
    alone in every answer: the positional baseline on the same answers."""
    scores = [citation_set_prf([1] if cite_first else a["cited"], a["supporting"]) for a in answers
              if a.get("supporting")]
    if not scores:
        return None, None, None
    p, r, f = (sum(s[i] for s in scores) / len(scores) for i in range(3))
    return p, r, f


def cited_docs(record: BiasRecord, source: CitationSource) -> list[int]:
    """Distinct valid document ids cited anywhere in the answer, in order of first citation."""
    out: list[int] = []
    for sentence in record.citations(source):
        out.extend(d for d in sentence if 1 <= d <= record.n_docs and d not in out)
    return out


@dataclass(frozen=True)
class QueryMetrics:
    """One query's attribution quality for one citation set."""

    precision: float
    recall: float
    f1: float
    n_citations: int
    length: int
    correct: bool | None


def query_metrics(record: BiasRecord, source: CitationSource) -> QueryMetrics:
    cited = cited_docs(record, source)
    precision, recall, f1 = citation_set_prf(cited, record.relevant)
    return QueryMetrics(precision=precision, recall=recall, f1=f1, n_citations=len(cited),
                        length=len(record.answer.split()), correct=exact_match(record.answer, record.answers))


def citation_confidences(records: Iterable[BiasRecord], source: CitationSource) -> tuple[list[float], list[float]]:
    """The generation probabilities of all citations to relevant documents and to non-relevant ones, pooled over
    queries."""
    relevant_p: list[float] = []
    other_p: list[float] = []
    for record in records:
        for doc, p in record.citation_probs(source):
            (relevant_p if doc in record.relevant else other_p).append(p)
    return relevant_p, other_p


def attribution_confidence(records: Iterable[BiasRecord], source: CitationSource,
                           ) -> tuple[float | None, int, float | None, int]:
    """AC: mean probability of the citations to relevant documents and to non-relevant ones, pooled over all
    citations of all queries; with the number of citations behind each (None when there are none)."""
    relevant_p, other_p = citation_confidences(records, source)
    mean = (lambda xs: float(np.mean(xs)) if xs else None)
    return mean(relevant_p), len(relevant_p), mean(other_p), len(other_p)


def welch_p_value(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided Welch t-test p-value (unequal variances); None when a group has fewer than two values or both
    groups are constant."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) < 2 or len(y) < 2 or (np.ptp(x) == 0 and np.ptp(y) == 0):
        return None
    p = float(stats.ttest_ind(x, y, equal_var=False).pvalue)
    return None if math.isnan(p) else p


# -- answers that say nothing: empty, or the prompt's instruction repeated ---------------------------------------------

Defect = Literal["empty", "echo"]
#: An answer echoes the prompt when at least ECHO_SHARE of its words lie in runs of ECHO_NGRAM consecutive words that
#: the prompt's instruction also has (e.g. "1. The documents come from a search engine, so not all of them are …").
ECHO_NGRAM = 4
ECHO_SHARE = 0.5


def answer_defect(answer: str, instruction: str) -> Defect | None:
    """``"empty"`` when the answer (its citation marks removed) has no word, ``"echo"`` when it mostly repeats the
    instruction (:data:`ECHO_SHARE` of its words in runs of :data:`ECHO_NGRAM` words copied from ``instruction``,
    case and punctuation aside; a shorter answer is never an echo), else None. Such answers are counted in the
    quality table and left out of CAS, CAB and the grid's contrasts (:func:`sound_pairs`): a change between an echo
    and an answer measures the echo, not the labels."""
    words = re.findall(r"\w+", answer.lower())
    if not words:
        return "empty"
    n = ECHO_NGRAM
    if len(words) < n:
        return None
    said = re.findall(r"\w+", instruction.lower())
    grams = {tuple(said[i:i + n]) for i in range(len(said) - n + 1)}
    copied = [False] * len(words)
    for i in range(len(words) - n + 1):
        if tuple(words[i:i + n]) in grams:
            copied[i:i + n] = [True] * n
    return "echo" if sum(copied) >= ECHO_SHARE * len(words) else None


def sound_pairs(a: Sequence[BiasRecord], b: Sequence[BiasRecord], defects: Mapping[str, Defect | None],
                ) -> tuple[list[BiasRecord], list[BiasRecord], int]:
    """The aligned pairs ``(a[i], b[i])`` whose answers both have no defect (``defects`` by record key), and how
    many pairs were left out."""
    keep = [defects.get(x.key) is None and defects.get(y.key) is None for x, y in zip(a, b)]
    return ([x for x, k in zip(a, keep) if k], [y for y, k in zip(b, keep) if k], keep.count(False))


@dataclass
class ModeSummary:
    """Mean attribution quality of one mode over its queries (fractions in [0, 1]; length in words)."""

    n: int
    precision: float
    recall: float
    f1: float
    n_citations: float
    length: float
    correct: float | None
    no_citation: float
    ac_relevant: float | None
    ac_nonrelevant: float | None
    n_ac_relevant: int
    n_ac_nonrelevant: int
    ac_p_value: float | None = None
    #: answers with no word, and answers that echo the prompt (:func:`answer_defect`), among the ``n``
    n_empty: int = 0
    n_echo: int = 0


def summarize_mode(records: Sequence[BiasRecord], source: CitationSource,
                   defects: Mapping[str, Defect | None] | None = None) -> ModeSummary:
    """A mode's mean attribution quality over all its answers; ``defects`` (by record key) are counted."""
    rows = [query_metrics(r, source) for r in records]
    found = [(defects or {}).get(r.key) for r in records]
    judged = [m.correct for m in rows if m.correct is not None]
    ac_rel, n_rel, ac_non, n_non = attribution_confidence(records, source)
    rel_p, non_p = citation_confidences(records, source)
    mean = (lambda xs: float(np.mean(xs)) if len(xs) else 0.0)
    return ModeSummary(
        n=len(rows), precision=mean([m.precision for m in rows]), recall=mean([m.recall for m in rows]),
        f1=mean([m.f1 for m in rows]), n_citations=mean([m.n_citations for m in rows]),
        length=mean([m.length for m in rows]), correct=float(np.mean(judged)) if judged else None,
        no_citation=mean([m.n_citations == 0 for m in rows]), ac_relevant=ac_rel, ac_nonrelevant=ac_non,
        n_ac_relevant=n_rel, n_ac_nonrelevant=n_non, ac_p_value=welch_p_value(rel_p, non_p),
        n_empty=found.count("empty"), n_echo=found.count("echo"))


# -- CAS, CAB, t-tests ------------------------------------------------------------------------------------------------

def cas(mode_values: Sequence[float], vanilla_values: Sequence[float]) -> float | None:
    """Attribution sensitivity: mean absolute per-query difference between a mode and vanilla (None, undefined,
    over no query pair)."""
    a, b = _paired(mode_values, vanilla_values)
    return float(np.mean(np.abs(a - b))) if len(a) else None


def cab(informed_values: Sequence[float], counterfactual_values: Sequence[float], omega: int) -> float | None:
    """Attribution bias: ω times the mean per-query difference informed - counterfactual (None, undefined, over no
    query pair)."""
    if omega not in (1, -1):
        raise ValueError("omega must be +1 or -1.")
    a, b = _paired(informed_values, counterfactual_values)
    return float(omega * np.mean(a - b)) if len(a) else None


def paired_p_value(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided paired t-test p-value (``scipy.stats.ttest_rel``); None when undefined (fewer than two queries,
    or all differences equal, e.g. identical citations in both modes)."""
    if no_test_reason(a, b) is not None:
        return None
    x, y = _paired(a, b)
    p = float(stats.ttest_rel(x, y).pvalue)
    return None if math.isnan(p) else p


def abs_change_p_value(a: Sequence[float], b: Sequence[float]) -> float | None:
    """What CAS measures, tested: one-sided one-sample t-test that the mean of ``|a - b|`` over queries exceeds 0.
    None when the test is undefined (:func:`no_test_reason`: fewer than two queries, or zero variance, e.g. every
    query changed by the same amount: a t over zero variance is infinite, and its p = 0 would claim a certainty
    that two queries cannot give)."""
    if no_test_reason(a, b, absolute=True) is not None:
        return None
    x, y = _paired(a, b)
    p = float(stats.ttest_1samp(np.abs(x - y), 0.0, alternative="greater").pvalue)
    return None if math.isnan(p) else p


def no_test_reason(a: Sequence[float], b: Sequence[float], *, absolute: bool = False) -> str | None:
    """Why the t-test over the per-query differences ``a - b`` (their absolute values with ``absolute``, as CAS
    tests them) gives no p-value, or None when it gives one: fewer than two query pairs, or zero variance (every
    pair differs by the same amount, no change at all included)."""
    x, y = _paired(a, b)
    if len(x) < 2:
        return f"{len(x)} query pair(s); a t-test needs at least 2"
    d = np.abs(x - y) if absolute else x - y
    if np.allclose(d, d[0]):
        same = "no query changed" if not d.any() else "every query pair differs by the same amount"
        return f"zero variance over {len(x)} query pairs ({same})"
    return None


def bootstrap_ci(values: Sequence[float], *, draws: int = 2000, seed: int = 0,
                 level: float = 0.95) -> list[float] | None:
    """Percentile bootstrap interval of the mean of per-query ``values`` (None for fewer than two queries)."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return None
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(draws, len(v)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return [float(lo), float(hi)]


def _paired(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    if len(a) != len(b):
        raise ValueError(f"paired values differ in length: {len(a)} vs {len(b)}.")
    return np.asarray(a, dtype=float), np.asarray(b, dtype=float)


@dataclass
class Stat:
    """A CAS or CAB value (fraction; None over no query pair: undefined, not zero), the p-value of the test of what
    it measures (module docstring), the random-citation baseline's value, the 95 % bootstrap interval over queries,
    for CAS the paired signed test's p-value (``shift_p_value``: does the mode move quality in one direction?), and
    why there is no p-value when the test is undefined (``p_note``)."""

    value: float | None
    p_value: float | None
    baseline: float | None = None
    ci: list[float] | None = None
    shift_p_value: float | None = None
    #: why ``p_value`` is None (:func:`no_test_reason`)
    p_note: str | None = None


@dataclass
class Effect:
    """CAS or CAB for precision and recall over ``n`` paired queries; ``n_excluded``: the query pairs left out
    because an answer of the pair is empty or echoes the prompt (:func:`answer_defect`)."""

    precision: Stat
    recall: Stat
    n: int
    n_excluded: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Effect:
        """The effect from its JSON form (results and sweep files; ``n_excluded`` is 0 in files written before it;
        files written before an effect over no query pair was undefined hold 0 for its value and baseline: None)."""
        stats = {m: {**data[m], **({"value": None, "baseline": None} if data["n"] == 0 else {})} for m in METRICS}
        return cls(precision=Stat(**stats["precision"]), recall=Stat(**stats["recall"]), n=data["n"],
                   n_excluded=data.get("n_excluded", 0))

    def stat(self, metric: str) -> Stat:
        return self.precision if metric == "precision" else self.recall


def align(by_mode: Mapping[str, Sequence[BiasRecord]], modes: Sequence[str]) -> list[list[BiasRecord]]:
    """Per mode in ``modes``, the records of the items present in all of them, in the same item order."""
    index = [{r.item_id: r for r in by_mode.get(m, [])} for m in modes]
    common = [i for i in index[0] if all(i in idx for idx in index[1:])] if index else []
    return [[idx[i] for i in common] for idx in index]


def _values(records: Sequence[BiasRecord], source: CitationSource, metric: str) -> list[float]:
    return [getattr(query_metrics(r, source), metric) for r in records]


def cas_effect(mode_records: Sequence[BiasRecord], vanilla_records: Sequence[BiasRecord], source: CitationSource,
               ) -> Effect:
    """CAS of a mode against vanilla (records aligned by item, see :func:`align`)."""
    out = {}
    for metric in METRICS:
        a, b = _values(mode_records, source, metric), _values(vanilla_records, source, metric)
        diffs = np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
        out[metric] = Stat(value=cas(a, b), p_value=abs_change_p_value(a, b), ci=bootstrap_ci(diffs),
                           shift_p_value=paired_p_value(a, b), p_note=no_test_reason(a, b, absolute=True))
    return Effect(precision=out["precision"], recall=out["recall"], n=len(mode_records))


def cab_effect(informed: Sequence[BiasRecord], counterfactual: Sequence[BiasRecord], source: CitationSource, *,
               omega: int) -> Effect:
    """CAB between the informed and counterfactual modes (records aligned by item)."""
    return contrast_effect(informed, counterfactual, source, sign=omega)


def contrast_effect(a_records: Sequence[BiasRecord], b_records: Sequence[BiasRecord], source: CitationSource, *,
                    sign: int = 1) -> Effect:
    """``sign`` · mean (M_a − M_b) over aligned queries, for precision and recall, with the paired t-test and a
    bootstrap interval: CAB is the contrast informed − counterfactual with sign ω; the mixed grid's contrasts use
    the same."""
    if sign not in (1, -1):
        raise ValueError("sign must be +1 or -1.")
    out = {}
    for metric in METRICS:
        a, b = _values(a_records, source, metric), _values(b_records, source, metric)
        diffs = sign * (np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
        out[metric] = Stat(value=cab(a, b, sign), p_value=paired_p_value(a, b), ci=bootstrap_ci(diffs),
                           p_note=no_test_reason(a, b))
    return Effect(precision=out["precision"], recall=out["recall"], n=len(a_records))


def mode_tests(aligned: Mapping[str, Sequence[BiasRecord]], source: CitationSource,
               ) -> dict[str, dict[str, float | None]]:
    """Paired t-test p-values of precision and recall between every two modes (records aligned by item), keyed
    ``"A vs B"`` in the modes' order: the † marks of the paper's quality tables."""
    modes = list(aligned)
    values = {m: {metric: _values(aligned[m], source, metric) for metric in METRICS} for m in modes}
    out: dict[str, dict[str, float | None]] = {}
    for i, a in enumerate(modes):
        for b in modes[i + 1:]:
            out[f"{a} vs {b}"] = {metric: paired_p_value(values[a][metric], values[b][metric]) for metric in METRICS}
    return out


# -- random-citation baseline -----------------------------------------------------------------------------------------

def random_citation_draws(records: Sequence[BiasRecord], source: CitationSource, *, draws: int,
                          rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Precision and recall ``[draws, n_queries]`` of a citer that cites, per query, as many distinct documents as
    the model did, uniformly at random (the hits follow a hypergeometric law)."""
    precision = np.zeros((draws, len(records)))
    recall = np.zeros((draws, len(records)))
    for q, record in enumerate(records):
        n_cited = len(cited_docs(record, source))
        n_rel = len(set(record.relevant))
        if n_cited == 0 or n_rel == 0:
            continue
        hits = rng.hypergeometric(n_rel, record.n_docs - n_rel, n_cited, size=draws)
        precision[:, q] = hits / n_cited
        recall[:, q] = hits / n_rel
    return {"precision": precision, "recall": recall}


def random_baseline(aligned: Mapping[str, Sequence[BiasRecord]], source: CitationSource, *, omega: int, draws: int,
                    seed: int, defects: Mapping[str, Defect | None] | None = None,
                    ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float | None]],
                               dict[str, float | None]]:
    """The random citer's mean precision/recall per mode (over every query), its CAS per non-vanilla mode and its
    CAB (over the query pairs CAS and CAB keep: :func:`sound_pairs` with ``defects``; None over none), averaged over
    ``draws`` draws. ``aligned[mode]`` are records of the same items in the same order."""
    rng = np.random.default_rng(seed)
    sims = {mode: random_citation_draws(recs, source, draws=draws, rng=rng) for mode, recs in aligned.items()}
    quality = {mode: {m: float(sim[m].mean()) if sim[m].size else 0.0 for m in METRICS} for mode, sim in sims.items()}
    ok = {mode: np.array([(defects or {}).get(r.key) is None for r in recs], dtype=bool)
          for mode, recs in aligned.items()}

    def mean(values: np.ndarray, keep: np.ndarray) -> float | None:
        if keep.all():  # every pair (the same sum, to the last bit, as before answers were checked)
            return float(values.mean()) if values.size else None
        return float(values[:, keep].mean()) if keep.any() else None

    cas_base: dict[str, dict[str, float | None]] = {}
    if "vanilla" in sims:
        for mode, sim in sims.items():
            if mode != "vanilla":
                keep = ok[mode] & ok["vanilla"]
                cas_base[mode] = {m: mean(np.abs(sim[m] - sims["vanilla"][m]), keep) for m in METRICS}
    cab_base: dict[str, float | None] = {}
    if "informed" in sims and "counterfactual" in sims:
        inf, cf = sims["informed"], sims["counterfactual"]
        keep = ok["informed"] & ok["counterfactual"]
        cab_base = {m: None if (v := mean(inf[m] - cf[m], keep)) is None else omega * v for m in METRICS}
    return quality, cas_base, cab_base


# -- does a citation follow the supporting document? (the permutation test's measure) ------------------------------


def follows(cited: Iterable[int], position: int) -> bool:
    """Whether a citation set follows the supporting passage at ``position`` (1-based): it cites ``position`` and
    at most one other document."""
    cited_set = set(cited)
    return position in cited_set and len(cited_set) <= 2


def random_follow_probability(n_cited: int, k: int) -> float:
    """The chance that ``n_cited`` documents drawn uniformly from ``k`` follow a given supporting passage: it is
    among them with probability ``n_cited / k``, and a set of more than two never follows."""
    if k < 1 or not 0 <= n_cited <= k:
        raise ValueError(f"need 0 <= n_cited <= k and k >= 1, got n_cited={n_cited}, k={k}")
    return n_cited / k if 1 <= n_cited <= 2 else 0.0


@dataclass
class FollowSide(JSONRecord):
    """One citer's row of the permutation test: ``follow_rate`` over all presentations and ``per_position``
    (position 1…k), ``first_when_not_supporting`` (the share of presentations whose supporting passage is not
    first in which document 1 is cited), the mean number of documents cited, and precision/recall/F1 of the cited
    set against the supporting passage (means over presentations)."""

    follow_rate: float | None
    per_position: list[float | None]
    first_when_not_supporting: float | None
    mean_cited: float | None
    precision: float | None
    recall: float | None
    f1: float | None


def side_of(citations: Sequence[set[int]], positions: Sequence[int], k: int) -> FollowSide:
    """The :class:`FollowSide` of a citer whose cited sets are ``citations`` on presentations whose supporting
    passage sits at ``positions``."""
    hits = [follows(c, p) for c, p in zip(citations, positions)]
    prf = [citation_set_prf(c, [p]) for c, p in zip(citations, positions)]
    return FollowSide(
        follow_rate=mean_or_none(hits),
        per_position=[mean_or_none([h for h, p in zip(hits, positions) if p == pos])
                      for pos in range(1, k + 1)],
        first_when_not_supporting=mean_or_none([1 in c for c, p in zip(citations, positions) if p != 1]),
        mean_cited=mean_or_none([float(len(c)) for c in citations]),
        precision=mean_or_none([x[0] for x in prf]), recall=mean_or_none([x[1] for x in prf]),
        f1=mean_or_none([x[2] for x in prf]))


def random_side(n_cited: Sequence[int], positions: Sequence[int], k: int) -> FollowSide:
    """The expected :class:`FollowSide` of a random citer that cites, for each presentation, as many documents as
    the model did (``n_cited``), drawn uniformly from the ``k`` (exact expectations, no sampling)."""
    probs = [random_follow_probability(min(c, k), k) for c in n_cited]
    # E[precision] = 1/k for a non-empty set (each cited document is the supporting one with chance 1/k);
    # E[recall] = c/k; F1 = 2/(c+1) when the supporting passage is among the c, else 0: E[F1] = 2c/(k(c+1)).
    prec = [1 / k if c else 0.0 for c in n_cited]
    rec = [min(c, k) / k for c in n_cited]
    f1 = [2 * min(c, k) / (k * (min(c, k) + 1)) if c else 0.0 for c in n_cited]
    return FollowSide(
        follow_rate=mean_or_none(probs),
        per_position=[mean_or_none([q for q, p in zip(probs, positions) if p == pos])
                      for pos in range(1, k + 1)],
        first_when_not_supporting=mean_or_none([min(c, k) / k for c, p in zip(n_cited, positions) if p != 1]),
        mean_cited=mean_or_none([float(c) for c in n_cited]),
        precision=mean_or_none(prec), recall=mean_or_none(rec), f1=mean_or_none(f1))
