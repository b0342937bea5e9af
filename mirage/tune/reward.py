"""The reward of a sampled answer for the citation-tuning reward stage, with mirage as the judge.

Six terms, each in [0, 1], combined by the weights of :class:`~mirage.tune.config.RewardSettings`:

- ``rage``: RAGE's (citation precision + citation recall) / 2 of the answer's cited documents (the union over its
  sentences) against the documents human annotators marked as supporting it (:func:`rage_score`; precision and
  recall as :func:`mirage.bias.metrics.citation_set_prf` computes them). None where the item has no labels.
- ``agreement``: how far the answer's self-citations agree with mirage's citations of the same answer, computed on
  the judge model's internals (:meth:`mirage.pipeline.Mirage.attribute_item` on the answer): the mean over its
  sentences of the Jaccard index of the two sets, 1 for a sentence both leave uncited (:func:`agreement_score`).
- ``faithfulness``: do the self-cited documents matter to the model? Per sentence, the drop in its log-probability
  when they are removed from the prompt (:func:`mirage.scoring.faithfulness.faithfulness`), per token, mapped to
  ``1 - exp(-max(0, drop) / scale)``; an uncited sentence scores 0 (:func:`faithfulness_score`).
- ``format``: the share of sentences that cite at least one document, times the share of cited ids that name an
  existing document (:func:`format_score`).
- ``permutation``: do the citations move with the documents? Among the answers scored together (trl scores a whole
  generation batch in one call), those to the same question and documents presented in another order: the mean
  Jaccard index of the documents this answer cites and those each of them cites, documents compared by content,
  not number (:func:`permutation_scores`). A positional citer (``[1]`` whatever stands first) scores low, an answer
  citing the same passage wherever it stands scores 1. None where no other order of the question was scored in the
  same call (:meth:`CitationJudge.score` alone never has one).
- ``selfcite``: SelfCite's self-supervised citation reward (Chuang et al., 2025) of the answer's own citations:
  per sentence, its mean token log-probability with only the documents it cites kept minus with them removed, from
  the judge model (:func:`mirage.attribution.methods.selfcite.citation_reward_rows`: two passes per distinct cited
  set), mapped to ``1 - exp(-max(0, reward) / scale)``; an uncited sentence scores 0; the mean over sentences
  (:func:`selfcite_score`). Needs no labels. Weighted 0 by default.

The reward is the weighted mean of the terms that apply (:func:`combine`): a term that is None (no labels) or
weighted 0 is left out and the others' weights renormalised. An answer that is empty once its marks are removed
scores 0 on every term.

    judge = CitationJudge(Mirage.from_pretrained(), RewardSettings())
    judge.score({"question": q, "docs": docs, "supporting": [2]}, "Helsinki [2].").total
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mirage.attribution.citations import ParsedAnswer, parse_answer
from mirage.attribution.serialization import JSONRecord
from mirage.bias.metrics import citation_set_prf
from mirage.config import MirageConfig
from mirage.data.inputs import InputError
from mirage.scoring.faithfulness import faithfulness
from mirage.tune.config import RewardSettings

if TYPE_CHECKING:
    from mirage.pipeline import Mirage

__all__ = ["CitationJudge", "RewardTerms", "agreement_score", "combine", "faithfulness_score", "format_score",
           "permutation_scores", "presentation_of", "question_key", "rage_score", "selfcite_score"]

#: The reward's terms, in the order of the config's weights.
TERMS = RewardSettings.TERMS

#: A presentation of a question: its text and its documents' contents in the order shown.
Presentation = tuple[str, tuple[str, ...]]


def presentation_of(question: str, docs: Sequence[Mapping[str, str]]) -> Presentation:
    """The question and its documents' contents (title and text) in the order they are shown."""
    return question, tuple(f"{d.get('title', '')}\n{d.get('text', '')}" for d in docs)


def question_key(presentation: Presentation) -> tuple[str, frozenset[str]]:
    """What the presentations of one question share, whatever the order of its documents."""
    question, docs = presentation
    return question, frozenset(docs)


