"""The report's data model: what its templates lay out, built from results (no markup here). Per item
(:func:`item_view`, :class:`ItemView`) each run's column (:func:`run_view`: the answer's spans, the CTI chart's bars,
the documents cut into heat segments) and the citations table (:class:`Row`, with two runs' sentences aligned,
:func:`align_sentences`); two runs' items matched by content (:func:`pair_runs`); a run's sentence counts
(:func:`overview`); the documents' colours (:func:`doc_color`).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from mirage.attribution.results import AnswerSpan, AnswerToken, AttributionResult, SentenceAttribution
from mirage.runs.store import item_keys
from mirage.views.rendering import NO_SELF_CITATION
from mirage.views.report.layout import (
    DocRegion,
    Heat,
    context_mode,
    cue_share,
    doc_regions,
    heat_of,
    is_scaffolding,
    stores_shares,
)

__all__ = [
    "CUES_PER_DOC",
    "CUES_PER_SPAN",
    "HEAT_RGB",
    "PALETTE",
    "SCAFFOLD_RGB",
    "Bar",
    "Chart",
    "Cue",
    "DocView",
    "ItemView",
    "Row",
    "RunView",
    "Segment",
    "SpanView",
    "align_sentences",
    "answer_views",
    "cti_bars",
    "doc_color",
    "document_segments",
    "item_view",
    "overview",
    "pair_runs",
    "row_flags",
    "run_summary",
    "run_view",
    "same_citations",
    "sentence_shares",
    "span_cues",
]


#: Context cues listed per answer span when hovering it.
CUES_PER_SPAN = 6


#: Selected context spans listed under each document.
CUES_PER_DOC = 12


#: Background colours of documents 1, 2, … (cycled).
PALETTE = ["#fde68a", "#a7f3d0", "#bfdbfe", "#fbcfe8", "#ddd6fe", "#fed7aa", "#c7d2fe", "#bbf7d0", "#fecaca", "#e9d5ff"]


#: Heat colours (RGB) of document content and of prompt scaffolding.
HEAT_RGB = (234, 88, 12)


SCAFFOLD_RGB = (100, 116, 139)


def doc_color(doc: int) -> str:
    """Background colour of a 1-based document id."""
    return PALETTE[(doc - 1) % len(PALETTE)]


@dataclass(frozen=True)
class Segment:
    """A piece of a document's entry as shown: its text, and when it carries saliency its heat colour and tooltip."""

    text: str
    scaffold: bool
    share: float | None = None
    tokens: str = ""  # answer token indices, space separated
    color: str = ""
    title: str = ""
    kept: bool = False


@dataclass(frozen=True)
class Cue:
    """A selected context span listed under its document."""

    text: str
    share: float
    scaffold: bool


@dataclass(frozen=True)
class DocView:
    """A document as shown: its entry in the prompt cut into segments, and the selected context listed under it."""

    doc: int
    title: str
    color: str
    truncated: bool
    segments: list[Segment] | None  # None: the entry was not found in the prompt; show the stored text
    text: str
    rest: str  # the part of a truncated document the prompt did not hold
    cues: list[Cue]


@dataclass(frozen=True)
class SpanView:
    """An attributed answer span, or a plain stretch of the answer (``docs`` empty)."""

    text: str
    docs: tuple[int, ...] = ()
    color: str = ""
    title: str = ""


@dataclass(frozen=True)
class Bar:
    """One answer token's bar in the CTI chart (SVG user units)."""

    x: float
    y: float
    width: float
    height: float
    fill: str
    outlined: bool
    label: str


@dataclass(frozen=True)
class Chart:
    """The CTI chart of an answer: one bar per token and the selection threshold."""

    width: int
    height: int
    bars: list[Bar]
    threshold: float
    threshold_y: float


@dataclass(frozen=True)
class RunView:
    """One result as shown in one column."""

    res: AttributionResult
    answer: list[SpanView]
    chart: Chart
    docs: list[DocView]
    content_only: bool
    approximate_shares: bool
    n_differ: int


@dataclass(frozen=True)
class Row:
    """One row of the citations table: a sentence and, per run, its attribution there (None: not in that run)."""

    text: str
    cells: tuple[SentenceAttribution | None, ...]
    self_differ: bool
    runs_differ: bool
    no_self: tuple[bool, ...] = ()  # per cell: its run's answer was given without citation marks (can_self_cite)


