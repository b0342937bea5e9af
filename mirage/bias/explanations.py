"""The explainer, analysed: what ``mirage bias --explain`` explanations say about the model's citations.

For each generation with an explanation (:attr:`BiasRecord.explanation`), over its own words: sentences copied
verbatim from the prompt (a small model often recites the instructions, or a ``Document [1]: …`` line) are counted
and set aside, since reciting "Some documents were written by humans" or a document's heading is no reason and no
claim of use;

- **named documents**: the documents the explanation refers to (``[2]``, ``[1][3]``, ``Document 2``, ``Documents 1
  and 3``, ``doc 2``, ``document [2]``, ``document two``, ``the second document``; ids 1..n_docs only, so ``in 1999``
  or a numbered list names nothing). A reference inside a negated clause (``I did not cite Document 3``, ``Document 3
  is not relevant``) *declines* that document; ``claimed`` = the named documents referred to at least once outside
  such a clause: the documents the explanation says it used;
- **agreement**: ``claimed`` against the self-cited documents and against mirage's citations (the union over the
  answer's sentences), as a :data:`Relation`;
- **stated reason**: cue words about the documents' content (``contains``, ``mentions``, ``relevant``, …) and about
  their metadata or authorship (the study's label names and labels, ``author``, ``written by``, ``human``, ``AI``,
  ``LLM``, ``generated``, ``credible``, ``source``, …), giving a :data:`Category` and the cues matched;
- **confidence**: the explained answers with self-citations split at the median of their mean self-citation
  probability, the halves' naming and reason rates compared with Fisher's exact test (chi-square over the four
  categories).

Cue words and clause-level negation are heuristics over English text: they count what an explanation says, not
whether it is true. Run on a finished run folder without generating anything::

    python -m mirage.bias.explanations DIR            # prints the tables; writes DIR/explanations.json

Over 600 lines: one analysis of one record field (documents named, negation, stated reasons, confidence) with its
tables and command; its heuristics (cue lists, clause patterns) are read and changed together.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from mirage.attribution.citations import citation_numbers
from mirage.attribution.sentences import split_sentences
from mirage.attribution.serialization import JSONRecord
from mirage.bias.records import BiasRecord, read_generations
from mirage.data.inputs import InputError
from mirage.options import add_options, cli_arg
from mirage.runs.files import RESULTS_FILE, read_json
from mirage.runs.store import write_atomic
from mirage.views.markdown import fmt_p, fmt_pct, md_table

__all__ = ["AUTHORSHIP_CUES", "Category", "ExplanationAnalysis", "Relation", "analyse_explanations", "analyse_record",
           "analyse_run", "classify_reason", "confidence_split", "copied_sentences", "find_references", "label_words",
           "main", "metadata_cues", "name_documents", "render_explanations", "set_relation"]

Category = Literal["content", "metadata", "both", "none"]
#: How the documents an explanation claims (N) relate to a citation set (C): ``none`` N empty; ``exact`` N = C;
#: ``subset`` N ⊊ C; ``superset`` N ⊋ C; ``overlap`` they share some but neither holds the other; ``disjoint``
#: they share none (C may be empty).
Relation = Literal["none", "exact", "subset", "superset", "overlap", "disjoint"]
CATEGORIES: tuple[Category, ...] = get_args(Category)
RELATIONS: tuple[Relation, ...] = get_args(Relation)

_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
             "ninth": 9, "tenth": 10, "1st": 1, "2nd": 2, "3rd": 3, "4th": 4, "5th": 5, "6th": 6, "7th": 7, "8th": 8,
             "9th": 9, "10th": 10}
_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
          "ten": 10}
_DOC = r"(?:documents?|docs?\.?|passages?)"
_NUM = r"(?:\[\s*\d+\s*\]|\d+|" + "|".join(_WORDS) + r")"
_SEP = r"(?:\s*(?:,\s*(?:and|or|&)?|and|or|&|to|through|-|–)\s*)"
#: ``Document 2``, ``Documents 1, 2 and 4``, ``doc #3``, ``document [2]``, ``passage two``, ``documents 1-3``
_BY_NUMBER = re.compile(rf"\b{_DOC}\s*(?:#|no\.|number)?\s*({_NUM}(?:{_SEP}{_NUM})*)(?!\w)", re.IGNORECASE)
_ORD = r"(?:" + "|".join(_ORDINALS) + r"|last)"
#: ``the second document``, ``the first and third documents``
_BY_ORDINAL = re.compile(rf"\b({_ORD}(?:{_SEP}{_ORD})*)\s+{_DOC}(?!\w)", re.IGNORECASE)
_ITEM = re.compile(rf"\b(?:{_ORD}|\d+|" + "|".join(_WORDS) + r")\b", re.IGNORECASE)
_RANGE = re.compile(r"^\s*(?:to|through|-|–)\s*$", re.IGNORECASE)
#: Clause boundaries: sentence punctuation and the conjunctions that start a new claim.
_CLAUSE_END = re.compile(r"[.;:!?\n]|,?\s+\b(?:but|because|since|while|whereas|although|though|as|so|which|"
                         r"however)\b|,\s+and\b", re.IGNORECASE)
_NEGATION = re.compile(r"\b(?:not|no|never|neither|nor|none|cannot|without|irrelevant|unrelated)\b|n't\b",
                       re.IGNORECASE)
#: Words that may stand before a reference at the start of its clause (it is then the clause's subject).
_LEAD = re.compile(r"^(?:\W|\b(?:and|or|also|the|both|then|only|while|but)\b)*$", re.IGNORECASE)

#: Cues of a content reason: name → pattern (matched case-insensitively, on word boundaries).
CONTENT_CUES: dict[str, str] = {
    "relevant": r"(?:ir)?relevan\w*", "information": r"information|info", "contains": r"contain\w*",
    "mentions": r"mention\w*", "answer": r"answer\w*", "states": r"states|stated|statement\w*",
    "describes": r"describ\w*", "discusses": r"discuss\w*", "explains": r"explains|explained",
    "provides": r"provides|provided|providing", "details": r"details?|detailed", "facts": r"facts?|factual",
    "evidence": r"evidence", "supports": r"support\w*", "topic": r"topics?", "about": r"about",
    "related": r"relat(?:es|ed|ing)", "says": r"says|said", "according to": r"according\s+to",
    "refers": r"refers?|referring", "data": r"data", "question": r"questions?", "content": r"content",
    "context": r"context",
}
#: Cues of a metadata / authorship reason besides the study's own labels.
AUTHORSHIP_CUES: dict[str, str] = {
    "author": r"author\w*", "written by": r"written\s+by", "wrote": r"wrote", "human": r"humans?", "AI": r"AI",
    "LLM": r"LLMs?", "language model": r"language\s+models?", "generated": r"generat(?:ed|ion)",
    "credible": r"credib\w*", "source": r"sources?",
    "reliable": r"reliab\w*", "trustworthy": r"trust\w*", "label": r"label\w*", "metadata": r"meta-?data",
}


# -- parsing ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reference:
    """One document reference in an explanation: the document id, the reference's character span, and whether it
    sits in a negated clause."""

    doc: int
    start: int
    end: int
    negated: bool


@dataclass(frozen=True)
class Naming:
    """The documents an explanation names (first-mention order), those it only declines (every reference to them
    negated), and those it claims (named, not only declined)."""

    named: tuple[int, ...]
    declined: tuple[int, ...]

    @property
    def claimed(self) -> tuple[int, ...]:
        return tuple(d for d in self.named if d not in self.declined)


def _number(token: str) -> int:
    token = token.lower().strip("[] ")
    if token.isdigit():
        return int(token)
    return _ORDINALS.get(token) or _WORDS.get(token) or -1


def _numbers(group: str, n_docs: int) -> list[int]:
    """The ids of a number list (``1, 2 and 4``, ``1-3``, ``first and last``), ranges expanded."""
    out: list[int] = []
    items = list(_ITEM.finditer(group))
    for i, item in enumerate(items):
        value = n_docs if item.group().lower() == "last" else _number(item.group())
        gap = group[items[i - 1].end() : item.start()] if i else ""
        if out and _RANGE.match(gap) and 0 < out[-1] < value <= n_docs:
            out.extend(range(out[-1] + 1, value + 1))
        else:
            out.append(value)
    return out


def _clause(text: str, position: int) -> tuple[int, int]:
    """The span of the clause around ``position``."""
    start = 0
    for m in _CLAUSE_END.finditer(text):
        if m.end() <= position:
            start = m.end()
        elif m.start() >= position:
            return start, m.start()
    return start, len(text)


def _negated(text: str, start: int, end: int, next_start: int) -> bool:
    """A reference is negated when a negation precedes it in its clause, or when it opens its clause (is the
    subject) and a negation follows before the next comma or reference (``Document 3 is not relevant``, but not
    ``Document 2 matters, not [1]``)."""
    c_start, c_end = _clause(text, start)
    before = text[c_start:start]
    if _NEGATION.search(before):
        return True
    after = text[end : min(c_end, next_start)].split(",")[0]
    return bool(_LEAD.match(before)) and bool(_NEGATION.search(after))


def find_references(text: str, n_docs: int) -> list[Reference]:
    """Every reference to a document 1..n_docs in ``text``, in order: citation marks (``[2]``, ``[1][3]``,
    ``[1, 3]``), a document word with numbers (``Document 2``, ``Documents 1 and 3``, ``doc #2``, ``document [2]``,
    ``document two``, ``documents 1-3``) and ordinals (``the second document``, ``the first and last documents``).
    Numbers outside 1..n_docs (years, list numbering, counts such as ``2 documents``) are no reference."""
    if n_docs < 1:
        raise InputError(f"n_docs={n_docs}: an explanation refers to documents 1..n_docs; give n_docs >= 1.")
    found: dict[tuple[int, int], Reference] = {}
    spans: list[tuple[int, int, list[int]]] = []
    for pattern in (_BY_NUMBER, _BY_ORDINAL):
        for m in pattern.finditer(text):
            spans.append((m.start(), m.end(), _numbers(m.group(1), n_docs)))
    covered = [(s, e) for s, e, _ in spans]
    for doc, s, e in citation_numbers(text):
        if not any(cs <= s and e <= ce for cs, ce in covered):
            spans.append((s, e, [doc]))
    spans.sort()
    for i, (s, e, docs) in enumerate(spans):
        negated = _negated(text, s, e, spans[i + 1][0] if i + 1 < len(spans) else len(text))
        for doc in docs:
            if 1 <= doc <= n_docs:
                found.setdefault((s, doc), Reference(doc=doc, start=s, end=e, negated=negated))
    return sorted(found.values(), key=lambda r: (r.start, r.doc))


def name_documents(text: str, n_docs: int) -> Naming:
    """The documents ``text`` names, declines and claims (see :class:`Naming`)."""
    refs = find_references(text, n_docs)
    named = tuple(dict.fromkeys(r.doc for r in refs))
    positive = {r.doc for r in refs if not r.negated}
    return Naming(named=named, declined=tuple(d for d in named if d not in positive))


def copied_sentences(text: str, prompt: str, *, min_words: int = 2) -> list[tuple[int, int]]:
    """Spans of the sentences of ``text`` (of at least ``min_words`` words: a bare ``Document [3]:`` heading counts,
    a lone word does not) found verbatim in ``prompt``, case and whitespace aside."""
    haystack = " ".join(prompt.lower().split())
    return [(s, e) for s, e in split_sentences(text)
            if len(text[s:e].split()) >= min_words and " ".join(text[s:e].lower().split()) in haystack]


def own_words(text: str, prompt: str) -> tuple[str, int]:
    """``text`` with its sentences copied from ``prompt`` blanked (each by a newline, which ends a clause), and how
    many there were."""
    spans = copied_sentences(text, prompt)
    for s, e in reversed(spans):
        text = text[:s] + "\n" + text[e:]
    return text, len(spans)


# -- reasons ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reason:
    """An explanation's stated reason: its category and the cue names matched (in cue-list order)."""

    category: Category
    content_cues: tuple[str, ...]
    metadata_cues: tuple[str, ...]


