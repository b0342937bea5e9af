"""A bias-study run folder (``mirage bias … -o DIR``) as one self-contained HTML page: what ``mirage view DIR``
writes for such a folder.

Per query, the study's modes side by side: a grid of the documents (relevant ones marked) with the label each carries
in each mode (``BiasRecord.labels``) and whether the self-citations and mirage's citations cite it there; then each
mode's answer, both citation sets per sentence, their precision and recall against the relevant documents, and the
model's explanation when the run asked for one. A filter keeps the queries whose self-citations, or whose mirage
citations, moved between modes (the set of documents cited anywhere in the answer, :func:`mirage.bias.metrics.
cited_docs`, is not the same in every mode: what CAS measures, query by query). The study's tables come first:
``DIR/tables.md`` as the run wrote it, or, without it, :func:`mirage.bias.tables.render_markdown` of
``DIR/results.json``, rendered as HTML tables, with ``DIR/cab.png`` embedded.

Questions and document texts come from ``DIR/items.jsonl``; a folder without it (the shipped
``benchmarks/results/bias_smollm2_hai``) has them recovered from the stored prompts through the mode templates in
``DIR/prompts/``, the document texts from a prompt without labels (the vanilla mode's) when there is one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markupsafe import Markup

from mirage.attribution.citations import CitationSource, parse_answer
from mirage.attribution.prompts import PromptTemplate, load_template
from mirage.bias.metrics import QueryMetrics, cited_docs, query_metrics
from mirage.bias.records import BiasRecord
from mirage.bias.results import BiasStudyResult
from mirage.bias.tables import NO_CAB, has_cab, render_markdown
from mirage.config import ConfigError, PromptConfig
from mirage.data.inputs import InputError, make_item, short_repr
from mirage.data.readers import parse_json, read_text
from mirage.runs.files import RESULTS_FILE, figure_uri, read_json, read_run_records, run_file
from mirage.views.report import doc_color, record_problem, template_asset, template_env

__all__ = ["GENERATIONS", "bias_report_html", "bias_run_view", "markdown_html", "query_views", "read_bias_records",
           "read_items_file", "read_templates", "run_modes", "sentence_cites", "text_from_prompt", "texts_from_prompts"]

#: The files of a bias run folder that the view reads (each may be gzipped; and :data:`RESULTS_FILE`), see
#: :mod:`mirage.bias.study`.
GENERATIONS = "generations.jsonl"
ITEMS = "items.jsonl"
TABLES = "tables.md"
CAB_FIGURE = "cab.png"
PROMPTS = "prompts"


# --- view models --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryText:
    """A query's question and documents (title, text) as the model saw them; ``source`` says where they were read:
    ``items`` (``items.jsonl``) or ``prompt`` (recovered from a stored prompt)."""

    question: str
    docs: tuple[tuple[str, str], ...]
    source: str


@dataclass(frozen=True)
class SentenceCites:
    """One answer sentence and the documents each citation set cites in it."""

    text: str
    self_citations: tuple[int, ...]
    mirage_citations: tuple[int, ...]

    @property
    def differ(self) -> bool:
        return sorted(self.self_citations) != sorted(self.mirage_citations)


@dataclass(frozen=True)
class ModeAnswer:
    """A query's generation in one mode: the answer as generated (with its ``[n]`` marks), its sentences with both
    citation sets, the documents each set cites anywhere in the answer, and their quality against the relevant
    documents."""

    mode: str
    answer: str
    sentences: tuple[SentenceCites, ...]
    self_docs: tuple[int, ...]
    mirage_docs: tuple[int, ...]
    self_quality: QueryMetrics
    mirage_quality: QueryMetrics
    explanation: str | None
    error: str | None

    def cited(self, source: CitationSource) -> tuple[int, ...]:
        return self.self_docs if source == "self" else self.mirage_docs


@dataclass(frozen=True)
class DocInMode:
    """A document in one mode: its label there (None: none shown) and whether each citation set cites it."""

    label: str | None
    side: str | None  # "first" / "second": which side of the metadata the label belongs to
    self_cited: bool
    mirage_cited: bool


@dataclass(frozen=True)
class QueryDoc:
    """A document of a query: its title and text (None when the folder does not hold them), whether it is
    relevant, and its label and citations in each mode of the run (None where the query was not run in a mode)."""

    doc: int
    title: str
    text: str | None
    relevant: bool
    color: str
    modes: tuple[DocInMode | None, ...]


@dataclass(frozen=True)
class QueryView:
    """One query of the study, its modes in the run's order (None where the query was not run in a mode)."""

    number: int
    item_id: str
    question: str | None
    gold: tuple[str, ...]
    docs: tuple[QueryDoc, ...]
    answers: tuple[ModeAnswer | None, ...]
    haystack: str

    def moved(self, source: CitationSource) -> bool:
        """Whether the documents ``source`` cites differ between two modes of the query."""
        return len({frozenset(a.cited(source)) for a in self.answers if a is not None}) > 1

    @property
    def self_moved(self) -> bool:
        return self.moved("self")

    @property
    def mirage_moved(self) -> bool:
        return self.moved("mirage")