@dataclass(frozen=True)
class ItemView:
    """One item of the report: its result in each run (None where a run lacks it) and its citations table."""

    number: int
    question: str
    id: str | None
    runs: tuple[RunView | None, ...]
    rows: list[Row]
    n_docs: int
    haystack: str

    @property
    def only(self) -> int | None:
        """The run the item is in when it is in one run only (of two)."""
        present = [k for k, r in enumerate(self.runs) if r is not None]
        return present[0] if len(self.runs) > 1 and len(present) == 1 else None

    @property
    def n_self_differ(self) -> int:
        return sum(r.self_differ for r in self.rows)

    @property
    def n_runs_differ(self) -> int:
        return sum(r.runs_differ for r in self.rows) or int(self.only is not None)


def same_citations(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether two citation lists cite the same documents (order aside)."""
    return sorted(a) == sorted(b)


def sentence_shares(s: SentenceAttribution) -> list[float]:
    """Per document, its share of the sentence's attribution (``SentenceAttribution.doc_scores``; empty in results
    written before it existed)."""
    return list(getattr(s, "doc_scores", None) or [])


def _differ(s: SentenceAttribution, res: AttributionResult) -> bool:
    """Whether mirage's and the model's own citations of sentence ``s`` of ``res`` differ (never for a given answer
    that cannot self-cite)."""
    return res.can_self_cite and not same_citations(s.mirage_citations, s.self_citations)


def row_flags(row: Row, names: Sequence[str]) -> list[tuple[str, str]]:
    """The badges of a citations-table row, as (CSS class, text): within a run mirage against self-citation, and
    with two runs (``names``) the runs against each other."""
    if not names:
        if row.no_self and all(row.no_self):
            return [("na", NO_SELF_CITATION)]
        return [("differ", "differ")] if row.self_differ else [("agree", "agree")]
    flags = [("differ", "mirage ≠ self")] if row.self_differ else []
    if row.runs_differ:
        missing = [k for k, s in enumerate(row.cells) if s is None]
        flags.append(("diverge", f"only in {names[1 - missing[0]]}" if missing else f"{names[0]} ≠ {names[1]}"))
    return flags or [("agree", "agree")]


def _token_label(tokens: dict[int, AnswerToken], indices: Sequence[int], limit: int = 4) -> str:
    names = [f"“{tokens[i].text.strip() or tokens[i].text}”" for i in indices[:limit] if i in tokens]
    return ", ".join(names) + (f" and {len(indices) - limit} more" if len(indices) > limit else "")


def document_segments(res: AttributionResult, region: DocRegion, heat: Sequence[Heat], top: float,
                      tokens: dict[int, AnswerToken]) -> list[Segment]:
    """A document's entry cut where saliency, title or text start or end; each piece with its largest share (the
    heat colour is relative to ``top``, the item's largest), its answer tokens, and whether it is scaffolding."""
    inside = [h for h in heat if h.start < region.end and region.start < h.end]
    cuts = {region.start, region.end}
    for a, b in [region.text, region.title or region.text, *((h.start, h.end) for h in inside)]:
        cuts |= {min(max(a, region.start), region.end), min(max(b, region.start), region.end)}
    out: list[Segment] = []
    for a, b in pairwise(sorted(cuts)):
        cover = [h for h in inside if h.start < b and a < h.end]
        scaffold = not region.is_content(a, b)
        text = res.prompt[a:b]
        if not cover:
            seg = Segment(text=text, scaffold=scaffold)
        else:
            share = max(h.share for h in cover)
            drove = sorted({i for h in cover for i in h.tokens})
            kept = any(h.kept for h in cover)
            rgb = SCAFFOLD_RGB if scaffold else HEAT_RGB
            alpha = 0.12 + 0.78 * min(1.0, share / top) if top > 0 else 0.12
            title = (f"{share:.1%} of an answer token's saliency · behind {_token_label(tokens, drove)}"
                     f"{' · kept by CCI' if kept else ''}{' · prompt scaffolding' if scaffold else ''}")
            if not text.strip():
                text = text.replace("\n", "↵\n") if "\n" in text else text
            seg = Segment(text=text, scaffold=scaffold, share=share, tokens=" ".join(map(str, drove)),
                          color=f"rgba({rgb[0]},{rgb[1]},{rgb[2]},{alpha:.2f})", title=title, kept=kept)
        prev = out[-1] if out else None
        if prev and prev.share is None and seg.share is None and prev.scaffold == seg.scaffold:
            out[-1] = Segment(text=prev.text + seg.text, scaffold=seg.scaffold)
        else:
            out.append(seg)
    while out and out[-1].share is None and not out[-1].text.rstrip():
        out.pop()
    if out and out[-1].share is None:
        out[-1] = Segment(text=out[-1].text.rstrip(), scaffold=out[-1].scaffold)
    return out


