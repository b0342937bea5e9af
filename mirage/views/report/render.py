"""The report's HTML, from the Jinja2 templates in ``mirage/templates`` (autoescape on): one result as a
self-contained fragment (:func:`result_to_html`, :func:`display` in a notebook), the highlighted answer and the CTI
chart alone, and the whole page of one run or two side by side (:func:`report_html`), written from results files
a window of items at a time (:func:`write_report`). :func:`template_env` is the environment every HTML view
shares."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from mirage.attribution.results import AttributionResult
from mirage.data.inputs import InputError
from mirage.runs.store import write_atomic
from mirage.views.rendering import NO_SELF_CITATION
from mirage.views.report.items import (
    PALETTE,
    ItemView,
    answer_views,
    cti_bars,
    doc_color,
    item_view,
    pair_runs,
    row_flags,
    run_summary,
    sentence_shares,
    span_cues,
)
from mirage.views.report.layout import doc_regions
from mirage.views.report.reading import read_result_window

__all__ = [
    "MAX_ITEMS",
    "RUN_NAMES",
    "ResultHTML",
    "cti_chart",
    "display",
    "highlighted_answer",
    "report_html",
    "result_to_html",
    "template_asset",
    "template_env",
    "window_note",
    "write_report",
]


#: Names of the runs in a comparison.
RUN_NAMES = ("A", "B")


#: Items of a results file one page shows unless told (``mirage view --max-items``; ``--offset`` pages on): each
#: item adds about 5 kB to the page, and building it holds every result shown.
MAX_ITEMS = 500


@cache
def template_env() -> Environment:
    """The Jinja environment of ``mirage/templates`` (autoescape on, undefined names an error), shared by every
    HTML view (this report, :mod:`mirage.views.bias_report`, :mod:`mirage.views.scoring_report`)."""
    env = Environment(loader=PackageLoader("mirage", "templates"), autoescape=True, trim_blocks=True,
                      lstrip_blocks=True, undefined=StrictUndefined)
    env.globals.update(doc_color=doc_color, sentence_shares=sentence_shares, row_flags=row_flags,
                       no_self_citation=NO_SELF_CITATION)
    return env


@cache
def template_asset(name: str) -> Markup:
    """A CSS or JS file of ``mirage/templates``, inserted verbatim (it holds no user text)."""
    env = template_env()
    assert env.loader is not None  # template_env's PackageLoader
    return Markup(env.loader.get_source(env, name)[0])


def _parts() -> Any:
    return template_env().get_template("parts.html.j2").module


def _json_for_script(data: Any) -> Markup:
    text = json.dumps(data, ensure_ascii=False)
    return Markup(text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e"))


def highlighted_answer(res: AttributionResult) -> str:
    """The answer as HTML with attributed spans coloured by (first) document and labelled with their ids; each
    span's ``title`` lists its strongest context tokens with their shares."""
    return str(_parts().answer_text(answer_views(res, doc_regions(res))))


def cti_chart(res: AttributionResult, *, width: int = 760, height: int = 90) -> str:
    """An inline SVG bar chart of the CTI score of each answer token, the selection threshold dashed.

    Context-sensitive tokens are coloured by their first cited document (grey if they cite none).
    """
    if not res.tokens:
        return '<p class="none">no answer tokens</p>'
    return str(_parts().chart(cti_bars(res, width, height)))


def result_to_html(res: AttributionResult) -> str:
    """One result as a self-contained HTML fragment with its own scoped ``<style>`` (no script): question, the
    highlighted answer, citations per sentence, and the documents with the saliency heat (all text escaped)."""
    item = item_view([res], 1)
    return template_env().get_template("result.html.j2").render(item=item, run=item.runs[0],
                                                                css=template_asset("mirage.css"))


class ResultHTML:
    """A result rendered for a notebook: Jupyter shows :meth:`_repr_html_`; ``str()`` is the HTML fragment."""

    def __init__(self, res: AttributionResult) -> None:
        self.html = result_to_html(res)

    def _repr_html_(self) -> str:
        return self.html

    def __str__(self) -> str:
        return self.html


def display(res: AttributionResult) -> ResultHTML:
    """The result as a notebook shows it: end a cell with ``display(res)`` (or pass it to IPython's ``display``)."""
    return ResultHTML(res)


def _script_data(items: Sequence[ItemView]) -> dict[str, Any]:
    out = []
    for item in items:
        runs: list[dict[str, Any] | None] = []
        for run in item.runs:
            if run is None:
                runs.append(None)
                continue
            regions = doc_regions(run.res)
            runs.append({"spans": [{"docs": s.docs, "text": s.text, "tokens": s.tokens,
                                    "cues": span_cues(run.res, s, regions=regions)} for s in run.res.spans]})
        out.append({"runs": runs})
    return {"colors": PALETTE, "items": out}


