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
The measure itself (``follows``, ``FollowSide``, ``side_of``, ``random_side``) lives in :mod:`mirage.bias.metrics`,
where the bias study reads its answers with it too, and its table in :func:`mirage.bias.tables.follow_table`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.attribution.citations import parse_answer
from mirage.attribution.serialization import JSONRecord
from mirage.bias.metrics import (
    FollowSide,
    follows,
    random_follow_probability,
    random_side,
    side_of,
)
from mirage.bias.tables import follow_table
from mirage.runs.store import content_key
from mirage.tune.data import TrainingExample, answer_kind, cite_every_sentence, filler_documents
from mirage.views.markdown import md_table

if TYPE_CHECKING:
    from mirage.config import MirageConfig
    from mirage.pipeline import Mirage
    from mirage.runs.progress import Progress
    from mirage.tune.evaluate import CitationEval, JudgeSummary

__all__ = ["FollowReport", "answer_kind", "compare_follow", "evaluate_follow", "follow_changes_table", "follow_folder",
           "follow_report", "follow_report_of", "follows", "is_follow_report", "permutation_presentations",
           "random_follow_probability", "random_side", "side_of", "single_supporting"]


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
            output = cite_every_sentence(reference, [position]) if reference.strip() else reference
            out.append(TrainingExample(
                id=f"{ex.id}-pos{position}", source=ex.source, question=ex.question, docs=docs, output=output,
                citations=[list(c) for c in parse_answer(output, k).citations], supporting=[position],
                file=ex.file, line=ex.line, lang=ex.lang,
                meta={**ex.meta, "follow": {"item": ex.id, "position": position, "k": k, "fillers": n_fillers}}))
    return out


@dataclass
class FollowReport(JSONRecord):
    """The permutation test of one model (see the module's docstring): ``k`` positions, ``n_items`` items with
    exactly one supporting passage, ``n_presentations = k * n_items`` answers; the model's self-citations
    (``self_citation``), the baselines ``cite_first`` and ``random`` on the same presentations, and mirage's
    citations of the same answers (``mirage``, with a judge, and ``judge``: self-citation beside mirage's citations
    against the labels, and the faithfulness check of both against random sets of the same sizes,
    :class:`~mirage.tune.evaluate.JudgeSummary`); ``quality``: answers and sentences cited and the exact match of
    the reference answer, and where the citations that do not follow went (``misses``,
    :class:`~mirage.tune.evaluate.CitationMisses`), from the answers' :class:`~mirage.tune.evaluate.CitationEval`;
    ``by_answer_kind``: the
    rows of the self-citation, the random citer and mirage (with a judge), each over the items of each kind of
    reference answer (:func:`answer_kind`: citer field name -> kind -> row), and ``item_kinds`` each item's kind."""

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
    judge: JudgeSummary | None = None
    by_answer_kind: dict[str, dict[str, FollowSide]] = field(default_factory=dict)
    item_kinds: dict[str, str] = field(default_factory=dict)
    command: str | None = None
    versions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FollowReport:
        """The report from its JSON form."""
        from mirage.tune.evaluate import JudgeSummary

        sides = {name: FollowSide.from_dict(data[name]) if data.get(name) is not None else None
                 for name in ("self_citation", "cite_first", "random", "mirage")}
        judge = JudgeSummary.from_dict(data["judge"]) if data.get("judge") is not None else None
        kinds = {citer: {kind: FollowSide.from_dict(side) for kind, side in by_kind.items()}
                 for citer, by_kind in data.get("by_answer_kind", {}).items()}
        return cls(**{**cls.known_fields(data), **sides, "judge": judge, "by_answer_kind": kinds})

    def rows(self) -> list[tuple[str, FollowSide]]:
        """The citers of the table, model first; where the items' reference answers are of more than one kind, each
        citer's row over each kind's items follows its own."""
        counts = Counter(self.item_kinds.values())

        def split(name: str, citer: str) -> list[tuple[str, FollowSide]]:
            sides = self.by_answer_kind.get(citer, {})
            return [(f"{name}, {kind} answers ({counts[kind]} items)", side) for kind, side in sorted(sides.items())
                    ] if len(sides) > 1 else []

        rows = [("self-citation", self.self_citation), *split("self-citation", "self_citation"),
                ("cite [1]", self.cite_first), ("random (same count)", self.random),
                *split("random (same count)", "random")]
        if self.mirage is not None:
            name = f"mirage ({self.mirage_rule})"
            rows += [(name, self.mirage), *split(name, "mirage")]
        return rows

    def to_markdown(self) -> str:
        """The permutation test as a markdown table (rates in %)."""
        def pct(v: float | None) -> str:
            return "—" if v is None else f"{100 * v:.1f}"

        lines = [follow_table(self.rows(), self.k)]
        q = self.quality
        lines.append("")
        lines.append(f"{self.model}: {self.n_items} items x {self.k} positions = {self.n_presentations} answers; "
                     f"answers cited {pct(q.get('answers_cited'))} %, sentences cited {pct(q.get('sentences_cited'))} "
                     f"%, exact match {pct(q.get('exact_match'))} %.")
        if q.get("misses") and q["misses"].get("n_missed"):
            from mirage.tune.evaluate import CitationMisses

            lines += ["", CitationMisses.from_dict(q["misses"]).to_text() + "."]
        if self.judge is not None:
            lines += ["", ("The same answers judged (self-citation and mirage's citations against the labels, pooled "
                           "over (answer, passage) pairs; the faithfulness check of each set against random sets of "
                           "its size):"),
                      "", "```text", self.judge.to_text(), "```"]
        return "\n".join(lines)