@dataclass(frozen=True)
class BiasRunView:
    """What the page shows of a run: its modes, its queries, and the study's tables (HTML)."""

    title: str
    summary: tuple[str, ...]
    modes: tuple[str, ...]
    queries: tuple[QueryView, ...]
    tables: Markup
    cab_png: str | None  # a data: URI
    texts_note: str
    #: why there is no CAB figure, when the study has no CAB (:data:`mirage.bias.tables.NO_CAB`)
    cab_note: str | None = None


# --- reading the folder -------------------------------------------------------------------------------------------


def read_bias_records(folder: str | Path) -> list[BiasRecord]:
    """The generations of a run folder (``generations.jsonl`` or ``.jsonl.gz``), one BiasRecord per item and mode."""
    path = run_file(folder, GENERATIONS)
    if path is None:
        raise InputError(f"{folder} has no {GENERATIONS} (nor {GENERATIONS}.gz); give the -o folder of `mirage bias`.")
    out = []
    for k, row in enumerate(read_run_records(path), start=1):
        problem = record_problem(row, BiasRecord) or _generation_problem(row)
        if problem is not None:
            raise InputError(f"{path} record {k} (key {short_repr(row.get('key'))}): "
                             f"field {short_repr(problem[0], 80)} {problem[1]}; give the folder `mirage bias` wrote.")
        try:
            out.append(BiasRecord.from_dict(row))
        except TypeError as err:
            raise InputError(f"{path} record {k} (key {short_repr(row.get('key'))}) is not a bias-study generation "
                             f"({short_repr(str(err), 200)}); give the folder `mirage bias` wrote.") from None
    if not out:
        raise InputError(f"{path} holds no generation; run `mirage bias` into {folder} first.")
    return out


#: The most documents a query of a run may have (a bias study shows each query a handful).
MAX_DOCS = 10_000


def _generation_problem(row: dict[str, Any]) -> tuple[str, str] | None:
    """Where a well-typed generation record points outside itself: a document count out of range, a relevant or
    cited document that the query does not have."""
    n_docs = row["n_docs"]
    if not 0 <= n_docs <= MAX_DOCS:
        return "n_docs", f"is {short_repr(n_docs)}; a query has 0 to {MAX_DOCS} documents"
    for name in ("relevant", "self_citations", "mirage_citations"):
        ids = row.get(name) or []
        flat = [d for sentence in ids for d in sentence] if name != "relevant" else ids
        if any(not 1 <= d <= n_docs for d in flat):
            return name, f"names a document outside 1..{n_docs}"
    return None