def report_html(results: Sequence[AttributionResult], *, title: str = "mirage report",
                other: Sequence[AttributionResult] | None = None, labels: Sequence[str] = RUN_NAMES,
                preface: Markup | str = "", first: int = 1, notes: Sequence[str] = ()) -> str:
    """The whole self-contained page for ``results``; with ``other``, the two runs side by side, items matched by
    content (``labels`` name the runs, e.g. their files). ``preface`` goes between the header and the items (a run's
    summary, :mod:`mirage.views.scoring_report`): a Markup is inserted as HTML, a plain string as text. ``first``:
    the number of the first item (a later page of a file); ``notes``: lines after the summary (what the page
    leaves out)."""
    if other is None:
        items = [item_view([r], k) for k, r in enumerate(results, start=first)]
        summary = [run_summary(results)]
        run_labels: list[str] = []
    else:
        items = [item_view(pair, k) for k, pair in enumerate(pair_runs(results, other), start=first)]
        run_labels = [f"{name}: {label}" for name, label in zip(RUN_NAMES, labels)]
        both = sum(i.only is None for i in items)
        summary = [f"{name} — {run_summary(run)}" for name, run in zip(run_labels, (results, other))]
        summary.append(f"{both} item(s) in both runs, {sum(i.only == 0 for i in items)} only in A, "
                       f"{sum(i.only == 1 for i in items)} only in B · "
                       f"{sum(i.n_runs_differ > 0 for i in items if i.only is None)} of {both} with citations that "
                       "differ between the runs")
    summary.extend(notes)
    return template_env().get_template("report.html.j2").render(
        title=title, summary=summary, items=items, labels=run_labels, compare=other is not None, preface=preface,
        data=_json_for_script(_script_data(items)), css=template_asset("mirage.css") + template_asset("page.css"),
        js=template_asset("report.js"))


def _label(paths: Sequence[Path]) -> list[str]:
    """Short names telling the files apart: their names, or their paths when the names are the same."""
    names = [p.name for p in paths]
    return names if len(set(names)) == len(names) else [str(p) for p in paths]


def window_note(names: Sequence[str], totals: Sequence[int], offset: int, max_items: int) -> str | None:
    """What a page of the items at positions ``offset`` to ``offset + max_items`` of files holding ``totals``
    results leaves out, and how to see it (None when it leaves out nothing)."""
    most = max(totals, default=0)
    if offset == 0 and most <= max_items:
        return None
    held = " and ".join(f"{name} holds {n}" for name, n in zip(names, totals))
    note = f"This page shows items {offset + 1}–{min(offset + max_items, most)} of each file ({held})"
    after = [f"--offset {offset + max_items} shows the next {max_items}"] if offset + max_items < most else []
    before = [f"--offset {max(0, offset - max_items)} the ones before"] if offset else []
    return f"{note}: {', '.join(after + before)} (mirage view … --max-items N sets how many a page holds)."


def write_report(results_path: str | Path | Sequence[str | Path], output: str | Path, *,
                 title: str | None = None, max_items: int = MAX_ITEMS, offset: int = 0) -> Path:
    """Read one results JSONL (or two, to compare) and write the report page; returns the output path. The page
    holds the items at positions ``offset`` to ``offset + max_items`` of each file (:func:`read_result_window`:
    the others are counted, never held); when a file holds more, the page says so and how to see them
    (:func:`window_note`), and so does a warning. An ``offset`` past every file's results is an InputError."""
    paths = [Path(results_path)] if isinstance(results_path, (str, Path)) else [Path(p) for p in results_path]
    if not 1 <= len(paths) <= 2:
        raise InputError(f"mirage view takes one results file, or two to compare; got {len(paths)}.")
    if max_items < 1 or offset < 0:
        raise InputError(f"mirage view --max-items {max_items} --offset {offset}: give --max-items 1 or more and "
                         "--offset 0 or more.")
    windows = [read_result_window(p, offset=offset, limit=max_items) for p in paths]
    runs, totals = [w[0] for w in windows], [w[1] for w in windows]
    if offset and offset >= max(totals):
        raise InputError(f"--offset {offset} is past the results of {' and '.join(map(str, paths))} "
                         f"({' and '.join(map(str, totals))}); give an offset below {max(totals)}.")
    names = _label(paths)
    note = window_note(names, totals, offset, max_items)
    if note is not None:
        warnings.warn(f"{output}: {note}", stacklevel=2)
    html = report_html(runs[0], title=title or f"mirage report: {' vs '.join(names)}",
                       other=runs[1] if len(runs) == 2 else None, labels=names, first=offset + 1,
                       notes=[note] if note else [])
    return write_atomic(output, html)