def _sides_by_kind(citations: Sequence[set[int]], positions: Sequence[int], kinds: Sequence[str], k: int, *,
                   random: bool = False) -> dict[str, FollowSide]:
    """A citer's :class:`FollowSide` over the presentations of each answer kind (``random``: the random citer of
    the same counts, :func:`random_side`)."""
    out = {}
    for kind in sorted(set(kinds)):
        mine = [c for c, x in zip(citations, kinds) if x == kind]
        where = [p for p, x in zip(positions, kinds) if x == kind]
        out[kind] = random_side([len(c) for c in mine], where, k) if random else side_of(mine, where, k)
    return out


def follow_report(evaluation: CitationEval, presentations: Sequence[TrainingExample], *, k: int, seed: int,
                  mirage_rule: str | None = None) -> FollowReport:
    """The :class:`FollowReport` of answers already generated for ``presentations`` (``evaluation.answers[i]``
    answers ``presentations[i]``)."""
    if len(evaluation.answers) != len(presentations):
        raise ValueError(f"{len(evaluation.answers)} answers for {len(presentations)} presentations")
    positions = [int(p.meta["follow"]["position"]) for p in presentations]
    own = [set(a["cited"]) for a in evaluation.answers]
    kinds = [answer_kind(parse_answer(p.output, k).text) for p in presentations]
    mirage_side = None
    by_kind = {"self_citation": _sides_by_kind(own, positions, kinds, k),
               "random": _sides_by_kind(own, positions, kinds, k, random=True)}
    judged = [(set(a["mirage_cited"]), pos, kind) for a, pos, kind in zip(evaluation.answers, positions, kinds)
              if "mirage_cited" in a]
    if mirage_rule is not None and judged:
        cited, where, of_kind = (list(column) for column in zip(*judged))
        mirage_side = side_of(cited, where, k)
        by_kind["mirage"] = _sides_by_kind(cited, where, of_kind, k)
    quality: dict[str, Any] = {
        "answers_cited": evaluation.answers_cited, "sentences_cited": evaluation.sentences_cited,
        "exact_match": evaluation.exact_match, "invalid_citations": evaluation.invalid_citations,
        "seconds_per_answer": evaluation.seconds_per_answer, "max_new_tokens": evaluation.max_new_tokens}
    if mirage_rule is not None:
        quality["judged"] = len(judged)
    if evaluation.misses is not None:
        quality["misses"] = evaluation.misses.to_dict()
    item_kinds = {str(p.meta["follow"]["item"]): x for p, x in zip(presentations, kinds)}
    return FollowReport(
        model=evaluation.model, k=k, seed=seed, n_items=len({p.meta["follow"]["item"] for p in presentations}),
        n_presentations=len(presentations), self_citation=side_of(own, positions, k),
        cite_first=side_of([{1}] * len(positions), positions, k),
        random=random_side([len(c) for c in own], positions, k),
        mirage=mirage_side, mirage_rule=mirage_rule if mirage_side is not None else None,
        quality=quality, judge=evaluation.judge, by_answer_kind=by_kind, item_kinds=item_kinds,
        versions=dict(evaluation.versions))


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