def read_items_file(path: str | Path) -> dict[str, QueryText]:
    """Questions and documents by item id from ``items.jsonl`` (:func:`mirage.bias.items.write_items`'s rows, read
    as plain rows: :mod:`mirage.bias.items` imports the model stack, which a page does not need)."""
    out = {}
    for line in read_text(path).split("\n"):  # not splitlines: a JSON string may hold U+2028 and the like raw
        if not line.strip():
            continue
        row = _json_row(line, path)
        try:
            item = make_item(row, item=short_repr(row.get("id")) if isinstance(row, dict) else None)
        except InputError as err:
            raise InputError(f"{path}: {err} items.jsonl holds the rows `mirage bias` wrote ({{id, question, docs: "
                             "[{title, text}], …}).") from None
        out[str(row.get("id"))] = QueryText(question=item.question, source="items",
                                            docs=tuple((d.title, d.text) for d in item.docs))
    return out


def _json_row(line: str, path: str | Path) -> Any:
    try:
        return parse_json(line)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: a line is not valid JSON ({err}).") from None


def read_templates(folder: str | Path) -> list[PromptTemplate]:
    """The mode templates a run wrote into ``DIR/prompts/`` (none when the folder lacks them)."""
    out = []
    for path in sorted((Path(folder) / PROMPTS).glob("*.yaml")):
        try:
            out.append(load_template(PromptConfig(path=str(path))))
        except (ConfigError, OSError, ValueError):
            continue  # not a prompt template: the texts are then recovered from the others, or not at all
    return out


def _pattern(text: str, slots: Mapping[str, str]) -> str:
    """A regular expression of a template: each ``{KEY}`` of ``slots`` replaced by its pattern, the rest literal
    (as :func:`mirage.attribution.prompts.format_prompt` fills templates: only known keys are placeholders)."""
    parts = re.split(r"(\{[A-Z]+\})", text)
    return "".join(slots[p[1:-1]] if p[1:-1] in slots and p.startswith("{") else re.escape(p) for p in parts)


def text_from_prompt(prompt: str, template: PromptTemplate, n_docs: int) -> QueryText | None:
    """The question and the ``n_docs`` documents (title, text) of a prompt built from ``template`` (wrapped in a
    chat template or not); None when the prompt is not one of that template's. A document whose text itself spells
    the next document's entry (``\nDocument [2]: …``) makes the split ambiguous: the shortest first document wins."""
    try:
        return _text_from_prompt(prompt, template, n_docs)
    except re.error:  # a template that repeats a placeholder: its prompts cannot be read back this way
        return None


def _text_from_prompt(prompt: str, template: PromptTemplate, n_docs: int) -> QueryText | None:
    found = re.search(_pattern(template.template, {"INST": re.escape(template.instruction), "Q": "(?P<q>.*?)",
                                                   "D": "(?P<d>.*)"}), prompt, re.DOTALL)
    if found is None:
        return None
    entries = []
    for i in range(1, n_docs + 1):
        forms = [_pattern(template.doc_template, {"ID": re.escape(str(i)), "T": f"(?P<t{i}>.*?)",
                                                  "P": f"(?P<p{i}>.*?)"})]
        if template.untitled_doc_template:
            forms.append(_pattern(template.untitled_doc_template, {"ID": re.escape(str(i)), "P": f"(?P<u{i}>.*?)"}))
        entries.append("(?:" + "|".join(forms) + ")")
    block = re.fullmatch("".join(entries), found["d"], re.DOTALL)
    if block is None:
        return None
    groups = block.groupdict()

    def value(*names: str) -> str:  # the group that matched: the titled or the untitled form of a document
        return next((groups[n] for n in names if groups.get(n) is not None), "")

    def text(i: int) -> str:  # a template's sentence marks are its own, not the document's
        found, mark = value(f"p{i}", f"u{i}"), template.mark_of(i)
        return found if mark is None else found.replace(mark, "")

    docs = tuple((value(f"t{i}"), text(i)) for i in range(1, n_docs + 1))
    return QueryText(question=found["q"], docs=docs, source="prompt")


def texts_from_prompts(records: Sequence[BiasRecord], templates: Sequence[PromptTemplate]) -> dict[str, QueryText]:
    """Per item id, its question and documents recovered from a stored prompt: from a record that shows no labels
    (the vanilla mode) when there is one, so that the texts carry no label marks."""
    by_item: dict[str, list[BiasRecord]] = {}
    for r in records:
        by_item.setdefault(r.item_id, []).append(r)
    out = {}
    for item_id, recs in by_item.items():
        for r in sorted(recs, key=lambda r: sum(label is not None for label in r.labels)):
            text = next((t for t in (text_from_prompt(r.prompt, tp, r.n_docs) for tp in templates) if t), None)
            if text is not None:
                out[item_id] = text
                break
    return out


