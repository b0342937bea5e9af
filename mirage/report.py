"""Attribution results as HTML, all of it: one result as a fragment (:func:`result_to_html`, e.g. for a notebook's
``display(HTML(...))``) and a browsable static report of many (:func:`report_html`, what
``mirage view RESULTS.jsonl -o report.html`` writes).

The report is one self-contained page (inline CSS and JS, no network): a searchable list of items; per item the
question, the documents, the answer with spans coloured by document (hovering a span shows its top context tokens),
both citation sets per sentence with disagreements marked, and an SVG chart of CTI scores over the answer tokens.

All text is rendered server-side with :func:`html.escape`; the little data the page's script needs (each span's
context cues) is embedded as JSON in a ``<script type="application/json">`` block with ``<``, ``>`` and ``&``
written as ``\\u`` escapes, and is inserted with ``textContent``.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from dataclasses import MISSING, fields
from html import escape
from pathlib import Path
from typing import Any

from .inputs import InputError, RawRow, json_kind, read_jsonl
from .rendering import format_citations
from .results import AnswerSpan, AttributionResult

#: Context cues listed per answer span when hovering it.
CUES_PER_SPAN = 6
#: Background colours of documents 1, 2, … (cycled).
PALETTE = ["#fde68a", "#a7f3d0", "#bfdbfe", "#fbcfe8", "#ddd6fe", "#fed7aa", "#c7d2fe", "#bbf7d0", "#fecaca", "#e9d5ff"]


def doc_color(doc: int) -> str:
    """Background colour of a 1-based document id."""
    return PALETTE[(doc - 1) % len(PALETTE)]


def read_results(path: str | Path) -> list[AttributionResult]:
    """The results of a ``mirage attribute`` JSONL file (extra keys such as ``key``/``index`` are ignored).

    A torn last line (a record cut off without its newline, as a stopped run leaves it) is skipped with a warning;
    any other line that is not JSON, not an object, or not an attribution result is an InputError naming the file
    and line; so is a file that is missing, a directory, or not UTF-8.
    """
    path = Path(path)
    out = []
    for row in read_jsonl(path, what="JSONL written by `mirage attribute`"):
        if isinstance(row, RawRow):
            out.append(_result(row.data, path, row.line))
        elif row.unterminated:  # the last line, without its newline: a record cut off mid-write
            warnings.warn(f"{path}: skipped line {row.line}, a record cut off mid-write (the run was stopped); "
                          "re-run `mirage attribute` to finish that item.", stacklevel=2)
        else:
            raise InputError(f"{path} line {row.line} is {row.error}; a results file has one JSON object per line, "
                             "as `mirage attribute` writes it.")
    return out


#: What a result record must hold (the fields of AttributionResult without a default).
_REQUIRED = tuple(f.name for f in fields(AttributionResult) if f.default is MISSING and f.default_factory is MISSING)


def _result(data: Any, path: Path, lineno: int) -> AttributionResult:
    if not isinstance(data, dict):
        raise InputError(f"{path} line {lineno} is a JSON {json_kind(data)}, not an object; a results file has one "
                         "attribution result object per line, as `mirage attribute` writes it.")
    missing = [name for name in _REQUIRED if name not in data]
    if missing:
        errors_file = " (it looks like the .errors.jsonl of a run: view the results file beside it)" if (
            "error" in data and "key" in data) else ""
        raise InputError(f"{path} line {lineno} is not a mirage attribution result: it lacks "
                         f"{', '.join(repr(m) for m in missing[:4])}{', …' if len(missing) > 4 else ''}"
                         f"{errors_file}; give the JSONL written by `mirage attribute`.")
    try:
        return AttributionResult.from_dict(data)
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise InputError(f"{path} line {lineno} is not a valid mirage attribution result ({type(err).__name__}: "
                         f"{err}); give the JSONL written by `mirage attribute`.") from None


def span_cues(res: AttributionResult, span: AnswerSpan, limit: int = CUES_PER_SPAN) -> list[dict[str, Any]]:
    """The strongest context tokens behind a span's answer tokens (one entry per context position)."""
    tokens = {t.index: t for t in res.tokens}
    best: dict[tuple[int, int], dict[str, Any]] = {}
    for i in span.tokens:
        for cue in tokens[i].top_context:
            key = (cue.start, cue.end)
            if key not in best or cue.score > best[key]["score"]:
                best[key] = {"token": cue.token.strip(), "doc": cue.doc, "score": round(cue.score, 4)}
    return sorted(best.values(), key=lambda c: -c["score"])[:limit]