# -- comparing runs on the same items ----------------------------------------------------------------------------------


def answers_by_item(answers: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[set[int], int, str]]]:
    """A follow run's stored answers (``NAME.answers.jsonl``) grouped by item: each presentation's cited set, the
    supporting passage's position, read from the presentation's id (``<item>-pos<p>``,
    :func:`permutation_presentations`) and its ``supporting`` field, and the answer without its citation marks
    (lower-cased, spaces normalised)."""
    from mirage.attribution.citations import strip_citations

    items: dict[str, list[tuple[set[int], int, str]]] = {}
    for answer in answers:
        item, sep, position = str(answer["id"]).rpartition("-pos")
        if not sep or not position.isdigit() or answer.get("supporting") != [int(position)]:
            raise ValueError(f"answer {answer['id']!r} is not a permutation-test presentation (<item>-pos<p>, "
                             "supporting [p]); give the answers file of `mirage tune follow`")
        text = " ".join(strip_citations(str(answer.get("answer", "")))[0].lower().split())
        items.setdefault(item, []).append((set(answer["cited"]), int(position), text))
    return items


def _item_measures(presentations: Sequence[tuple[set[int], int, str]]) -> dict[str, float | None]:
    """One item's follow rate, share citing [1] where it does not support and mean F1 over its presentations, and
    ``answer_stable``: the share of its presentations that give its most frequent answer (citations aside). A model
    that reads the content gives one answer whatever the order and moves only its citation."""
    side = side_of([c for c, _, _ in presentations], [p for _, p, _ in presentations],
                   max(p for _, p, _ in presentations))
    most = Counter(t for _, _, t in presentations).most_common(1)[0][1]
    return {"follow_rate": side.follow_rate, "first_when_not_supporting": side.first_when_not_supporting,
            "f1": side.f1, "answer_stable": most / len(presentations)}


FOLLOW_MEASURES = ("follow_rate", "first_when_not_supporting", "f1", "answer_stable")


@dataclass
class FollowChange(JSONRecord):
    """A follow run beside a reference run on the items both answered: each measure of :data:`FOLLOW_MEASURES`
    (fractions, means over items, so every item weighs the same; ``answer_stable``: the share of an item's
    presentations that give its most frequent answer, citations aside) with its 95 % bootstrap interval over items, and
    the paired change from the reference with its interval (resampling the shared items: an interval that holds 0
    says the change is within what the choice of items moves). ``answer_kind``: the kind of reference answer
    (:func:`answer_kind`) of the items compared, ``"all"`` for every shared item."""

    name: str
    reference: str
    n_items: int
    values: dict[str, float | None]
    intervals: dict[str, list[float] | None]
    changes: dict[str, float | None]
    change_intervals: dict[str, list[float] | None]
    answer_kind: str = "all"


def compare_follow(reference: Iterable[Mapping[str, Any]], other: Iterable[Mapping[str, Any]], *, name: str = "",
                   reference_name: str = "", draws: int = 2000, seed: int = 0,
                   items: Collection[str] | None = None, answer_kind: str = "all") -> FollowChange:
    """The :class:`FollowChange` of ``other``'s answers against ``reference``'s (both ``mirage tune follow``
    answers files, read as :func:`answers_by_item`), on the items both hold (of ``items``, where given: those whose
    reference answer is of the kind ``answer_kind`` names, from a report's ``item_kinds``)."""
    from mirage.bias.metrics import bootstrap_ci

    ref, new = answers_by_item(reference), answers_by_item(other)
    shared = sorted((set(ref) & set(new)) if items is None else (set(ref) & set(new) & set(items)))
    if not shared:
        raise ValueError(f"{name or 'the run'} and {reference_name or 'the reference'} share no item: compare runs "
                         "of the same data, --limit and --ndocs")
    ref_m = [_item_measures(ref[i]) for i in shared]
    new_m = [_item_measures(new[i]) for i in shared]
    values, intervals, changes, change_intervals = {}, {}, {}, {}
    for measure in FOLLOW_MEASURES:
        pairs = [(x, y) for a, b in zip(ref_m, new_m)
                 if (x := a[measure]) is not None and (y := b[measure]) is not None]
        mine = [y for b in new_m if (y := b[measure]) is not None]
        values[measure] = sum(mine) / len(mine) if mine else None
        intervals[measure] = bootstrap_ci(mine, draws=draws, seed=seed)
        diffs = [b - a for a, b in pairs]
        changes[measure] = sum(diffs) / len(diffs) if diffs else None
        change_intervals[measure] = bootstrap_ci(diffs, draws=draws, seed=seed)
    return FollowChange(name=name, reference=reference_name, n_items=len(shared), values=values,
                        intervals=intervals, changes=changes, change_intervals=change_intervals,
                        answer_kind=answer_kind)