def permutation_scores(presentations: Sequence[Presentation], cited: Sequence[Iterable[int]]) -> list[float | None]:
    """Per answer ``i``: the mean over the answers ``j`` to the same question and the same documents in another
    order of the Jaccard index of the documents they cite, compared by content (``cited[i]``: 1-based numbers into
    ``presentations[i]``'s documents; 1 when both cite nothing); None where no such ``j`` exists. Numbers beyond
    the documents are ignored (the format term counts them)."""
    def cited_docs(i: int) -> frozenset[str]:
        docs = presentations[i][1]
        return frozenset(docs[n - 1] for n in cited[i] if 1 <= n <= len(docs))

    sets = [cited_docs(i) for i in range(len(presentations))]
    groups: dict[tuple[str, frozenset[str]], list[int]] = {}
    for i, presentation in enumerate(presentations):
        groups.setdefault(question_key(presentation), []).append(i)
    out: list[float | None] = [None] * len(presentations)
    for members in groups.values():
        for i in members:
            others = [j for j in members if presentations[j][1] != presentations[i][1]]
            if others:
                out[i] = sum(1.0 if not sets[i] | sets[j] else len(sets[i] & sets[j]) / len(sets[i] | sets[j])
                             for j in others) / len(others)
    return out


def rage_score(cited: Iterable[int], supporting: Iterable[int] | None) -> float | None:
    """RAGE's citation reward, (precision + recall) / 2 of the ``cited`` documents against the ``supporting`` ones;
    None when there are no labels (``supporting`` None); 1.0 when nothing supports the answer and nothing is cited."""
    if supporting is None:
        return None
    cited_set, gold = set(cited), set(supporting)
    if not cited_set and not gold:
        return 1.0
    precision, recall, _f1 = citation_set_prf(cited_set, gold)
    return (precision + recall) / 2


def agreement_score(self_citations: Sequence[Iterable[int]], mirage_citations: Sequence[Iterable[int]]) -> float:
    """Mean over sentences of the Jaccard index of the self-cited and the mirage-cited documents (1 for a sentence
    neither cites); 0 for an answer without sentences."""
    if len(self_citations) != len(mirage_citations):
        raise ValueError(f"{len(self_citations)} sentences of self-citations but {len(mirage_citations)} of mirage's")
    if not self_citations:
        return 0.0
    total = 0.0
    for own, theirs in zip(self_citations, mirage_citations):
        a, b = set(own), set(theirs)
        total += 1.0 if not a | b else len(a & b) / len(a | b)
    return total / len(self_citations)


def faithfulness_score(drops: Sequence[float | None], n_tokens: Sequence[int], *, scale: float = 1.0) -> float:
    """Mean over sentences of ``1 - exp(-max(0, drop / n_tokens) / scale)``: ``drops[i]`` is sentence i's
    log-probability drop (nats) when its self-cited documents are removed, None when it cites nothing (it scores 0).
    0 for an answer without sentences."""
    if len(drops) != len(n_tokens):
        raise ValueError(f"{len(drops)} drops but {len(n_tokens)} token counts")
    if not drops:
        return 0.0
    scores = [0.0 if d is None else 1.0 - math.exp(-max(0.0, d / max(1, n)) / scale) for d, n in zip(drops, n_tokens)]
    return sum(scores) / len(scores)


