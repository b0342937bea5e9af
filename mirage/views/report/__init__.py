"""Attribution results as HTML, all of it: one result as a self-contained fragment (:func:`result_to_html`, or
:func:`display` in a notebook) and a browsable static report of one run or two side by side (:func:`report_html`,
what ``mirage view RESULTS.jsonl [OTHER.jsonl] -o report.html`` writes).

The report is one self-contained page (inline CSS and JS, no network): a searchable, filterable list of items; per
item the question, the answer with spans coloured by document (hovering a span shows its top context tokens and
outlines them in the documents), an SVG chart of CTI scores over the answer tokens, both citation sets per sentence
(and, comparing two runs, both runs' sets) with disagreements marked, and the documents with a per-token heat of the
saliency behind the answer, prompt scaffolding (``Document [1](Title: …``) greyed. Any table's visible rows download
as CSV.

Saliencies are shown as shares (a context token's saliency over its answer token's total), never as raw gradient
norms, which differ by orders of magnitude between answer tokens.

Markup comes from the Jinja2 templates in ``mirage/templates`` with autoescape on, so every text of a result is
escaped; the little data the page's script needs is embedded as JSON in a ``<script type="application/json">`` block
with ``<``, ``>`` and ``&`` written as ``\\u`` escapes, and is inserted with ``textContent``.

The package's modules, by role (each imports only those before it): ``reading`` (a results file as
AttributionResult objects, each record checked), ``layout`` (the documents' places in the prompt and the saliency
over them), ``items`` (the report's data model: what the templates lay out) and ``render`` (the HTML). Its names are
its API: import them from ``mirage.views.report``.
"""

from mirage.views.report.items import (
    CUES_PER_DOC,
    CUES_PER_SPAN,
    HEAT_RGB,
    PALETTE,
    SCAFFOLD_RGB,
    Bar,
    Chart,
    Cue,
    DocView,
    ItemView,
    Row,
    RunView,
    Segment,
    SpanView,
    align_sentences,
    doc_color,
    document_segments,
    item_view,
    overview,
    pair_runs,
    row_flags,
    run_view,
    same_citations,
    sentence_shares,
    span_cues,
)
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
from mirage.views.report.reading import (
    read_result_objects,
    read_result_window,
    record_problem,
    result_from_record,
)
from mirage.views.report.render import (
    MAX_ITEMS,
    RUN_NAMES,
    ResultHTML,
    cti_chart,
    display,
    highlighted_answer,
    report_html,
    result_to_html,
    template_asset,
    template_env,
    window_note,
    write_report,
)

__all__ = [
    "CUES_PER_DOC",
    "CUES_PER_SPAN",
    "HEAT_RGB",
    "MAX_ITEMS",
    "PALETTE",
    "RUN_NAMES",
    "SCAFFOLD_RGB",
    "Bar",
    "Chart",
    "Cue",
    "DocRegion",
    "DocView",
    "Heat",
    "ItemView",
    "ResultHTML",
    "Row",
    "RunView",
    "Segment",
    "SpanView",
    "align_sentences",
    "context_mode",
    "cti_chart",
    "cue_share",
    "display",
    "doc_color",
    "doc_regions",
    "document_segments",
    "heat_of",
    "highlighted_answer",
    "is_scaffolding",
    "item_view",
    "overview",
    "pair_runs",
    "read_result_objects",
    "read_result_window",
    "record_problem",
    "report_html",
    "result_from_record",
    "result_to_html",
    "row_flags",
    "run_view",
    "same_citations",
    "sentence_shares",
    "span_cues",
    "stores_shares",
    "template_asset",
    "template_env",
    "window_note",
    "write_report",
]