def follow_changes_table(changes: Sequence[FollowChange]) -> str:
    """:class:`FollowChange` rows as a markdown table: each measure (%) with its interval, and its change from the
    reference (points) with the paired interval."""
    def pct(v: float | None) -> str:
        return "—" if v is None else f"{100 * v:.1f}"

    def ci(v: Sequence[float] | None) -> str:
        return "" if not v else f" [{100 * v[0]:.1f}, {100 * v[1]:.1f}]"

    def change(v: float | None) -> str:
        return "—" if v is None else f"{100 * v:+.1f}"

    titles = {"follow_rate": "follows", "first_when_not_supporting": "[1] when not supporting", "f1": "F1",
              "answer_stable": "same answer"}
    head = ["run", "answers", "items", *[f"{titles[m]}{suffix}" for m in FOLLOW_MEASURES for suffix in ("", " change")]]
    rows = []
    for row in changes:
        cells = [f"`{row.name}`", row.answer_kind, str(row.n_items)]
        for m in FOLLOW_MEASURES:
            cells += [pct(row.values.get(m)) + ci(row.intervals.get(m)),
                      change(row.changes.get(m)) + ci(row.change_intervals.get(m))]
        rows.append(cells)
    return md_table(head, rows)


def is_follow_report(data: object) -> bool:
    """Whether a JSON value is a permutation-test report as ``mirage tune follow -o`` writes it."""
    return isinstance(data, dict) and {"k", "self_citation", "cite_first", "random"} <= data.keys()


def follow_report_of(path: str | Path) -> FollowReport:
    """The :class:`FollowReport` that ``mirage tune follow -o`` wrote to ``path``; a file that is no such report is a
    one-line :class:`~mirage.data.inputs.InputError` naming it."""
    from mirage.data.inputs import InputError
    from mirage.runs.files import read_json

    data = read_json(path)
    if not is_follow_report(data):
        raise InputError(f"{path} is not a permutation-test report; give a file `mirage tune follow -o` wrote")
    return FollowReport.from_dict(data)


@dataclass
class FollowFolder:
    """A folder's permutation-test reports and paired comparisons (``benchmarks/compare_follow.py``), by file name,
    each file read once; its other JSON files are left aside."""

    reports: dict[str, FollowReport] = field(default_factory=dict)
    #: file name -> (the command that wrote it, its rows)
    changes: dict[str, tuple[str, list[FollowChange]]] = field(default_factory=dict)


def follow_folder(folder: str | Path) -> FollowFolder:
    """The :class:`FollowFolder` of ``folder``'s ``*.json`` files; a file that is not JSON is a one-line
    :class:`~mirage.data.inputs.InputError` naming it (:func:`mirage.runs.files.read_json`)."""
    from mirage.runs.files import read_json

    found = FollowFolder()
    for path in sorted(Path(folder).glob("*.json")):
        data = read_json(path)
        if is_follow_report(data):
            found.reports[path.name] = FollowReport.from_dict(data)
        elif isinstance(data, dict) and isinstance(data.get("follow_changes"), list):
            found.changes[path.name] = (str(data.get("command", "")),
                                        [FollowChange.from_dict(row) for row in data["follow_changes"]])
    return found