def selfcite_score(mirage: Mirage, item: Mapping[str, Any], parsed: ParsedAnswer, *,
                   config: MirageConfig | None = None, scale: float = 1.0) -> float:
    """The ``selfcite`` term of ``parsed`` (an answer to ``item``: ``question``, ``docs``): per sentence, SelfCite's
    reward of the documents it cites (the mean over its tokens of ``log p(y | only those documents) - log p(y |
    without them)``, nats; every document cited: against the contextless prompt), mapped to ``1 - exp(-max(0, r) /
    scale)``; 0 for a sentence that cites nothing or has no token; the mean over the sentences."""
    from mirage.attribution.aggregation import tokens_by_sentence
    from mirage.attribution.methods import document_inputs
    from mirage.attribution.methods.selfcite import citation_reward_rows, token_means
    from mirage.attribution.tokenization import tokenize_answer

    if not parsed.sentences:
        return 0.0
    answer = tokenize_answer(mirage.lm.tokenizer, parsed.text)
    sets = sorted({tuple(sorted(ids)) for ids in parsed.citations if ids})
    if not sets or not answer.ids:
        return 0.0
    inputs = document_inputs(mirage, {"question": item["question"], "docs": list(item["docs"])}, answer.ids,
                             config=config)
    rows = citation_reward_rows(inputs, sets)  # [n_sets, n_answer]
    members = tokens_by_sentence(parsed.text, parsed.sentences, [a for a, _b in answer.offsets],
                                 range(len(answer.ids)))
    values = []
    for ids, tokens in zip(parsed.citations, members):
        if not ids or not tokens:
            values.append(0.0)
            continue
        k = sets.index(tuple(sorted(ids)))
        reward = token_means(rows[k : k + 1], tokens)[0]
        values.append(1.0 - math.exp(-max(0.0, reward) / scale))
    return sum(values) / len(values)


def format_score(parsed: ParsedAnswer) -> float:
    """The share of the answer's sentences citing at least one existing document, times the share of its cited ids
    that name an existing document (1 when it cites none); 0 for an answer without sentences."""
    if not parsed.sentences:
        return 0.0
    cited = sum(bool(ids) for ids in parsed.citations) / len(parsed.sentences)
    valid = sum(len(ids) for ids in parsed.citations)
    invalid = sum(len(ids) for ids in parsed.invalid)
    return cited * (valid / (valid + invalid) if valid + invalid else 1.0)


def combine(terms: Mapping[str, float | None], weights: Mapping[str, float]) -> float:
    """The weighted mean of the terms that are not None and weigh more than 0 (0.0 when none does)."""
    used = [(weights.get(name, 0.0), value) for name, value in terms.items()
            if value is not None and weights.get(name, 0.0) > 0]
    total = sum(w for w, _ in used)
    return sum(w * v for w, v in used) / total if total else 0.0


@dataclass
class RewardTerms(JSONRecord):
    """The reward of one answer: each term (None where it does not apply or was not computed), their weighted mean
    ``total``, the answer's self-citations and mirage's (per sentence; None when mirage did not run), and the
    judge's ``error`` when mirage could not attribute the answer (its terms are then 0)."""

    rage: float | None
    agreement: float | None
    faithfulness: float | None
    format: float
    total: float
    self_citations: list[list[int]] = field(default_factory=list)
    mirage_citations: list[list[int]] | None = None
    error: str | None = None
    permutation: float | None = None
    selfcite: float | None = None

    def terms(self) -> dict[str, float | None]:
        """The terms by name (:data:`TERMS`)."""
        return {name: getattr(self, name) for name in TERMS}


