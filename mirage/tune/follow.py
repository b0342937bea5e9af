"""Does a model's self-citation follow the content? The permutation test.

A model that learned "cite ``[1]``" from positional training data scores like a citer on XOR-AttriQA, where the
first passage supports the answer in most rows. The permutation test tells the two apart: each item with exactly
one supporting passage is presented ``k`` times, the supporting passage moved to position 1, 2, …, ``k`` and the
other ``k − 1`` passages kept in one fixed (seeded) shuffled order around it. An answer *follows* when its
self-citations include the supporting passage's new number and at most one other document.

    presentations = permutation_presentations(examples, k=5)
    report = evaluate_follow(mirage, examples, k=5)
    report.follow_rate, report.first_when_not_supporting

The report sets beside the model, on the very same presentations:

- ``cite_first``: the positional citer that cites ``[1]`` alone (follows only at position 1: ``1/k`` overall);
- ``random``: a citer that cites as many documents as the model did in each answer, chosen uniformly (its follow
  rate is computed exactly, not sampled: a set of ``c`` of ``k`` documents holds a given one with probability
  ``c/k``, and follows only when ``c <= 2``);
- ``mirage`` (with a judge): mirage's citations of the model's own answers, read the same way.

Beside the follow rates: self-citation precision/recall/F1 against the (moved) supporting passage and cite-[1]'s
on the same presentations, and the quality of the answers (exact match of the reference answer, answers and
sentences cited) from :func:`mirage.tune.evaluate.evaluate_citations`, which generates and stores the answers.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.attribution.citations import parse_answer
from mirage.attribution.serialization import JSONRecord
from mirage.bias.metrics import citation_set_prf
from mirage.runs.store import content_key
from mirage.scoring.metrics import mean_or_none
from mirage.tune.data import TrainingExample, cite_sentences, filler_documents

if TYPE_CHECKING:
    from mirage.config import MirageConfig
    from mirage.pipeline import Mirage
    from mirage.runs.progress import Progress
    from mirage.tune.evaluate import CitationEval


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


def single_supporting(examples: Iterable[TrainingExample]) -> list[TrainingExample]:
    """The examples the test can use: exactly one supporting passage."""
    return [ex for ex in examples if ex.supporting is not None and len(ex.supporting) == 1]


def permutation_presentations(examples: Sequence[TrainingExample], *, k: int = 5, seed: int = 0,
                              pool: Sequence[TrainingExample] | None = None) -> list[TrainingExample]:
    """Each usable example (:func:`single_supporting`) presented ``k`` times, its supporting passage at position
    1…k and ``k − 1`` other passages around it in one shuffled order, fixed per example (seeded by ``seed`` and the
    example's content). The other passages are the example's own; where it has fewer than ``k − 1``, passages of
    ``pool`` (default: the examples given; they answer other questions) fill the rest, as the bias study fills its
    distractors; ``meta["follow"]["fillers"]`` counts them.

    Each presentation's answer is the example's reference answer cited with the moved passage on every sentence,
    its ``supporting`` is ``[position]`` and ``meta["follow"]`` records ``{"item", "position", "k", "fillers"}``."""
    if k < 2:
        raise ValueError(f"k must be at least 2 (the supporting passage and one other), got {k}")
    usable = single_supporting(examples)
    out: list[TrainingExample] = []
    for ex in usable:
        assert ex.supporting is not None
        support = ex.supporting[0]
        rng = random.Random(f"{seed}:{content_key([ex.question, ex.docs])}")
        others = [doc for i, doc in enumerate(ex.docs, start=1) if i != support]
        rng.shuffle(others)
        others = others[: k - 1]
        n_fillers = k - 1 - len(others)
        if n_fillers:
            candidates = filler_documents(ex, examples if pool is None else pool)
            if len(candidates) < n_fillers:
                raise ValueError(f"{ex.id}: {len(ex.docs)} documents and {len(candidates)} of other items to fill "
                                 f"{k} positions; give more items or a smaller k")
            fillers = rng.sample(candidates, n_fillers)
            others = others + fillers
            rng.shuffle(others)
        reference = parse_answer(ex.output, len(ex.docs)).text
        for position in range(1, k + 1):
            docs = others[: position - 1] + [ex.docs[support - 1]] + others[position - 1:]
            output = cite_sentences(reference, [position]) if reference.strip() else reference
            out.append(TrainingExample(
                id=f"{ex.id}-pos{position}", source=ex.source, question=ex.question, docs=docs, output=output,
                citations=[list(c) for c in parse_answer(output, k).citations], supporting=[position],
                file=ex.file, line=ex.line, lang=ex.lang,
                meta={**ex.meta, "follow": {"item": ex.id, "position": position, "k": k, "fillers": n_fillers}}))
    return out


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


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}"


def follow_table(rows: Sequence[tuple[str, FollowSide]], k: int) -> str:
    """Citers' :class:`FollowSide` rows as a markdown table (rates in %), positions 1…``k``."""
    head = ["citer", "follows", *[f"pos {p}" for p in range(1, k + 1)], "[1] when not supporting", "docs cited",
            "P", "R", "F1"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, side in rows:
        cited = "—" if side.mean_cited is None else f"{side.mean_cited:.2f}"
        cells = [name, _pct(side.follow_rate), *[_pct(v) for v in side.per_position],
                 _pct(side.first_when_not_supporting), cited, _pct(side.precision), _pct(side.recall), _pct(side.f1)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@dataclass
class FollowReport(JSONRecord):
    """The permutation test of one model (see the module's docstring): ``k`` positions, ``n_items`` items with
    exactly one supporting passage, ``n_presentations = k * n_items`` answers; the model's self-citations
    (``self_citation``), the baselines ``cite_first`` and ``random`` on the same presentations, and mirage's
    citations of the same answers (``mirage``, with a judge); ``quality``: answers and sentences cited and the
    exact match of the reference answer, from the answers' :class:`~mirage.tune.evaluate.CitationEval`."""

    model: str
    k: int
    seed: int
    n_items: int
    n_presentations: int
    self_citation: FollowSide
    cite_first: FollowSide
    random: FollowSide
    mirage: FollowSide | None = None
    mirage_rule: str | None = None
    quality: dict[str, Any] = field(default_factory=dict)
    command: str | None = None
    versions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FollowReport:
        """The report from its JSON form."""
        sides = {name: FollowSide.from_dict(data[name]) if data.get(name) is not None else None
                 for name in ("self_citation", "cite_first", "random", "mirage")}
        return cls(**{**cls.known_fields(data), **sides})

    def rows(self) -> list[tuple[str, FollowSide]]:
        """The citers of the table, model first."""
        rows = [("self-citation", self.self_citation), ("cite [1]", self.cite_first),
                ("random (same count)", self.random)]
        if self.mirage is not None:
            rows.append((f"mirage ({self.mirage_rule})", self.mirage))
        return rows

    def to_markdown(self) -> str:
        """The permutation test as a markdown table (rates in %)."""
        lines = [follow_table(self.rows(), self.k)]
        q = self.quality
        lines.append("")
        lines.append(f"{self.model}: {self.n_items} items x {self.k} positions = {self.n_presentations} answers; "
                     f"answers cited {_pct(q.get('answers_cited'))} %, sentences cited {_pct(q.get('sentences_cited'))} "
                     f"%, exact match {_pct(q.get('exact_match'))} %.")
        return "\n".join(lines)


def follow_report(evaluation: CitationEval, presentations: Sequence[TrainingExample], *, k: int, seed: int,
                  mirage_rule: str | None = None) -> FollowReport:
    """The :class:`FollowReport` of answers already generated for ``presentations`` (``evaluation.answers[i]``
    answers ``presentations[i]``)."""
    if len(evaluation.answers) != len(presentations):
        raise ValueError(f"{len(evaluation.answers)} answers for {len(presentations)} presentations")
    positions = [int(p.meta["follow"]["position"]) for p in presentations]
    own = [set(a["cited"]) for a in evaluation.answers]
    mirage_side = None
    judged = [(set(a["mirage_cited"]), pos) for a, pos in zip(evaluation.answers, positions) if "mirage_cited" in a]
    if mirage_rule is not None and judged:
        mirage_side = side_of([c for c, _ in judged], [p for _, p in judged], k)
    quality = {"answers_cited": evaluation.answers_cited, "sentences_cited": evaluation.sentences_cited,
               "exact_match": evaluation.exact_match, "invalid_citations": evaluation.invalid_citations,
               "seconds_per_answer": evaluation.seconds_per_answer, "max_new_tokens": evaluation.max_new_tokens}
    if mirage_rule is not None:
        quality["judged"] = len(judged)
    return FollowReport(
        model=evaluation.model, k=k, seed=seed, n_items=len({p.meta["follow"]["item"] for p in presentations}),
        n_presentations=len(presentations), self_citation=side_of(own, positions, k),
        cite_first=side_of([{1}] * len(positions), positions, k),
        random=random_side([len(c) for c in own], positions, k),
        mirage=mirage_side, mirage_rule=mirage_rule if mirage_side is not None else None,
        quality=quality, versions=dict(evaluation.versions))


def evaluate_follow(mirage: Mirage, examples: Sequence[TrainingExample], *, k: int = 5, seed: int = 0,
                    max_new_tokens: int = 48, judge: MirageConfig | None = None,
                    store: str | Path | None = None, progress: Progress | None = None,
                    pool: Sequence[TrainingExample] | None = None) -> FollowReport:
    """Run the permutation test: present ``examples`` (:func:`permutation_presentations`), generate a greedy answer
    to each with ``mirage``'s model and prompt (:func:`mirage.tune.evaluate.evaluate_citations`, resumable through
    ``store``; with ``judge``, mirage also attributes each answer; ``pool``: where filler passages come from) and
    compare the self-citations with the
    baselines (:func:`follow_report`)."""
    from mirage.tune.evaluate import evaluate_citations

    presentations = permutation_presentations(examples, k=k, seed=seed, pool=pool)
    if not presentations:
        raise ValueError("no item has exactly one supporting passage")
    evaluation = evaluate_citations(mirage, presentations, max_new_tokens=max_new_tokens, progress=progress,
                                    judge=judge, store=store)
    return follow_report(evaluation, presentations, k=k, seed=seed,
                         mirage_rule=judge.aggregation.rule if judge is not None else None)
