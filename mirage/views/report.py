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
"""

from __future__ import annotations

import base64
import dataclasses
import difflib
import json
import types
import typing
import warnings
from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields, replace
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from mirage.attribution.prompts import PromptTemplate, load_template, mark_points, mark_sentences
from mirage.attribution.results import AnswerSpan, AnswerToken, AttributionResult, ContextCue, SentenceAttribution
from mirage.config import ConfigError, PromptConfig
from mirage.data.inputs import InputError, RawRow, json_kind, json_repr, read_jsonl, short_repr
from mirage.runs.store import item_keys, write_atomic
from mirage.views.rendering import NO_SELF_CITATION

#: Context cues listed per answer span when hovering it.
CUES_PER_SPAN = 6
#: Selected context spans listed under each document.
CUES_PER_DOC = 12
#: Background colours of documents 1, 2, … (cycled).
PALETTE = ["#fde68a", "#a7f3d0", "#bfdbfe", "#fbcfe8", "#ddd6fe", "#fed7aa", "#c7d2fe", "#bbf7d0", "#fecaca", "#e9d5ff"]
#: Heat colours (RGB) of document content and of prompt scaffolding.
HEAT_RGB = (234, 88, 12)
SCAFFOLD_RGB = (100, 116, 139)
#: Names of the runs in a comparison.
RUN_NAMES = ("A", "B")
#: Items of a results file one page shows unless told (``mirage view --max-items``; ``--offset`` pages on): each
#: item adds about 5 kB to the page, and building it holds every result shown.
MAX_ITEMS = 500


def doc_color(doc: int) -> str:
    """Background colour of a 1-based document id."""
    return PALETTE[(doc - 1) % len(PALETTE)]


# --- reading ----------------------------------------------------------------------------------------------------


def read_result_objects(path: str | Path) -> list[AttributionResult]:
    """The results of a ``mirage attribute`` JSONL file as AttributionResult objects (extra keys such as
    ``key``/``index`` are ignored); :func:`mirage.read_results` gives them as one pandas table.

    A torn last line (a record cut off without its newline, as a stopped run leaves it) is skipped with a warning;
    any other line that is not JSON, not an object, or not an attribution result is an InputError naming the file
    and line; so is a file that is missing, a directory, or not UTF-8.
    """
    return read_result_window(path)[0]


def read_result_window(path: str | Path, *, offset: int = 0, limit: int | None = None
                       ) -> tuple[list[AttributionResult], int]:
    """The results at positions ``offset`` to ``offset + limit`` of a results file (all from ``offset`` when
    ``limit`` is None), and how many results the file holds. The file is streamed and only the lines in the window
    are parsed (:func:`~mirage.data.inputs.read_jsonl`'s ``parse``; the others are counted), so time and memory
    follow the window, not the file; a line in it that is not a result is refused (a torn last line skipped) as by
    :func:`read_result_objects`."""
    path = Path(path)

    def wanted(index: int) -> bool:
        return index >= offset and (limit is None or index < offset + limit)

    out = []
    total = 0
    for row in read_jsonl(path, what="JSONL written by `mirage attribute`", parse=wanted):
        if isinstance(row, RawRow):
            if row.parsed and wanted(row.index):
                out.append(_result(row.data, path, row.line))
            total += 1
        elif row.unterminated:  # the last line, without its newline: a record cut off mid-write
            warnings.warn(f"{path}: skipped line {row.line}, a record cut off mid-write (the run was stopped); "
                          "re-run `mirage attribute` to finish that item.", stacklevel=3)
        else:
            raise InputError(f"{path} line {row.line} is {row.error}; "
                             + (_INPUT_FILE.format(path=path) if total == 0 and _looks_like_items(path) else
                                "a results file has one JSON object per line, as `mirage attribute` writes it."))
    return out, total


#: What ``mirage view`` says of a file of items to attribute, not of results.
_INPUT_FILE = ("this is an input file of items (question, docs), not results: attribute it first (`mirage attribute "
               "{path} -o OUT.jsonl`), then view OUT.jsonl.")


def _looks_like_items(path: Path) -> bool:
    """Whether the file opens as a JSON list of items (``[{"question": …, "docs": …}``): its first 64 KiB only."""
    with open(path, encoding="utf-8", errors="replace") as f:
        head = f.read(1 << 16)
    return head.lstrip().startswith("[") and '"question"' in head and ('"docs"' in head or '"ctxs"' in head)


#: What a result record must hold (the fields of AttributionResult without a default).
_REQUIRED = tuple(f.name for f in fields(AttributionResult) if f.default is MISSING and f.default_factory is MISSING)


def _result(data: Any, path: Path, lineno: int) -> AttributionResult:
    if not isinstance(data, dict):
        raise InputError(f"{path} line {lineno} is a JSON {json_kind(data)}, not an object; a results file has one "
                         "attribution result object per line, as `mirage attribute` writes it.")
    missing = [name for name in _REQUIRED if name not in data]
    if missing and "question" in data and ("docs" in data or "ctxs" in data) and "sentences" not in data:
        raise InputError(f"{path} line {lineno} is an item to attribute; " + _INPUT_FILE.format(path=path))
    if missing:
        errors_file = " (it looks like the .errors.jsonl of a run: view the results file beside it)" if (
            "error" in data and "key" in data) else ""
        raise InputError(f"{path} line {lineno} is not a mirage attribution result: it lacks "
                         f"{', '.join(repr(m) for m in missing[:4])}{', …' if len(missing) > 4 else ''}"
                         f"{errors_file}; give the JSONL written by `mirage attribute`.")
    return result_from_record(data, f"{path} line {lineno}")


def result_from_record(data: Any, where: str) -> AttributionResult:
    """An AttributionResult from a stored record (a results file's line, a scoring run's answer), checked field by
    field against the result's types and the places its fields point to (token indices, character spans, the
    saliency matrix's size), so that a page can show it; InputError naming ``where`` and the field otherwise (a
    record edited by hand: nulls, missing keys, wrong types, bad base64)."""
    if not isinstance(data, dict):
        raise InputError(f"{where} is a JSON {json_kind(data)}, not an attribution result object.")
    problem = record_problem(data, AttributionResult, "") or _reference_problem(data)
    if problem is not None:
        field_name, message = problem
        raise InputError(f"{where}: field {short_repr(field_name, 120)} {message}; give the record as "
                         "`mirage attribute` wrote it.")
    try:
        return AttributionResult.from_dict(data)
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise InputError(f"{where} is not a valid mirage attribution result ({type(err).__name__}: "
                         f"{short_repr(str(err), 200)}); give the record as `mirage attribute` wrote it.") from None


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _type_problem(value: Any, tp: Any, at: str) -> tuple[str, str] | None:
    """Where ``value`` (at field path ``at``) first differs from type ``tp``, and how; None when it conforms."""
    if tp is Any:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        problems = [_type_problem(value, option, at) for option in options if option is not type(None)]
        return None if any(p is None for p in problems) else problems[0]
    if dataclasses.is_dataclass(tp):
        return record_problem(value, tp, at)
    if origin is list:
        if not isinstance(value, list):
            return at, f"must be a list, got {json_kind(value)}"
        (item,) = typing.get_args(tp) or (Any,)
        for k, element in enumerate(value):
            found = _type_problem(element, item, f"{at}[{k}]")
            if found:
                return found
        return None
    if origin is dict:
        if not isinstance(value, dict):
            return at, f"must be an object, got {json_kind(value)}"
        _key, item = typing.get_args(tp) or (Any, Any)
        for key, element in value.items():
            found = _type_problem(element, item, f"{at}.{key}")
            if found:
                return found
        return None
    expected = {str: ("a string", lambda v: isinstance(v, str)),
                bool: ("true or false", lambda v: isinstance(v, bool)),
                int: ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
                float: ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))}.get(tp)
    if expected is not None and not expected[1](value):
        shown = "" if value is None or isinstance(value, (dict, list)) else f" {json_repr(value)}"
        return at, f"must be {expected[0]}, got {json_kind(value)}{shown}"
    return None


def record_problem(data: Any, cls: type, at: str = "") -> tuple[str, str] | None:
    """Where a stored record of dataclass ``cls`` (at field path ``at``; the top level: "") first goes wrong, as
    (field, what is wrong): not an object, a required field missing, a field of the wrong type (checked against the
    dataclass's annotations), a key a nested record does not know; None when it conforms."""
    if not isinstance(data, dict):
        return at or cls.__name__, f"must be an object, got {json_kind(data)}"
    hints = _hints(cls)
    if at:  # a nested record is built from all its keys: one it does not know is an error (the top level's are ignored)
        unknown = next((key for key in data if key not in hints), None)
        if unknown is not None:
            return f"{at}.{unknown}", f"is not a field of {cls.__name__}"
    for f in fields(cls):
        name = f"{at}.{f.name}" if at else f.name
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                return name, "is missing"
            continue
        found = _type_problem(data[f.name], hints[f.name], name)
        if found:
            return found
    return None


def _reference_problem(data: dict[str, Any]) -> tuple[str, str] | None:
    """Where a well-typed record points outside itself: a span outside its text, an answer token, document or
    sentence that does not exist, a document without its text, a saliency matrix whose data is not its size."""
    prompt, answer = len(data["prompt"]), len(data["answer"])
    n_docs = len(data["docs"])
    indices = {t["index"] for t in data["tokens"]}
    for k, d in enumerate(data["docs"]):
        if "text" not in d:
            return f"docs[{k}].text", "is missing"
    if not isinstance(data["config"].get("aggregation") or {}, dict):
        return "config.aggregation", f"must be an object, got {json_kind(data['config']['aggregation'])}"

    def span(at: str, start: int, end: int, size: int, of: str) -> tuple[str, str] | None:
        return None if 0 <= start <= end <= size else (at, f"spans {start}:{end}, outside the {of} ({size} chars)")

    checks = []
    for k, t in enumerate(data["tokens"]):
        checks.append(span(f"tokens[{k}]", t["start"], t["end"], answer, "answer"))
        checks += [span(f"tokens[{k}].top_context[{j}]", c["start"], c["end"], prompt, "prompt")
                   for j, c in enumerate(t.get("top_context") or [])]
    for k, s in enumerate(data["spans"]):
        checks.append(span(f"spans[{k}]", s["start"], s["end"], answer, "answer"))
        if not s["docs"]:
            checks.append((f"spans[{k}].docs", "is empty; an attributed span names its documents"))
        missing = [i for i in s["tokens"] if i not in indices]
        if missing:
            checks.append((f"spans[{k}].tokens", f"names answer token {missing[0]}, which the record lacks"))
    for k, s in enumerate(data["context_spans"]):
        checks.append(span(f"context_spans[{k}]", s["start"], s["end"], prompt, "prompt"))
    for k, s in enumerate(data["sentences"]):
        checks.append(span(f"sentences[{k}]", s["start"], s["end"], answer, "answer"))
    bad_docs = [d for d in data.get("truncated_docs") or [] if not 1 <= d <= n_docs]
    if bad_docs:
        checks.append(("truncated_docs", f"names document {bad_docs[0]} of {n_docs}"))
    if data.get("saliency") is not None:
        checks.append(_saliency_problem(data["saliency"], prompt))
    return next((c for c in checks if c is not None), None)


def _saliency_problem(sal: dict[str, Any], prompt: int) -> tuple[str, str] | None:
    rows, cols = len(sal["answer_tokens"]), len(sal["context_positions"])
    for name in ("context_docs", "context_offsets") + (("content",) if sal.get("content") is not None else ()):
        if len(sal[name]) != cols:
            return f"saliency.{name}", f"has {len(sal[name])} entries for {cols} context tokens"
    for j, pair in enumerate(sal["context_offsets"]):
        if len(pair) != 2 or not 0 <= pair[0] <= pair[1] <= prompt:
            return f"saliency.context_offsets[{j}]", f"must be a span [start, end] in the prompt, got {json_repr(pair)}"
    try:
        size = len(base64.b64decode(sal["data"], validate=True))
    except ValueError:
        return "saliency.data", "is not base64"
    if size != 2 * rows * cols:
        return "saliency.data", f"holds {size // 2} values for a {rows} x {cols} matrix"
    return None


# --- saliency shares and the documents' layout in the prompt ------------------------------------------------------


def stores_shares(res: AttributionResult) -> bool:
    """Whether the result stores each cue's share (``ContextCue.share``; results written before it do not)."""
    return any(getattr(c, "share", None) is not None for t in res.tokens for c in t.top_context)


def cue_share(token: AnswerToken, cue: ContextCue) -> float:
    """A context cue's saliency as a share of its answer token's total saliency: ``cue.share`` when the result
    stores it; otherwise, for older results, its score over the summed positive scores of the token's stored top
    context tokens (all that is left of the total)."""
    stored = getattr(cue, "share", None)
    if stored is not None:
        return float(stored)
    total = sum(max(0.0, c.score) for c in token.top_context)
    return max(0.0, cue.score) / total if total > 0 else 0.0


def context_mode(res: AttributionResult) -> str:
    """Which context tokens the result was attributed to: ``"content"`` (the documents' titles and texts only) or
    ``"all"`` (the whole documents block, scaffolding included; results older than the option)."""
    mode = (res.config.get("aggregation") or {}).get("context")
    return mode if isinstance(mode, str) else "all"


@dataclass(frozen=True)
class DocRegion:
    """Where 1-based document ``doc``'s entry lies in ``res.prompt`` (character offsets): ``start:end`` from its
    scaffolding (``Document [1](Title: ``) to the next entry, ``title`` and ``text`` the spans of its title (None
    when absent) and of its text as inserted (with the template's sentence marks, ``selfcitation_marked``; cut short
    when the document was truncated), ``kept`` how many characters of the stored text the prompt holds."""

    doc: int
    start: int
    end: int
    title: tuple[int, int] | None
    text: tuple[int, int]
    kept: int

    def is_content(self, start: int, end: int) -> bool:
        """Whether the characters ``start:end`` overlap the document's title or text (else: prompt scaffolding)."""
        return any(a < end and start < b for a, b in [self.text, *([self.title] if self.title else [])])


def _located(prompt: str, text: str, lo: int, hi: int) -> tuple[int, int] | None:
    """Where ``text``, or else its longest prefix (a document cut to fit the window), first lies in ``prompt[lo:hi]``."""
    at = prompt.find(text, lo, hi)
    if at >= 0:
        return at, at + len(text)
    if not text or prompt.find(text[:1], lo, hi) < 0:
        return None
    good, bad = 1, len(text)  # prompt holds text[:good] and not text[:bad]
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if prompt.find(text[:mid], lo, hi) >= 0 else (good, mid)
    at = prompt.find(text[:good], lo, hi)
    return at, at + good


def _inserted(prompt: str, text: str, mark: str | None, lo: int, hi: int) -> tuple[tuple[int, int], int] | None:
    """Where a document's ``text`` lies in ``prompt[lo:hi]`` as the prompt holds it, and how many of its characters
    that is: whole, or its kept prefix (a document cut to fit the window); with ``mark`` after each of its sentences
    when the template writes one (:func:`mark_sentences`: a kept prefix is marked again, its last sentence cut)."""
    if mark is None:
        found = _located(prompt, text, lo, hi)
        return None if found is None else (found, found[1] - found[0])
    marked = mark_sentences(text, mark)
    found = _located(prompt, marked, lo, hi)
    if found is None or found[1] - found[0] == len(marked):
        return None if found is None else (found, len(text))
    at, held = found[0], found[1] - found[0]
    kept = held - sum(min(len(mark), max(0, held - p - k * len(mark))) for k, p in enumerate(mark_points(text)))
    for n in range(min(len(text), kept + len(mark)), max(0, kept - len(mark)), -1):  # the cut, marked again
        cut = text[:n].rstrip()
        again = mark_sentences(cut, mark)
        if prompt.startswith(again, at, hi):
            return (at, at + len(again)), len(cut)
    return found, kept


def _template_of(res: AttributionResult) -> PromptTemplate | None:
    """The prompt template ``res`` was built with (``config.prompt``); None when it cannot be loaded any more (a
    template file gone, a config edited by hand)."""
    prompt = res.config.get("prompt") if isinstance(res.config, dict) else None
    try:
        return load_template(PromptConfig(**prompt)) if isinstance(prompt, dict) else None
    except (ConfigError, TypeError):
        return None


def doc_regions(res: AttributionResult) -> list[DocRegion] | None:
    """Each document's entry in the prompt, found from the stored texts: the documents block ``res.context`` in the
    prompt, then each document's text as the prompt template inserted it (with its sentence marks), or its kept
    prefix, in order and its title before it. None when the prompt does not hold them (a result edited by hand)."""
    base = res.prompt.find(res.context) if res.context else -1
    if base < 0:
        return None
    template = _template_of(res)
    stop, cursor, found = base + len(res.context), base, []
    for i, d in enumerate(res.docs, start=1):
        inserted = _inserted(res.prompt, d.get("text", ""), template.mark_of(i) if template else None, cursor, stop)
        if inserted is None:
            return None
        text, kept = inserted
        start = cursor
        while start < text[0] and res.prompt[start].isspace():
            start += 1
        title = d.get("title") or ""
        at = res.prompt.find(title, start, text[0]) if title else -1
        found.append((start, (at, at + len(title)) if at >= 0 else None, text, kept))
        cursor = text[1]
    return [DocRegion(doc=k + 1, start=start, end=found[k + 1][0] if k + 1 < len(found) else stop, title=title,
                      text=text, kept=kept) for k, (start, title, text, kept) in enumerate(found)]


def is_scaffolding(regions: list[DocRegion] | None, doc: int, start: int, end: int) -> bool:
    """Whether prompt characters ``start:end`` of document ``doc`` are scaffolding, not its title or text."""
    if not regions or not 1 <= doc <= len(regions):
        return False
    return not regions[doc - 1].is_content(start, end)


@dataclass(frozen=True)
class Heat:
    """Saliency on a stretch of the prompt: the largest share of an answer token's saliency (0–1), the answer
    tokens it drove, and whether the CCI selector kept it (a stored ``ContextSpan``)."""

    start: int
    end: int
    share: float
    tokens: tuple[int, ...]
    kept: bool = False


def _shares_of_matrix(res: AttributionResult) -> list[Heat]:
    """Per context token of the stored saliency matrix (``[n_selected, n_context]``), each answer token's share."""
    sal = res.saliency
    matrix = sal.to_numpy()
    considered = [bool(c) for c in sal.content] if (sal.content is not None and context_mode(res) == "content") \
        else [True] * len(sal.context_positions)
    out = []
    for k, answer_index in enumerate(sal.answer_tokens):
        row = [max(0.0, float(v)) if ok else 0.0 for v, ok in zip(matrix[k], considered)]
        total = sum(row)
        if total <= 0:
            continue
        out.extend(Heat(start=a, end=b, share=v / total, tokens=(answer_index,))
                   for v, (a, b) in zip(row, sal.context_offsets) if v > 0 and b > a)
    return out


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """``start:end`` without the whitespace at either end (unchanged when it is all whitespace: a newline token)."""
    a, b = start, end
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return (a, b) if b > a else (start, end)


def heat_of(res: AttributionResult) -> list[Heat]:
    """Every stretch of the prompt that carries saliency: each context token of the stored saliency matrix when
    the result has one, otherwise each answer token's top context tokens; plus the context spans the selector kept."""
    tokens = {t.index: t for t in res.tokens}
    if getattr(res, "saliency", None) is not None:
        found = _shares_of_matrix(res)
    else:
        found = [Heat(start=c.start, end=c.end, share=cue_share(t, c), tokens=(t.index,))
                 for t in res.tokens for c in t.top_context if c.end > c.start]
    out = [replace(h, start=a, end=b) for h in found for a, b in [_trimmed(res.prompt, h.start, h.end)]]
    for s in res.context_spans:
        inside = [h.share for h in out if h.start < s.end and s.start < h.end]
        if inside:
            share = max(inside)
        else:  # kept, yet below every listed cue of its answer tokens: the weakest listed share bounds its own
            share = max((min(cue_share(tokens[i], c) for c in tokens[i].top_context) for i in s.answer_tokens
                         if i in tokens and tokens[i].top_context), default=0.0)
        out.append(Heat(start=s.start, end=s.end, share=share, tokens=tuple(s.answer_tokens), kept=True))
    return out


# --- view models: what the templates lay out ----------------------------------------------------------------------


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


def _answer(res: AttributionResult, regions: list[DocRegion] | None) -> list[SpanView]:
    out, pos = [], 0
    for span in res.spans:
        out.append(SpanView(text=res.answer[pos : span.start]))
        title = "; ".join(f"[{c['doc']}] {c['token']} {c['share']:.0%}{' (scaffolding)' if c['scaffold'] else ''}"
                          for c in span_cues(res, span, regions=regions))
        out.append(SpanView(text=span.text, docs=tuple(span.docs), color=doc_color(span.docs[0]), title=title))
        pos = span.end
    out.append(SpanView(text=res.answer[pos:]))
    return [s for s in out if s.text]


def _chart(res: AttributionResult, width: int = 760, height: int = 90) -> Chart:
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
    return RunView(res=res, answer=_answer(res, regions), chart=_chart(res), docs=_documents(res, regions, tokens),
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
        rows.append(Row(text=(sa or sb).text, cells=cells,
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


def overview(results: Sequence[AttributionResult]) -> dict[str, float | int]:
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


def _summary(results: Sequence[AttributionResult]) -> str:
    ov = overview(results)

    def rate(key: str) -> str:
        return "n/a" if ov[key] is None else f"{ov[key]:.0%}"

    given = f" ({ov['given']} of given answers, without self-citations, left out)" if ov["given"] else ""
    return (f"{ov['items']} item(s), {ov['sentences']} sentence(s) · no self-citation {rate('no_self_citation')} · "
            f"no mirage citation {ov['no_mirage_citation']:.0%} · same citations {rate('agreement')}{given}")


# --- rendering ----------------------------------------------------------------------------------------------------


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
    return Markup(env.loader.get_source(env, name)[0])


def _parts() -> Any:
    return template_env().get_template("parts.html.j2").module


def _json_for_script(data: Any) -> Markup:
    text = json.dumps(data, ensure_ascii=False)
    return Markup(text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e"))


def highlighted_answer(res: AttributionResult) -> str:
    """The answer as HTML with attributed spans coloured by (first) document and labelled with their ids; each
    span's ``title`` lists its strongest context tokens with their shares."""
    return str(_parts().answer_text(_answer(res, doc_regions(res))))


def cti_chart(res: AttributionResult, *, width: int = 760, height: int = 90) -> str:
    """An inline SVG bar chart of the CTI score of each answer token, the selection threshold dashed.

    Context-sensitive tokens are coloured by their first cited document (grey if they cite none).
    """
    if not res.tokens:
        return '<p class="none">no answer tokens</p>'
    return str(_parts().chart(_chart(res, width, height)))


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
        runs = []
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
        summary = [_summary(results)]
        run_labels: list[str] = []
    else:
        items = [item_view(pair, k) for k, pair in enumerate(pair_runs(results, other), start=first)]
        run_labels = [f"{name}: {label}" for name, label in zip(RUN_NAMES, labels)]
        both = sum(i.only is None for i in items)
        summary = [f"{name} — {_summary(run)}" for name, run in zip(run_labels, (results, other))]
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
