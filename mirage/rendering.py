"""Rendering results as text or HTML strings (computing never prints; rendering returns strings)."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .results import AttributionResult

PALETTE = ["#fde68a", "#a7f3d0", "#bfdbfe", "#fbcfe8", "#ddd6fe", "#fed7aa", "#c7d2fe", "#bbf7d0", "#fecaca", "#e9d5ff"]


def doc_color(doc: int) -> str:
    """Background colour of a 1-based document id."""
    return PALETTE[(doc - 1) % len(PALETTE)]


def _cites(ids: list[int]) -> str:
    return "".join(f"[{i}]" for i in ids) or "—"


def result_to_text(res: AttributionResult) -> str:
    """Plain-text summary: each sentence with mirage's and the model's own citations."""
    lines = [f"Q: {res.question}"]
    for s in res.sentences:
        flag = "" if sorted(s.mirage_citations) == sorted(s.self_citations) else "  (differ)"
        lines.append(f"  {s.text}\n    mirage {_cites(s.mirage_citations)}  self {_cites(s.self_citations)}{flag}")
    return "\n".join(lines)


def highlighted_answer(res: AttributionResult) -> str:
    """The answer as HTML with attributed spans coloured by (first) document and labelled with their ids."""
    out, pos = [], 0
    tokens = {t.index: t for t in res.tokens}
    for span in res.spans:
        out.append(escape(res.answer[pos : span.start]))
        cues = []
        for i in span.tokens:
            for cue in tokens[i].top_context[:3]:
                cues.append(f"[{cue.doc}] {cue.token.strip()} ({cue.score:.3g})")
        title = escape("; ".join(cues), quote=True)
        label = "".join(f"[{d}]" for d in span.docs)
        out.append(
            f'<mark class="mirage-span" data-docs="{escape(",".join(map(str, span.docs)), quote=True)}" '
            f'title="{title}" style="background:{doc_color(span.docs[0])}">{escape(span.text)}'
            f"<sub>{escape(label)}</sub></mark>"
        )
        pos = span.end
    out.append(escape(res.answer[pos:]))
    return "".join(out)


def result_to_html(res: AttributionResult) -> str:
    """A self-contained HTML fragment: question, highlighted answer, citations per sentence, documents."""
    rows = []
    for s in res.sentences:
        differ = sorted(s.mirage_citations) != sorted(s.self_citations)
        rows.append(
            f'<tr class="{"differ" if differ else "agree"}"><td>{escape(s.text)}</td>'
            f"<td>{escape(_cites(s.mirage_citations))}</td><td>{escape(_cites(s.self_citations))}</td></tr>"
        )
    docs = "".join(
        f'<li value="{i}"><span style="background:{doc_color(i)}">[{i}]</span> <b>{escape(d["title"])}</b>: '
        f"{escape(d['text'])}</li>"
        for i, d in enumerate(res.docs, start=1)
    )
    return (
        '<div class="mirage-result">'
        f"<p><b>Question:</b> {escape(res.question)}</p>"
        f'<p class="mirage-answer"><b>Answer:</b> {highlighted_answer(res)}</p>'
        '<table class="mirage-sentences"><tr><th>Sentence</th><th>mirage</th><th>self-citation</th></tr>'
        f"{''.join(rows)}</table>"
        f'<ol class="mirage-docs">{docs}</ol>'
        "</div>"
    )