def _documents(res: AttributionResult, regions: list[DocRegion] | None, tokens: dict[int, AnswerToken]
               ) -> list[DocView]:
    heat = heat_of(res)
    top = max((h.share for h in heat), default=0.0)
    spans = {(h.start, h.end): h.share for h in heat if h.kept}
    views = []
    for i, d in enumerate(res.docs, start=1):
        region = regions[i - 1] if regions else None
        segments = document_segments(res, region, heat, top, tokens) if region else None
        kept_len = region.kept if region else len(d["text"])
        cues = sorted((Cue(text=c.text, share=spans.get((c.start, c.end), 0.0),
                           scaffold=is_scaffolding(regions, i, c.start, c.end))
                       for c in res.context_spans if c.doc == i), key=lambda c: -c.share)[:CUES_PER_DOC]
        views.append(DocView(doc=i, title=d.get("title", ""), color=doc_color(i), truncated=i in res.truncated_docs,
                             segments=segments, text=d["text"], rest=d["text"][kept_len:] if region else "",
                             cues=cues))
    return views


def span_cues(res: AttributionResult, span: AnswerSpan, limit: int = CUES_PER_SPAN,
              regions: list[DocRegion] | None = None) -> list[dict[str, Any]]:
    """The strongest context tokens behind a span's answer tokens (one entry per context position, its largest
    share over the span's tokens), strongest first; ``scaffold`` marks prompt scaffolding."""
    tokens = {t.index: t for t in res.tokens}
    best: dict[tuple[int, int], dict[str, Any]] = {}
    for i in span.tokens:
        for cue in tokens[i].top_context:
            key, share = (cue.start, cue.end), cue_share(tokens[i], cue)
            if key not in best or share > best[key]["share"]:
                best[key] = {"token": cue.token.strip(), "doc": cue.doc, "share": round(share, 4),
                             "score": round(cue.score, 4),
                             "scaffold": is_scaffolding(regions, cue.doc, cue.start, cue.end)}
    return sorted(best.values(), key=lambda c: -c["share"])[:limit]


def answer_views(res: AttributionResult, regions: list[DocRegion] | None) -> list[SpanView]:
    """The answer cut into its attributed spans (each with its first document's colour and its strongest context
    tokens as a tooltip) and the plain stretches between them."""
    out, pos = [], 0
    for span in res.spans:
        out.append(SpanView(text=res.answer[pos : span.start]))
        title = "; ".join(f"[{c['doc']}] {c['token']} {c['share']:.0%}{' (scaffolding)' if c['scaffold'] else ''}"
                          for c in span_cues(res, span, regions=regions))
        out.append(SpanView(text=span.text, docs=tuple(span.docs), color=doc_color(span.docs[0]), title=title))
        pos = span.end
    out.append(SpanView(text=res.answer[pos:]))
    return [s for s in out if s.text]


def cti_bars(res: AttributionResult, width: int = 760, height: int = 90) -> Chart:
    """The CTI chart's bars, one per answer token (coloured by its first cited document when context-sensitive),
    and the threshold line, in SVG user units."""
    tokens = res.tokens
    top = max([t.cti for t in tokens] + [res.cti_threshold, 1e-9])
    step = width / max(1, len(tokens))
    bars = []
    for k, t in enumerate(tokens):
        h = max(1.0, (height - 4) * max(t.cti, 0.0) / top)
        fill = (doc_color(t.cited_docs[0]) if t.cited_docs else "#9ca3af") if t.context_sensitive else "#cbd5e1"
        label = f"{t.text!r} CTI {t.cti:.3g}" + (f" → {', '.join(map(str, t.cited_docs))}" if t.cited_docs else "")
        bars.append(Bar(x=round(k * step, 2), y=round(height - h, 2), width=round(max(step - 0.6, 0.6), 2),
                        height=round(h, 2), fill=fill, outlined=t.context_sensitive, label=label))
    return Chart(width=width, height=height, bars=bars, threshold=res.cti_threshold,
                 threshold_y=round(height - (height - 4) * res.cti_threshold / top, 2))


def run_view(res: AttributionResult) -> RunView:
    """What one column shows of a result."""
    regions = doc_regions(res)
    tokens = {t.index: t for t in res.tokens}
    return RunView(res=res, answer=answer_views(res, regions), chart=cti_bars(res),
                   docs=_documents(res, regions, tokens),
                   content_only=context_mode(res) == "content",
                   approximate_shares=bool(res.context_spans or res.spans) and not stores_shares(res),
                   n_differ=sum(_differ(s, res) for s in res.sentences))