def _chips(ids: Sequence[int], n_docs: int) -> str:
    if not ids:
        return '<span class="none">none</span>'
    return "".join(
        f'<span class="chip" style="background:{doc_color(i)}">[{i}]</span>' if 1 <= i <= n_docs
        else f'<span class="chip invalid">[{i}]</span>' for i in ids
    )


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
    """One result as a self-contained HTML fragment: question, highlighted answer, citations per sentence,
    documents (all text escaped)."""
    rows = []
    for s in res.sentences:
        differ = sorted(s.mirage_citations) != sorted(s.self_citations)
        rows.append(
            f'<tr class="{"differ" if differ else "agree"}"><td>{escape(s.text)}</td>'
            f"<td>{escape(format_citations(s.mirage_citations))}</td>"
            f"<td>{escape(format_citations(s.self_citations))}</td></tr>"
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


def cti_chart(res: AttributionResult, *, width: int = 760, height: int = 90) -> str:
    """An inline SVG bar chart of the CTI score of each answer token, the selection threshold dashed.

    Context-sensitive tokens are coloured by their first cited document (grey if they cite none).
    """
    tokens = res.tokens
    if not tokens:
        return '<p class="none">no answer tokens</p>'
    top = max([t.cti for t in tokens] + [res.cti_threshold, 1e-9])
    step = width / len(tokens)
    bars = []
    for k, t in enumerate(tokens):
        h = max(1.0, (height - 4) * max(t.cti, 0.0) / top)
        if t.context_sensitive:
            fill = doc_color(t.cited_docs[0]) if t.cited_docs else "#9ca3af"
            stroke = ' stroke="#374151" stroke-width="0.6"'
        else:
            fill, stroke = "#cbd5e1", ""
        label = f"{t.text!r} CTI {t.cti:.3g}" + (f" → {', '.join(map(str, t.cited_docs))}" if t.cited_docs else "")
        bars.append(f'<rect x="{k * step:.2f}" y="{height - h:.2f}" width="{max(step - 0.6, 0.6):.2f}" '
                    f'height="{h:.2f}" fill="{fill}"{stroke}><title>{escape(label)}</title></rect>')
    y = height - (height - 4) * res.cti_threshold / top
    return (f'<svg class="cti" viewBox="0 0 {width} {height}" width="100%" height="{height}" '
            f'preserveAspectRatio="none" role="img" aria-label="CTI score per answer token">'
            f'{"".join(bars)}<line x1="0" x2="{width}" y1="{y:.2f}" y2="{y:.2f}" stroke="#dc2626" '
            f'stroke-dasharray="4 3" stroke-width="1"><title>threshold {res.cti_threshold:.3g}</title></line></svg>')


def _sentences_table(res: AttributionResult) -> str:
    n = len(res.docs)
    rows = []
    for s in res.sentences:
        differ = sorted(s.mirage_citations) != sorted(s.self_citations)
        mark = '<span class="badge differ">differ</span>' if differ else '<span class="badge agree">agree</span>'
        rows.append(f'<tr class="{"differ" if differ else "agree"}"><td>{escape(s.text)}</td>'
                    f'<td class="cites self">{_chips(s.self_citations + s.invalid_self_citations, n)}</td>'
                    f'<td class="cites mirage">{_chips(s.mirage_citations, n)}</td><td>{mark}</td></tr>')
    return ('<table class="sentences"><thead><tr><th>Sentence</th><th>self-citation</th><th>mirage</th><th></th>'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _documents(res: AttributionResult) -> str:
    items = []
    for i, d in enumerate(res.docs, start=1):
        cues = [c for c in res.context_spans if c.doc == i]
        cue_html = ""
        if cues:
            cue_html = '<div class="ctx">selected context: ' + " ".join(
                f'<span class="cue" style="border-color:{doc_color(i)}">{escape(c.text)}</span>'
                for c in sorted(cues, key=lambda c: -c.score)[:12]) + "</div>"
        trunc = ' <span class="none">(truncated in the prompt)</span>' if i in res.truncated_docs else ""
        items.append(f'<li class="doc"><span class="chip" style="background:{doc_color(i)}">[{i}]</span> '
                     f'<b>{escape(d.get("title", ""))}</b>{trunc}<div class="doctext">{escape(d["text"])}</div>'
                     f"{cue_html}</li>")
    return f'<ol class="docs">{"".join(items)}</ol>'


def _disagreements(res: AttributionResult) -> int:
    return sum(sorted(s.mirage_citations) != sorted(s.self_citations) for s in res.sentences)


def item_html(res: AttributionResult, number: int) -> str:
    """One item's panel (hidden until selected)."""
    model = f" · model {escape(res.model)}" if res.model else ""
    return (
        f'<section class="item" id="item-{number}" data-item="{number}" hidden>'
        f'<h2>{escape(res.question)}</h2><p class="meta">item {number}'
        f'{" · id " + escape(res.id) if res.id else ""}{model} · {len(res.sentences)} sentence(s), '
        f"{_disagreements(res)} with differing citations</p>"
        f'<h3>Answer</h3><div class="answer">{highlighted_answer(res)}</div>'
        f'<h3>CTI score per answer token</h3>{cti_chart(res)}<p class="caption">One bar per answer token; '
        "context-sensitive tokens are coloured by the document they cite; dashed line: selection threshold "
        f"({res.cti_threshold:.3g}).</p>"
        f'<h3>Citations per sentence</h3>{_sentences_table(res)}'
        f"<h3>Documents</h3>{_documents(res)}</section>"
    )


def overview(results: Sequence[AttributionResult]) -> dict[str, float | int]:
    """Sentence counts over all results: missing citations per method and agreement between them."""
    sentences = [s for r in results for s in r.sentences]
    n = len(sentences) or 1
    return {
        "items": len(results),
        "sentences": len(sentences),
        "no_self_citation": sum(not s.self_citations for s in sentences) / n,
        "no_mirage_citation": sum(not s.mirage_citations for s in sentences) / n,
        "agreement": sum(sorted(s.self_citations) == sorted(s.mirage_citations) for s in sentences) / n,
    }


def _json_for_script(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def report_html(results: Sequence[AttributionResult], *, title: str = "mirage report") -> str:
    """The whole self-contained page for ``results``."""
    entries, panels, data = [], [], []
    for k, res in enumerate(results, start=1):
        haystack = " ".join([res.question, res.answer, res.id or ""] + [d.get("title", "") for d in res.docs])
        n_diff = _disagreements(res)
        badge = f'<span class="badge differ">{n_diff} differ</span>' if n_diff else ""
        entries.append(f'<li><a href="#item-{k}" class="entry" data-item="{k}" '
                       f'data-search="{escape(haystack.lower(), quote=True)}">'
                       f'<span class="q">{escape(res.question)}</span><span class="sub">{len(res.sentences)} '
                       f"sentence(s) · {len(res.spans)} span(s) {badge}</span></a></li>")
        panels.append(item_html(res, k))
        data.append({"spans": [{"docs": s.docs, "text": s.text, "cues": span_cues(res, s)} for s in res.spans]})
    ov = overview(results)
    summary = (f"{ov['items']} item(s), {ov['sentences']} sentence(s) · no self-citation "
               f"{ov['no_self_citation']:.0%} · no mirage citation {ov['no_mirage_citation']:.0%} · "
               f"same citations {ov['agreement']:.0%}")
    return _PAGE.format(title=escape(title), summary=escape(summary), entries="".join(entries),
                        panels="".join(panels) or '<p class="none">No results.</p>', data=_json_for_script(data),
                        css=_CSS, js=_JS.replace("%COLORS%", json.dumps(PALETTE)))


def write_report(results_path: str | Path, output: str | Path, *, title: str | None = None) -> Path:
    """Read a results JSONL and write the report page; returns the output path."""
    results = read_results(results_path)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report_html(results, title=title or f"mirage report: {Path(results_path).name}"),
                      encoding="utf-8")
    return output


def cmd_view(args: argparse.Namespace) -> int:
    """``mirage view``: write the HTML report of a results file."""
    out = write_report(args.results, args.output, title=args.title)
    print(f"wrote {out}", file=sys.stderr)
    return 0


_CSS = """
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#1f2937;
background:#f8fafc}header{padding:10px 18px;background:#1e293b;color:#f8fafc}header h1{margin:0;font-size:18px}
header p{margin:2px 0 0;color:#cbd5e1;font-size:13px}.layout{display:flex;min-height:calc(100vh - 60px)}
nav{width:310px;flex:none;border-right:1px solid #e2e8f0;background:#fff;padding:10px;overflow-y:auto;
max-height:calc(100vh - 60px);position:sticky;top:0}nav input{width:100%;padding:7px 9px;border:1px solid #cbd5e1;
border-radius:6px;font:inherit}nav ul{list-style:none;margin:8px 0 0;padding:0}nav .entry{display:block;padding:7px 8px;
border-radius:6px;color:inherit;text-decoration:none;border:1px solid transparent}nav .entry:hover{background:#f1f5f9}
nav .entry.active{background:#e0e7ff;border-color:#a5b4fc}nav .q{display:block;font-weight:600;overflow:hidden;
text-overflow:ellipsis;display:-webkit-box;-webkit-line-clamp:2;-webkit-box-orient:vertical}
nav .sub{font-size:12px;color:#64748b}#count{font-size:12px;color:#64748b;margin-top:6px}
main{flex:1;padding:6px 24px 40px;max-width:1000px}h2{font-size:19px;margin:14px 0 2px}h3{font-size:14px;
margin:18px 0 6px;color:#334155;text-transform:uppercase;letter-spacing:.04em}.meta{color:#64748b;margin:0;font-size:12px}
.answer{background:#fff;border:1px solid #e2e8f0;border-radius:8px;padding:12px 14px;font-size:15px;line-height:1.8;
white-space:pre-wrap}mark.mirage-span{border-radius:3px;padding:1px 2px;cursor:help;color:inherit}
mark.mirage-span sub{font-size:10px;color:#475569;margin-left:1px}mark.mirage-span:hover{outline:2px solid #334155}
table.sentences{border-collapse:collapse;width:100%;background:#fff;border:1px solid #e2e8f0}
table.sentences th,table.sentences td{padding:6px 8px;border-bottom:1px solid #e2e8f0;text-align:left;vertical-align:top}
table.sentences th{background:#f1f5f9;font-size:12px}tr.differ td:first-child{border-left:4px solid #f97316}
tr.agree td:first-child{border-left:4px solid #22c55e}td.cites{white-space:nowrap}
.chip{display:inline-block;border-radius:4px;padding:0 5px;margin-right:2px;font-size:12px;font-weight:600}
.chip.invalid{background:#fee2e2;color:#991b1b;text-decoration:line-through}.none{color:#94a3b8;font-style:italic}
.badge{display:inline-block;border-radius:9px;padding:0 7px;font-size:11px;font-weight:600}
.badge.differ{background:#ffedd5;color:#9a3412}.badge.agree{background:#dcfce7;color:#166534}
ol.docs{list-style:none;padding:0;margin:0}li.doc{background:#fff;border:1px solid #e2e8f0;border-radius:8px;
padding:8px 12px;margin-bottom:8px}.doctext{color:#334155;font-size:13px;margin-top:4px;max-height:9em;overflow:auto;
white-space:pre-wrap}.ctx{margin-top:6px;font-size:12px;color:#64748b}.cue{display:inline-block;border:2px solid;
border-radius:4px;padding:0 4px;margin:2px 2px 0 0;color:#1f2937}svg.cti{background:#fff;border:1px solid #e2e8f0;
border-radius:6px;display:block}.caption{font-size:12px;color:#64748b;margin:3px 0 0}
.layout{background:linear-gradient(to right,#fff 310px,#f8fafc 310px)}#tip{position:fixed;z-index:10;background:#0f172a;color:#f8fafc;border-radius:6px;
padding:8px 10px;font-size:12px;max-width:360px;box-shadow:0 4px 14px rgba(0,0,0,.25);pointer-events:none}
#tip .t{font-weight:600;margin-bottom:4px}#tip table{border-collapse:collapse}#tip td{padding:1px 6px 1px 0}
#tip .d{border-radius:3px;padding:0 4px;color:#111827;font-weight:600}
"""

_JS = """
(function(){
  const data = JSON.parse(document.getElementById('mirage-data').textContent);
  const entries = Array.from(document.querySelectorAll('nav .entry'));
  const panels = Array.from(document.querySelectorAll('section.item'));
  const colors = %COLORS%;
  function show(k){
    panels.forEach(p => { p.hidden = p.dataset.item !== String(k); });
    entries.forEach(e => e.classList.toggle('active', e.dataset.item === String(k)));
  }
  entries.forEach(e => e.addEventListener('click', ev => {
    ev.preventDefault(); show(e.dataset.item); history.replaceState(null, '', '#item-' + e.dataset.item);
  }));
  const search = document.getElementById('search');
  const count = document.getElementById('count');
  function filter(){
    const words = search.value.toLowerCase().split(/\\s+/).filter(Boolean);
    let n = 0;
    entries.forEach(e => {
      const ok = words.every(w => e.dataset.search.includes(w));
      e.parentElement.hidden = !ok; n += ok;
    });
    count.textContent = n + ' of ' + entries.length + ' item(s)';
  }
  search.addEventListener('input', filter); filter();
  const tip = document.getElementById('tip');
  panels.forEach(p => {
    const spans = data[Number(p.dataset.item) - 1].spans;
    p.querySelectorAll('mark.mirage-span').forEach((m, i) => {
      m.dataset.title = m.title; m.removeAttribute('title');
      m.addEventListener('mouseenter', () => {
        const s = spans[i]; if (!s) return;
        tip.replaceChildren();
        const head = document.createElement('div'); head.className = 't';
        head.textContent = '\\u201c' + s.text + '\\u201d \\u2192 documents ' + s.docs.map(d => '[' + d + ']').join('');
        tip.appendChild(head);
        const table = document.createElement('table');
        s.cues.forEach(c => {
          const tr = table.insertRow();
          const d = tr.insertCell(); const b = document.createElement('span'); b.className = 'd';
          b.style.background = colors[(c.doc - 1) % colors.length]; b.textContent = '[' + c.doc + ']'; d.appendChild(b);
          tr.insertCell().textContent = c.token; tr.insertCell().textContent = c.score.toPrecision(3);
        });
        tip.appendChild(table);
        const r = m.getBoundingClientRect();
        tip.style.left = Math.min(r.left, window.innerWidth - 370) + 'px';
        tip.style.top = (r.bottom + 6) + 'px'; tip.hidden = false;
      });
      m.addEventListener('mouseleave', () => { tip.hidden = true; });
    });
  });
  const start = /^#item-(\\d+)$/.exec(location.hash);
  show(start && panels[Number(start[1]) - 1] ? start[1] : (panels.length ? 1 : 0));
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><style>{css}</style></head>
<body><header><h1>{title}</h1><p id="summary">{summary}</p></header>
<div class="layout"><nav><input id="search" type="search" placeholder="Search questions, answers, titles…"
aria-label="search items"><div id="count"></div><ul id="entries">{entries}</ul></nav>
<main>{panels}</main></div><div id="tip" hidden></div>
<script type="application/json" id="mirage-data">{data}</script>
<script>{js}</script></body></html>
"""