class CitationJudge:
    """Scores sampled answers with :func:`rage_score`, :func:`agreement_score`, :func:`faithfulness_score` and
    :func:`format_score`; mirage's attribution and the faithfulness check run on ``mirage``'s model (the judge:
    for the reward stage, a frozen copy of the starting model) with ``config`` (default ``mirage.config``), only
    for the terms weighted above 0. Called as trl's reward function (:meth:`__call__`)."""

    def __init__(self, mirage: Mirage, settings: RewardSettings | None = None, *,
                 config: MirageConfig | None = None) -> None:
        self.mirage = mirage
        self.settings = settings or RewardSettings()
        self.config = config or mirage.config
        self.__name__ = "mirage_citation_reward"  # trl names a reward function's logged column by it

    def score(self, item: Mapping[str, Any], answer: str) -> RewardTerms:
        """The reward of ``answer`` (raw, with its ``[n]`` marks) to ``item`` (``question``, ``docs``, and
        ``supporting``: the 1-based documents labelled as supporting, or None)."""
        import torch

        weights = self.settings.weights
        docs = list(item["docs"])
        parsed = parse_answer(answer, len(docs))
        self_citations = [list(c) for c in parsed.citations]
        cited = [d for ids in parsed.citations for d in ids]
        fmt = format_score(parsed)
        terms: dict[str, float | None] = {"rage": rage_score(cited, item.get("supporting")),
                                          "agreement": None, "faithfulness": None, "format": fmt}
        mirage_citations, error = None, None
        if not parsed.text.strip():
            terms.update(agreement=0.0, faithfulness=0.0, **({"selfcite": 0.0} if weights["selfcite"] > 0 else {}))
        elif weights["agreement"] > 0 or weights["faithfulness"] > 0:
            raw = {"question": item["question"], "docs": docs, "output": answer}
            try:
                # mirage's CCI needs gradients: allowed here even when the caller (a trainer) runs without them
                with torch.inference_mode(False), torch.enable_grad():
                    res = self.mirage.attribute_item(raw, config=self.config)
                    check = faithfulness(self.mirage, res) if weights["faithfulness"] > 0 else None
            except InputError as err:
                error = str(err)
                terms.update(agreement=0.0, faithfulness=0.0)
            else:
                mirage_citations = [list(s.mirage_citations) for s in res.sentences]
                if weights["agreement"] > 0:
                    terms["agreement"] = agreement_score([s.self_citations for s in res.sentences], mirage_citations)
                if check is not None:
                    own = [s.sets["selfcitation"] for s in check.sentences]
                    terms["faithfulness"] = faithfulness_score(
                        [c.drop for c in own], [s.n_tokens for s in check.sentences],
                        scale=self.settings.faithfulness_scale)
        if parsed.text.strip() and weights["selfcite"] > 0:
            try:
                terms["selfcite"] = 0.0 if error else selfcite_score(self.mirage, item, parsed, config=self.config,
                                                                     scale=self.settings.selfcite_scale)
            except InputError as err:  # the item the judge cannot prepare: as for mirage's terms
                error, terms["selfcite"] = str(err), 0.0
        return RewardTerms(rage=terms["rage"], agreement=terms["agreement"], faithfulness=terms["faithfulness"],
                           format=fmt, selfcite=terms.get("selfcite"), total=combine(terms, weights),
                           self_citations=self_citations,
                           mirage_citations=mirage_citations, error=error)

    def score_batch(self, items: Sequence[Mapping[str, Any]], answers: Sequence[str]) -> list[RewardTerms]:
        """:meth:`score` of each answer, with the ``permutation`` term computed across the batch
        (:func:`permutation_scores`; weighted 0, it is not computed) and each total recombined with it."""
        scored = [self.score(item, answer) for item, answer in zip(items, answers)]
        if self.settings.weights["permutation"] > 0:
            presentations = [presentation_of(item["question"], item["docs"]) for item in items]
            cited = [[d for ids in terms.self_citations for d in ids] for terms in scored]
            values = permutation_scores(presentations, cited)
            for terms, value, item, answer in zip(scored, values, items, answers):
                empty = not parse_answer(answer, len(item["docs"])).text.strip()
                terms.permutation = 0.0 if empty else value  # an empty answer scores 0 on every term
                terms.total = combine(terms.terms(), self.settings.weights)
        return scored

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], *, question: Sequence[str],
                 docs: Sequence[list[dict[str, str]]], supporting: Sequence[list[int] | None] | None = None,
                 **_: Any) -> list[float]:
        """trl's reward-function interface: one reward per completion (:meth:`score_batch`); the dataset's
        ``question``, ``docs`` and ``supporting`` columns come as keyword lists, one entry per completion."""
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        items = [{"question": question[i], "docs": docs[i],
                  "supporting": supporting[i] if supporting is not None else None} for i in range(len(texts))]
        return [terms.total for terms in self.score_batch(items, texts)]