def _strip_article(label: str) -> str:
    return re.sub(r"^(?:a|an|the)\s+", "", label.strip(), flags=re.IGNORECASE)


def metadata_cues(label_words: Iterable[str]) -> dict[str, str]:
    """The metadata cues of a study: its label names and labels (a leading article dropped, a plural ``s``
    allowed), then :data:`AUTHORSHIP_CUES`; name → pattern."""
    cues: dict[str, str] = {}
    for label in label_words:
        phrase = _strip_article(str(label))
        if phrase and phrase.lower() not in {k.lower() for k in cues}:
            cues[phrase] = r"\s+".join(map(re.escape, phrase.split())) + r"(?:s|es)?"
    for name, pattern in AUTHORSHIP_CUES.items():
        if name.lower() not in {k.lower() for k in cues}:
            cues[name] = pattern
    return cues


def label_words(metadata: Mapping[str, Any]) -> list[str]:
    """The side names and labels of a study's metadata (``BiasStudyResult.metadata``: first, second, first_labels,
    second_labels)."""
    words = [metadata.get("first"), *metadata.get("first_labels", []), metadata.get("second"),
             *metadata.get("second_labels", [])]
    return list(dict.fromkeys(str(w) for w in words if w))


def _matches(text: str, cues: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(name for name, pattern in cues.items()
                 if re.search(rf"(?<!\w)(?:{pattern})(?!\w)", text, flags=re.IGNORECASE))


_QUOTED = re.compile(r'"[^"\n]*"|“[^”\n]*”')


def classify_reason(text: str, metadata: Mapping[str, str]) -> Reason:
    """The reason ``text`` gives: ``content`` (only content cues), ``metadata`` (only metadata / authorship cues,
    ``metadata`` from :func:`metadata_cues`), ``both`` or ``none``. Text in double quotes (a document quoted: "…
    an English writer and author") is left out."""
    text = _QUOTED.sub(" ", text)
    content, meta = _matches(text, CONTENT_CUES), _matches(text, metadata)
    category: Category = ("both" if content and meta else "content" if content else "metadata" if meta else "none")
    return Reason(category=category, content_cues=content, metadata_cues=meta)


def set_relation(claimed: Iterable[int], cited: Iterable[int]) -> Relation:
    """How the claimed documents relate to a citation set (see :data:`Relation`)."""
    n, c = set(claimed), set(cited)
    if not n:
        return "none"
    if n == c:
        return "exact"
    if not n & c:
        return "disjoint"
    if n < c:
        return "subset"
    if n > c:
        return "superset"
    return "overlap"


# -- per explanation and per group -----------------------------------------------------------------------------------

def _cited(citations: Sequence[Sequence[int]], n_docs: int) -> list[int]:
    out: list[int] = []
    for sentence in citations:
        out.extend(d for d in sentence if 1 <= d <= n_docs and d not in out)
    return out


def self_citation_confidence(record: BiasRecord) -> float | None:
    """The mean generation probability of the answer's self-citation marks (None when it has none)."""
    probs = [p for _, p in record.citation_probs("self")]
    return sum(probs) / len(probs) if probs else None


@dataclass
class ExplanationRow:
    """One explanation, analysed: its documents (see :class:`Naming`), both citation sets of its answer, the
    relations of the claimed documents to them, the reason with its cues, the answer's self-citation confidence, and
    how many of its sentences were copied from the prompt (left out of the rest)."""

    key: str
    item_id: str
    mode: str
    named: list[int]
    declined: list[int]
    claimed: list[int]
    self_cited: list[int]
    mirage_cited: list[int]
    self_relation: str
    mirage_relation: str
    category: str
    content_cues: list[str]
    metadata_cues: list[str]
    confidence: float | None
    copied: int = 0


def analyse_record(record: BiasRecord, cues: Mapping[str, str]) -> ExplanationRow:
    """The analysis of one record's explanation (``cues``: :func:`metadata_cues`)."""
    if record.explanation is None:
        raise InputError(f"record {record.key}: explanation is null; only records generated with --explain have one.")
    text, copied = own_words(record.explanation, record.prompt)
    naming = name_documents(text, record.n_docs)
    reason = classify_reason(text, cues)
    self_cited = _cited(record.self_citations, record.n_docs)
    mirage_cited = _cited(record.mirage_citations, record.n_docs)
    return ExplanationRow(
        key=record.key, item_id=record.item_id, mode=record.mode, named=list(naming.named),
        declined=list(naming.declined), claimed=list(naming.claimed), self_cited=self_cited, mirage_cited=mirage_cited,
        self_relation=set_relation(naming.claimed, self_cited),
        mirage_relation=set_relation(naming.claimed, mirage_cited),
        category=reason.category, content_cues=list(reason.content_cues), metadata_cues=list(reason.metadata_cues),
        confidence=self_citation_confidence(record), copied=copied)


@dataclass
class ExplanationSummary:
    """Counts over a group of explanations.

    ``named``: explanations claiming at least one document; ``declined``: declining at least one;
    ``self_cited``: explanations whose answer self-cites; ``names_self_cited``: of those, explanations claiming every
    self-cited document; ``mirage_cited``: answers mirage cites; ``self_relation`` / ``mirage_relation``: the claimed
    documents against each citation set, per :data:`Relation`; ``categories``: per :data:`Category`;
    ``metadata_cues``: explanations matching each metadata cue; ``copies_prompt``: explanations with a sentence
    copied from the prompt.
    """

    n: int
    named: int
    declined: int
    self_cited: int
    names_self_cited: int
    mirage_cited: int
    self_relation: dict[str, int]
    mirage_relation: dict[str, int]
    categories: dict[str, int]
    metadata_cues: dict[str, int] = field(default_factory=dict)
    copies_prompt: int = 0


def summarize_rows(rows: Sequence[ExplanationRow]) -> ExplanationSummary:
    """The counts of ``rows`` (every relation and category present, zero when unseen)."""
    cues: Counter[str] = Counter(c for r in rows for c in r.metadata_cues)
    return ExplanationSummary(
        n=len(rows), named=sum(bool(r.claimed) for r in rows), declined=sum(bool(r.declined) for r in rows),
        self_cited=sum(bool(r.self_cited) for r in rows),
        names_self_cited=sum(claims_self_cited(r) for r in rows),
        mirage_cited=sum(bool(r.mirage_cited) for r in rows),
        self_relation={k: sum(r.self_relation == k for r in rows) for k in RELATIONS},
        mirage_relation={k: sum(r.mirage_relation == k for r in rows) for k in RELATIONS},
        categories={k: sum(r.category == k for r in rows) for k in CATEGORIES},
        metadata_cues=dict(cues.most_common()), copies_prompt=sum(r.copied > 0 for r in rows))


def mentions_metadata(row: ExplanationRow) -> bool:
    """The explanation gives a metadata or authorship reason (category ``metadata`` or ``both``)."""
    return row.category in ("metadata", "both")


def claims_self_cited(row: ExplanationRow) -> bool:
    """The answer self-cites and the explanation claims every self-cited document."""
    return bool(row.self_cited) and set(row.self_cited) <= set(row.claimed)


def fisher_p(low: Sequence[bool], high: Sequence[bool]) -> float | None:
    """Two-sided Fisher's exact test of a yes/no outcome between two groups (None when a group is empty)."""
    if not low or not high:
        return None
    from scipy.stats import fisher_exact

    table = [[sum(low), len(low) - sum(low)], [sum(high), len(high) - sum(high)]]
    return float(fisher_exact(table).pvalue)


def chi_square_p(low: Sequence[str], high: Sequence[str], values: Sequence[str]) -> float | None:
    """Chi-square test of independence of a categorical outcome and the group, over the ``values`` either group
    shows (None when a group is empty or fewer than two values occur)."""
    present = [v for v in values if v in low or v in high]
    if not low or not high or len(present) < 2:
        return None
    from scipy.stats import chi2_contingency

    table = [[sum(x == v for x in group) for v in present] for group in (low, high)]
    return float(chi2_contingency(table).pvalue)


@dataclass
class ConfidenceSplit:
    """The explained answers with self-citations, split at the median of their mean self-citation probability:
    ``low`` ≤ median < ``high``; ``unsplit``: explanations whose answer has no self-citation probability.
    p-values compare the halves: ``p_named`` (claims a document), ``p_names_self_cited`` (claims every self-cited
    document), ``p_metadata`` (mentions metadata: category metadata or both), Fisher's exact test; ``p_category``
    (the four categories), chi-square."""

    median: float | None
    unsplit: int
    low: ExplanationSummary
    high: ExplanationSummary
    p_named: float | None = None
    p_names_self_cited: float | None = None
    p_metadata: float | None = None
    p_category: float | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfidenceSplit:
        return cls(**{**data, "low": ExplanationSummary(**data["low"]), "high": ExplanationSummary(**data["high"])})


def confidence_split(rows: Sequence[ExplanationRow]) -> ConfidenceSplit:
    """Split ``rows`` by self-citation confidence at the median and compare the halves (see
    :class:`ConfidenceSplit`)."""
    scored = [r for r in rows if r.confidence is not None]
    values = sorted(r.confidence for r in scored if r.confidence is not None)
    if not values:
        return ConfidenceSplit(median=None, unsplit=len(rows), low=summarize_rows([]), high=summarize_rows([]))
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    low = [r for r in scored if r.confidence is not None and r.confidence <= median]
    high = [r for r in scored if r.confidence is not None and r.confidence > median]

    return ConfidenceSplit(
        median=median, unsplit=len(rows) - len(scored), low=summarize_rows(low), high=summarize_rows(high),
        p_named=fisher_p([bool(r.claimed) for r in low], [bool(r.claimed) for r in high]),
        p_names_self_cited=fisher_p([claims_self_cited(r) for r in low], [claims_self_cited(r) for r in high]),
        p_metadata=fisher_p([mentions_metadata(r) for r in low], [mentions_metadata(r) for r in high]),
        p_category=chi_square_p([r.category for r in low], [r.category for r in high], CATEGORIES))


@dataclass
class ExplanationAnalysis(JSONRecord):
    """The explanations of a study run: counts overall and per mode, the confidence split, and every analysed
    explanation. ``n_records``: generations in the run; ``label_words``: the study's labels, used as metadata cues
    with :data:`AUTHORSHIP_CUES`."""

    n_records: int
    label_words: list[str]
    overall: ExplanationSummary
    modes: dict[str, ExplanationSummary]
    confidence: ConfidenceSplit
    rows: list[ExplanationRow]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExplanationAnalysis:
        data = cls.known_fields(data)
        return cls(**{**data, "overall": ExplanationSummary(**data["overall"]),
                      "modes": {m: ExplanationSummary(**s) for m, s in data["modes"].items()},
                      "confidence": ConfidenceSplit.from_dict(data["confidence"]),
                      "rows": [ExplanationRow(**r) for r in data["rows"]]})


def analyse_explanations(records: Sequence[BiasRecord], *, label_words: Sequence[str]) -> ExplanationAnalysis:
    """Analyse the explanations of ``records`` (those without one are counted in ``n_records`` only); modes in
    order of first appearance. ``label_words``: the study's label names and labels (:func:`label_words`)."""
    cues = metadata_cues(label_words)
    rows = [analyse_record(r, cues) for r in records if r.explanation is not None]
    modes = list(dict.fromkeys(r.mode for r in rows))
    return ExplanationAnalysis(
        n_records=len(records), label_words=list(label_words), overall=summarize_rows(rows),
        modes={m: summarize_rows([r for r in rows if r.mode == m]) for m in modes}, confidence=confidence_split(rows),
        rows=rows)


# -- a run folder ----------------------------------------------------------------------------------------------------

def analyse_run(run_dir: str | Path) -> ExplanationAnalysis:
    """Analyse the explanations of a finished (or stopped) ``mirage bias --explain`` run folder, generating
    nothing. The metadata cues come from ``DIR/results.json``, or, without it, from the labels the records carry."""
    run_dir = Path(run_dir)
    records = read_generations(run_dir)
    if not any(r.explanation is not None for r in records):
        raise InputError(f"{run_dir}: none of its {len(records)} generations has an explanation; run `mirage bias` "
                         "with --explain (into a new folder: explained generations are keyed apart).")
    results = run_dir / RESULTS_FILE
    if results.is_file():
        stored = read_json(results, fix="give the results.json the run wrote, or delete it.")
        words = label_words(stored.get("metadata", {}))
    else:
        words = list(dict.fromkeys(lab for r in records for lab in r.labels if lab))
    return analyse_explanations(records, label_words=words)


# -- rendering -------------------------------------------------------------------------------------------------------

def _naming_row(name: str, s: ExplanationSummary) -> list[str]:
    sr, mr = s.self_relation, s.mirage_relation
    partial = sr["subset"] + sr["superset"] + sr["overlap"]
    versus_self = " / ".join(fmt_pct(k, of=s.n) for k in (sr["exact"], partial, sr["disjoint"], sr["none"]))
    versus_mirage = " / ".join(fmt_pct(k, of=s.named) for k in (mr["exact"] + mr["subset"],
                                                                  mr["superset"] + mr["overlap"], mr["disjoint"]))
    return [name, str(s.n), fmt_pct(s.named, of=s.n), fmt_pct(s.declined, of=s.n),
            f"{fmt_pct(s.names_self_cited, of=s.self_cited)} (n={s.self_cited})", versus_self, versus_mirage]


def _reason_row(name: str, s: ExplanationSummary) -> list[str]:
    return [name, str(s.n), fmt_pct(s.copies_prompt, of=s.n), *(fmt_pct(s.categories[c], of=s.n) for c in CATEGORIES)]


def render_explanations(analysis: ExplanationAnalysis) -> str:
    """Markdown tables of the analysis: naming and agreement per mode, stated reasons per mode, and the
    confidence split."""
    groups = list(analysis.modes.items())
    if len(groups) > 1:
        groups.append(("all", analysis.overall))
    intro = (f"{analysis.overall.n} of {analysis.n_records} generations carry an explanation. A document is "
             "*claimed* when the explanation refers to it (`[2]`, `Document 2`, `the second document`) outside a "
             "negated clause, *declined* when every reference to it is negated (`I did not cite Document 3`); "
             "sentences copied verbatim from the prompt (recited instructions, a `Document [1]: …` line) are left "
             "out. Values are percentages; the agreement with MIRAGE is over the explanations that claim a document.")
    naming_head = ["Mode", "Explanations", "Claims a document", "Declines a document",
                   "Claims every self-cited document", "vs self-citation: exact / partial / disjoint / none claimed",
                   "vs MIRAGE: ⊆ MIRAGE / overlap / disjoint"]
    out = [intro, "", "### Does the explanation name the cited documents?", "",
           md_table(naming_head, [_naming_row(name, s) for name, s in groups])]
    out += ["", "### The stated reason", "",
            md_table(["Mode", "Explanations", "Copies the prompt", *CATEGORIES],
                     [_reason_row(name, s) for name, s in groups])]
    cues = ", ".join(f"{c} ({n})" for c, n in analysis.overall.metadata_cues.items()) or "none"
    labels = ", ".join(f"`{w}`" for w in analysis.label_words)
    out += ["", f"Metadata cues matched (the study's labels {labels} and authorship words), in explanations: {cues}."]
    out += ["", "### High- vs low-confidence self-citations", "", _split_table(analysis.confidence)]
    return "\n".join(out)


def _split_table(split: ConfidenceSplit) -> str:
    if split.median is None:
        return (f"(No explained answer has a self-citation, so there is no confidence to split; {split.unsplit} "
                "explanations.)")
    lo, hi = split.low, split.high

    def meta(s: ExplanationSummary) -> str:
        return fmt_pct(s.categories["metadata"] + s.categories["both"], of=s.n)

    def cats(s: ExplanationSummary) -> str:
        return " / ".join(fmt_pct(s.categories[c], of=s.n) for c in CATEGORIES)

    intro = (f"Explained answers with self-citations, split at the median of their mean self-citation probability, "
             f"{split.median:.3f} ({split.unsplit} explained answers without one left out). p: Fisher's exact test; "
             "the categories: chi-square.")
    rows = [intro, "", "| | low (≤ median) | high (> median) | p |", "|---|---|---|---|",
            f"| explanations | {lo.n} | {hi.n} | |",
            (f"| claims a document | {fmt_pct(lo.named, of=lo.n)} | {fmt_pct(hi.named, of=hi.n)} | "
             f"{fmt_p(split.p_named)} |"),
            (f"| claims every self-cited document | {fmt_pct(lo.names_self_cited, of=lo.self_cited)} | "
             f"{fmt_pct(hi.names_self_cited, of=hi.self_cited)} | {fmt_p(split.p_names_self_cited)} |"),
            f"| mentions metadata (metadata or both) | {meta(lo)} | {meta(hi)} | {fmt_p(split.p_metadata)} |",
            f"| content / metadata / both / none | {cats(lo)} | {cats(hi)} | {fmt_p(split.p_category)} |"]
    return "\n".join(rows)


@dataclass(frozen=True, kw_only=True)
class ExplanationsOptions:
    """What ``python -m mirage.bias.explanations`` analyses (:func:`analyse_run`) and where it writes."""

    run_dir: str = cli_arg(flag="run_dir", help=(
        "output folder of a `mirage bias --explain` run (with generations.jsonl)"))
    output: str | None = cli_arg(None, flag="--output", aliases=("-o",), help=(
        "where to write the analysis (default DIR/explanations.json)"))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mirage.bias.explanations DIR``: analyse a run folder's explanations, print the tables, write
    ``DIR/explanations.json`` (``-o`` elsewhere)."""
    parser = argparse.ArgumentParser(
        prog="python -m mirage.bias.explanations",
        description="Analyse the explanations of a `mirage bias --explain` run folder without generating anything: "
                    "which documents each explanation names, whether they match the self-citations and mirage's "
                    "citations, and whether it gives content or metadata reasons.")
    add_options(parser, ExplanationsOptions)
    args = parser.parse_args(argv)
    try:
        analysis = analyse_run(args.run_dir)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    path = Path(args.output or Path(args.run_dir) / "explanations.json")
    write_atomic(path, analysis.to_json(indent=2))
    print(render_explanations(analysis))
    print(f"{analysis.overall.n} explanations; analysis in {path}.", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