def align_sentences(a: AttributionResult, b: AttributionResult) -> list[tuple[SentenceAttribution | None,
                                                                               SentenceAttribution | None]]:
    """The sentences of two answers side by side: by position when the answers are the same text, otherwise
    matched by text (a sentence in one answer only is paired with None)."""
    if a.answer == b.answer and len(a.sentences) == len(b.sentences):
        return list(zip(a.sentences, b.sentences))
    pairs: list[tuple[SentenceAttribution | None, SentenceAttribution | None]] = []
    texts = ([s.text.strip() for s in a.sentences], [s.text.strip() for s in b.sentences])
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, *texts, autojunk=False).get_opcodes():
        if op == "equal":
            pairs += list(zip(a.sentences[i1:i2], b.sentences[j1:j2]))
        else:
            pairs += [(s, None) for s in a.sentences[i1:i2]] + [(None, s) for s in b.sentences[j1:j2]]
    return pairs


def _rows(results: Sequence[AttributionResult | None]) -> list[Row]:
    present = [r for r in results if r is not None]
    if len(results) == 1 or len(present) == 1:
        k = next(i for i, r in enumerate(results) if r is not None)
        no_self = tuple(r is not None and not r.can_self_cite for r in results)
        return [Row(text=s.text, cells=tuple(s if i == k else None for i in range(len(results))),
                    self_differ=_differ(s, present[0]), runs_differ=len(results) > 1, no_self=no_self)
                for s in present[0].sentences]
    rows = []
    no_self = tuple(not r.can_self_cite for r in present)
    for sa, sb in align_sentences(*present):
        cells = (sa, sb)
        runs_differ = sa is None or sb is None or not (same_citations(sa.mirage_citations, sb.mirage_citations)
                                                       and same_citations(sa.self_citations, sb.self_citations))
        rows.append(Row(text=next(s for s in cells if s is not None).text, cells=cells,
                        self_differ=any(_differ(s, r) for s, r in zip(cells, present) if s),
                        runs_differ=runs_differ, no_self=no_self))
    return rows


def item_view(results: Sequence[AttributionResult | None], number: int) -> ItemView:
    """One item of one run, or of two runs (None where a run lacks it)."""
    first = next(r for r in results if r is not None)
    haystack = " ".join([first.question, first.id or ""] + [r.answer for r in results if r] +
                        [d.get("title", "") for d in first.docs])
    return ItemView(number=number, question=first.question, id=first.id,
                    runs=tuple(run_view(r) if r is not None else None for r in results), rows=_rows(results),
                    n_docs=len(first.docs), haystack=haystack.lower())


def pair_runs(a: Sequence[AttributionResult], b: Sequence[AttributionResult]
              ) -> list[tuple[AttributionResult | None, AttributionResult | None]]:
    """The items of two runs matched by content (question and documents, :func:`mirage.runs.store.item_keys`; the n-th
    repeat of an item matches the n-th repeat): ``a``'s items in order, then those only in ``b``."""
    keys_a, keys_b = ([{"question": r.question, "docs": r.docs} for r in run] for run in (a, b))
    by_b = dict(zip(item_keys(keys_b), b))
    ka = item_keys(keys_a)
    pairs: list[tuple[AttributionResult | None, AttributionResult | None]] = [(r, by_b.pop(k, None))
                                                                               for k, r in zip(ka, a)]
    return pairs + [(None, r) for r in by_b.values()]


def overview(results: Sequence[AttributionResult]) -> dict[str, float | int | None]:
    """Sentence counts over all results: missing citations per method and agreement between them. The
    self-citation rates (``no_self_citation``, ``agreement``) are over the sentences of answers that can self-cite
    (:attr:`~mirage.attribution.results.AttributionResult.can_self_cite`; None when none can), ``given`` counts the
    sentences left out."""
    sentences = [s for r in results for s in r.sentences]
    citing = [s for r in results if r.can_self_cite for s in r.sentences]
    n, m = len(sentences) or 1, len(citing)
    return {
        "items": len(results),
        "sentences": len(sentences),
        "given": len(sentences) - m,
        "no_self_citation": sum(not s.self_citations for s in citing) / m if m else None,
        "no_mirage_citation": sum(not s.mirage_citations for s in sentences) / n,
        "agreement": sum(same_citations(s.self_citations, s.mirage_citations) for s in citing) / m if m else None,
    }


def run_summary(results: Sequence[AttributionResult]) -> str:
    """A run's :func:`overview` in one line, as the report's header shows it."""
    ov = overview(results)

    def rate(key: str) -> str:
        return "n/a" if ov[key] is None else f"{ov[key]:.0%}"

    given = f" ({ov['given']} of given answers, without self-citations, left out)" if ov["given"] else ""
    return (f"{ov['items']} item(s), {ov['sentences']} sentence(s) · no self-citation {rate('no_self_citation')} · "
            f"no mirage citation {ov['no_mirage_citation']:.0%} · same citations {rate('agreement')}{given}")