# --- building the view --------------------------------------------------------------------------------------------


def sentence_cites(record: BiasRecord) -> tuple[SentenceCites, ...]:
    """The answer's sentences (split as the study split them, :func:`mirage.attribution.citations.parse_answer`) with
    both citation sets; sentences are numbered instead when the split does not give the record's count."""
    parsed = parse_answer(record.raw_answer, record.n_docs)
    n = max(len(record.self_citations), len(record.mirage_citations))
    texts = [parsed.text[a:b].strip() for a, b in parsed.sentences]
    if len(texts) != n:
        texts = [f"sentence {k + 1}" for k in range(n)]

    def at(rows: list[list[int]], k: int) -> tuple[int, ...]:
        return tuple(rows[k]) if k < len(rows) else ()

    return tuple(SentenceCites(text=texts[k], self_citations=at(record.self_citations, k),
                               mirage_citations=at(record.mirage_citations, k)) for k in range(n))


def mode_answer(record: BiasRecord) -> ModeAnswer:
    """One generation as shown."""
    return ModeAnswer(mode=record.mode, answer=record.raw_answer, sentences=sentence_cites(record),
                      self_docs=tuple(cited_docs(record, "self")), mirage_docs=tuple(cited_docs(record, "mirage")),
                      self_quality=query_metrics(record, "self"), mirage_quality=query_metrics(record, "mirage"),
                      explanation=record.explanation, error=record.error)


def label_sides(metadata: Mapping[str, Any]) -> dict[str, str]:
    """Each label of the study's metadata (``BiasStudyResult.metadata``) and its side, ``first`` or ``second``."""
    sides = {label: "second" for label in metadata.get("second_labels") or [metadata.get("second")]}
    sides.update({label: "first" for label in metadata.get("first_labels") or [metadata.get("first")]})
    return {k: v for k, v in sides.items() if k is not None}


def query_views(records: Sequence[BiasRecord], modes: Sequence[str], *, texts: Mapping[str, QueryText] | None = None,
                sides: Mapping[str, str] | None = None) -> list[QueryView]:
    """The queries of ``records`` in the order they first appear, each with its generation in every mode of
    ``modes`` (None where it has none); ``texts`` gives questions and documents by item id, ``sides`` each label's
    side."""
    by_item: dict[str, dict[str, BiasRecord]] = {}
    for r in records:
        by_item.setdefault(r.item_id, {})[r.mode] = r
    views = []
    for number, (item_id, in_mode) in enumerate(by_item.items(), start=1):
        recs = [in_mode.get(m) for m in modes]
        first = next(r for r in in_mode.values())
        answers = tuple(mode_answer(r) if r is not None else None for r in recs)
        text = (texts or {}).get(item_id)
        docs = []
        for d in range(1, first.n_docs + 1):
            title, body = text.docs[d - 1] if text is not None and d <= len(text.docs) else ("", None)
            cells = tuple(None if r is None or a is None else DocInMode(
                label=(label := r.labels[d - 1] if d <= len(r.labels) else None),
                side=(sides or {}).get(label) if label else None,
                self_cited=d in a.self_docs, mirage_cited=d in a.mirage_docs) for r, a in zip(recs, answers))
            docs.append(QueryDoc(doc=d, title=title, text=body, relevant=d in first.relevant, color=doc_color(d),
                                 modes=cells))
        question = text.question if text is not None else None
        haystack = " ".join([item_id, question or ""] + [a.answer for a in answers if a]
                            + [t for t, _ in (text.docs if text else ())])
        views.append(QueryView(number=number, item_id=item_id, question=question, gold=tuple(first.answers),
                               docs=tuple(docs), answers=answers, haystack=haystack.lower()))
    return views


def run_modes(records: Sequence[BiasRecord], configured: Sequence[str] = ()) -> tuple[str, ...]:
    """The modes of the run: those of its configuration that have generations, in that order, then any other mode
    of the records in order of appearance."""
    present = list(dict.fromkeys(r.mode for r in records))
    return tuple([m for m in configured if m in present] + [m for m in present if m not in configured])


def markdown_html(text: str) -> Markup:
    """Markdown (the study's tables) as HTML for an offline page: HTML inside the text is escaped, not passed
    through; an image becomes its alt text and a link its text (the address dropped), so that nothing in the page
    loads or points to anything outside it, whatever the run folder's text holds."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(text)
    for token in tokens:
        if token.children:
            token.children = [_offline(child) for child in token.children
                              if child.type not in ("link_open", "link_close")]
    return Markup(md.renderer.render(tokens, md.options, {}))


def _offline(token: Any) -> Any:
    """An inline markdown token that loads nothing: an image becomes its alt text."""
    if token.type != "image":
        return token
    from markdown_it.token import Token

    alt = "".join(child.content for child in token.children or ()) or token.content
    return Token("text", "", 0, content=f"[image: {alt}]" if alt else "[image]")


def bias_run_view(folder: str | Path, *, title: str | None = None) -> BiasRunView:
    """Read a bias run folder into what its page shows."""
    folder = Path(folder)
    records = read_bias_records(folder)
    results_path = run_file(folder, RESULTS_FILE)
    if results_path is None:
        raise InputError(f"{folder} has no {RESULTS_FILE}; the run has not finished "
                         "(re-run `mirage bias` with the same -o to write it).")
    data = read_json(results_path)
    problem = record_problem(data, BiasStudyResult)
    if problem is not None:
        raise InputError(f"{results_path}: field {short_repr(problem[0], 80)} {problem[1]}; give the folder "
                         "`mirage bias` wrote.")
    try:
        result = BiasStudyResult.from_dict(data)
    except (KeyError, TypeError, AttributeError) as err:
        raise InputError(f"{results_path} is not a bias-study result ({type(err).__name__}: {err}); give the "
                         "folder `mirage bias` wrote.") from None
    modes = run_modes(records, result.config.get("modes") or ())
    items_path = run_file(folder, ITEMS)
    if items_path is not None:
        texts = read_items_file(items_path)
        note = f"Questions and documents from {items_path.name}."
    else:
        texts = texts_from_prompts(records, read_templates(folder))
        note = (f"No {ITEMS} in the folder: questions and documents are read from the stored prompts "
                f"({len(texts)} of {len({r.item_id for r in records})} queries).")
    queries = query_views(records, modes, texts=texts, sides=label_sides(result.metadata))
    tables_path = run_file(folder, TABLES)
    tables = read_text(tables_path) if tables_path is not None else render_markdown(result)
    md = result.metadata
    summary = (f"{result.model} · {md.get('type')}: {md.get('first')} vs {md.get('second')} · data {result.data}",
               (f"{len(queries)} queries × {len(modes)} modes ({', '.join(modes)}) · "
                f"{sum(q.self_moved for q in queries)} with self-citations that move between modes, "
                f"{sum(q.mirage_moved for q in queries)} with mirage citations that move"))
    cab = has_cab(result)  # without one, a cab.png left in the folder draws nothing of this study
    return BiasRunView(title=title or f"mirage bias study: {folder.name}", summary=summary, modes=modes,
                       queries=tuple(queries), tables=markdown_html(tables), texts_note=note,
                       cab_png=figure_uri(folder / CAB_FIGURE, folder) if cab else None,
                       cab_note=None if cab else NO_CAB)


# --- rendering ----------------------------------------------------------------------------------------------------


def bias_report_html(view: BiasRunView) -> str:
    """The self-contained page of a bias run (inline CSS and JS, every text escaped)."""
    return template_env().get_template("bias.html.j2").render(
        view=view, css=template_asset("mirage.css") + template_asset("page.css") + template_asset("runs.css"),
        js=template_asset("bias.js"))

