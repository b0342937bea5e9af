"""XOR-AttriQA's data: the match and per-passage releases read in English or native text, one row by
:func:`parse_xor_row` (the one parser of these rows; the bias study's :mod:`mirage.bias.items` uses it too) and a file
by :func:`load_xor_attriqa` (its NLI baselines' predictions beside it, bad rows returned, the per-passage release's
rows of one answer grouped on request): :class:`XorItem`, one annotated answer with its passages and labels, as the
model stage (:mod:`mirage.scoring.xor_attriqa`) scores it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mirage.data.inputs import InputError
from mirage.runs.experiment import TextView
from mirage.runs.store import content_key
from mirage.scoring.rows import BadRow, RawRow, RowError, parse_rows, read_rows, require

__all__ = [
    "NLI_FILES",
    "STRAY_MARK",
    "TextView",
    "XorData",
    "XorItem",
    "XorRow",
    "clean_query",
    "concat_data",
    "group_by_answer",
    "load_xor_attriqa",
    "parse_row",
    "parse_xor_row",
    "split_marked_passages",
]



#: How the published NLI baselines' prediction files are named next to a split ``<stem>.jsonl``.
NLI_FILES = {"nli_mt": "{stem}.nli-translate-en.json", "nli_orig": "{stem}.nli-in-lang.json"}


_MARKER = re.compile(r"<(\d+)>")


#: The stray mark some translated queries end with, left by the translation join: `` [b]``, or `` [`` where the
#: join cut it short.
STRAY_MARK = re.compile(r"\s*\[(?:b\])?\s*$")


@dataclass(frozen=True)
class XorItem:
    """One annotated answer with its passages (in the chosen text view) and per-passage human labels.

    ``idxs[i]`` indexes passage i in the per-passage release and the NLI prediction files; ``nli[name][i]`` is that
    baseline's prediction for passage i (absent when the file is not there); ``per_passage``: read from rows of the
    per-passage release (one row, or one answer's rows grouped by :func:`group_by_answer`).
    """

    file: str
    line: int
    lang: str
    question: str
    passages: tuple[str, ...]
    answer: str
    labels: tuple[bool, ...]
    idxs: tuple[int, ...]
    nli: dict[str, tuple[bool, ...]] = field(default_factory=dict)
    per_passage: bool = False

    def rag_item(self) -> dict[str, Any]:
        """The item as the pipeline takes it: one document per passage, untitled, the answer force-decoded."""
        return {"question": self.question, "docs": [{"title": "", "text": p} for p in self.passages],
                "output": self.answer}

    @property
    def key(self) -> str:
        """What the model sees, hashed: items with the same inputs share one model run."""
        return content_key({"question": self.question, "passages": list(self.passages), "answer": self.answer})


@dataclass(frozen=True)
class XorData:
    """The valid items of one or more files, and the rows that were skipped."""

    items: tuple[XorItem, ...]
    bad_rows: tuple[BadRow, ...]


def clean_query(query: str, *, cut_marks: bool = True) -> str:
    """``query`` without its stray trailing mark (:data:`STRAY_MARK`), stripped. ``cut_marks=False`` keeps a mark cut
    short (`` [``) and removes only a whole `` [b]``: how the scorer reads queries, as its stored scores were computed
    (the bias study removes both)."""
    found = STRAY_MARK.search(query)
    if found and (cut_marks or "]" in found.group()):
        query = query[: found.start()]
    return query.strip()


def split_marked_passages(text: str, n_expected: int) -> list[str]:
    """Split ``<0> first <1> second …`` into passages; the markers must be exactly 0 … n_expected-1, in order."""
    parts = _MARKER.split(text)
    numbers = [int(n) for n in parts[1::2]]
    if numbers != list(range(n_expected)):
        shown = " ".join(f"<{n}>" for n in numbers[:12]) or "none"
        raise RowError(f"passage markers ({shown}) do not match the {n_expected} 'ais' labels")
    if parts[0].strip():
        raise RowError("'passage_in_language' has text before the first marker <0>")
    passages = [p.strip() for p in parts[2::2]]
    empty = [i for i, p in enumerate(passages) if not p]
    if empty:
        raise RowError(f"passage(s) {empty} of 'passage_in_language' are empty")
    return passages


def _labels(value: Any, name: str) -> tuple[bool, ...]:
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, (bool, int)) and v in (0, 1) for v in values):
        raise RowError(f"field {name!r} must hold booleans (or 0/1)")
    return tuple(bool(v) for v in values)


@dataclass(frozen=True)
class XorRow:
    """One XOR-AttriQA row read in one text view (see :func:`parse_xor_row`).

    ``passages[i]`` has the human label ``labels[i]`` (supports the answer or not) and the index ``idxs[i]`` in the
    per-passage release and the NLI prediction files; ``lang``: the row's ``query_language``, if it has one;
    ``per_passage``: a row of the per-passage release (one passage, ``idxs`` its position in the file).
    """

    question: str
    passages: tuple[str, ...]
    answer: str
    labels: tuple[bool, ...]
    idxs: tuple[int, ...]
    lang: str | None
    per_passage: bool


def parse_xor_row(data: Any, *, text: TextView = "en", index: int = 0, cut_marks: bool = True) -> XorRow:
    """The one reading of an XOR-AttriQA row, for the scorer and the bias study: a row of the match release
    (``ais`` a list, one label per passage) or of the per-passage release (``ais`` a boolean; ``index`` is the row's
    0-based position in its file), in the English (``en``) or annotated (``native``) text. RowError naming the field
    when the row cannot be used.

    Passages, question and answer are stripped; the question loses its stray mark (:func:`clean_query`, with
    ``cut_marks``); labels are booleans (0/1 accepted).
    """
    row = data
    if not isinstance(row, dict):
        raise RowError(f"row must be a JSON object, got {type(row).__name__}")
    if "ais" not in row or row["ais"] is None:
        raise RowError("field 'ais' is missing")
    labels = _labels(row["ais"], "ais")
    per_passage = not isinstance(row["ais"], list)
    if not labels:
        raise RowError("field 'ais' is empty")
    if per_passage:
        idxs: tuple[int, ...] = (index,)
        if text == "en":
            question = require(row, "query_translated_en", str)
            passages = [require(row, "passage_en", str).strip()]
            answer = require(row, "prediction_translated_en", str)
        else:
            question = require(row, "query", str)
            # the text the RAG system read: a passage retrieved in English is English (the release's
            # passage_in_language translates it to the query's language); this is the match release's text
            native = "passage_en" if row.get("passage_retrieved_language") == "en" else "passage_in_language"
            passages = [require(row, native, str).strip()]
            answer = require(row, "prediction", str)
    else:
        idxs_raw = require(row, "idxs", list)
        if len(idxs_raw) != len(labels) or not all(isinstance(i, int) and i >= 0 for i in idxs_raw):
            raise RowError(f"field 'idxs' must hold {len(labels)} non-negative integers, one per 'ais' label")
        idxs = tuple(idxs_raw)
        if text == "en":
            question = require(row, "query_en", str)
            passages = require(row, "split_passages_en", list)
            if len(passages) != len(labels):
                raise RowError(f"'split_passages_en' has {len(passages)} passages for {len(labels)} 'ais' labels")
            if not all(isinstance(p, str) and p.strip() for p in passages):
                raise RowError("'split_passages_en' must hold non-empty strings")
            passages = [p.strip() for p in passages]
            answer = require(row, "prediction_en", str)
        else:
            question = require(row, "query", str)
            passages = split_marked_passages(require(row, "passage_in_language", str), len(labels))
            answer = require(row, "prediction", str)
    question = clean_query(question, cut_marks=cut_marks)
    if not question:
        raise RowError("the query is empty")
    if not answer.strip():
        raise RowError("the answer is empty")
    lang = row.get("query_language")
    return XorRow(question=question, passages=tuple(passages), answer=answer.strip(), labels=labels, idxs=idxs,
                  lang=str(lang) if lang else None, per_passage=per_passage)


def parse_row(raw: RawRow, *, file: str, split: str, text: TextView) -> XorItem:
    """The scorer's item of one row (:func:`parse_xor_row`, keeping a cut-short stray mark; the language defaults to
    the split's name)."""
    row = parse_xor_row(raw.data, text=text, index=raw.index, cut_marks=False)
    return XorItem(file=file, line=raw.line, lang=row.lang or split, question=row.question, passages=row.passages,
                   answer=row.answer, labels=row.labels, idxs=row.idxs, per_passage=row.per_passage)


def _load_nli(path: Path) -> list[int] | None:
    """An NLI baseline's predictions: a flat JSON list of 0/1 (``true``/``false`` too), one per passage of the split,
    indexed by the rows' ``idxs``; None when the file is not there. InputError naming the file and the problem."""
    import json

    from mirage.data.inputs import json_kind, json_repr
    from mirage.data.readers import read_text

    if not path.exists():
        return None
    expected = "an NLI prediction file is a flat JSON list of 0/1, one per passage, indexed by the rows' 'idxs'"
    try:
        values = json.loads(read_text(path, what="JSON list of 0/1 NLI predictions"))
    except json.JSONDecodeError as err:
        raise InputError(f"{path} is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}); "
                         f"{expected}.") from None
    if not isinstance(values, list):
        raise InputError(f"{path} holds a JSON {json_kind(values)}, not a list; {expected}.")
    wrong = [i for i, v in enumerate(values) if not (isinstance(v, int) and v in (0, 1))]  # bool is an int
    if wrong:
        shown = ", ".join(f"[{i}] = {json_repr(values[i])}" for i in wrong[:3])
        raise InputError(f"{path}: {len(wrong)} of its {len(values)} predictions are not 0 or 1 ({shown}"
                         f"{', …' if len(wrong) > 3 else ''}); {expected}.")
    return [int(v) for v in values]


def _check_nli_length(path: Path, values: list[int], items: Sequence[XorItem]) -> None:
    """InputError when a row's ``idxs`` point past the end of an NLI prediction file (one of another split)."""
    beyond = next((item for item in items if any(i >= len(values) for i in item.idxs)), None)
    if beyond is not None:
        need = max(i for item in items for i in item.idxs) + 1
        raise InputError(f"{path} has {len(values)} predictions, but {beyond.file} line {beyond.line} uses passage "
                         f"index {max(beyond.idxs)} ('idxs'); the file needs one 0/1 prediction per passage of the "
                         f"split, at least {need}. Is it the file of another split?")


def group_by_answer(items: Iterable[XorItem]) -> list[XorItem]:
    """Rebuild answers from the per-passage release: its items (``per_passage``) of one file that share their
    language, question and answer become one item with all their passages, in file order (the release lists passages
    by retrieval rank: the match release's order for 311 of its 332 rows), each keeping its label and index. Other
    items are kept as they are. The group takes the place of its first row."""
    groups: dict[Any, list[XorItem]] = {}
    for n, item in enumerate(items):
        key = (item.file, item.lang, item.question, item.answer) if item.per_passage else n
        groups.setdefault(key, []).append(item)
    return [replace(group[0], passages=tuple(p for g in group for p in g.passages),
                    labels=tuple(x for g in group for x in g.labels), idxs=tuple(i for g in group for i in g.idxs))
            for group in groups.values()]


def load_xor_attriqa(path: str | Path, *, text: TextView = "en", nli_dir: str | Path | None = None,
                     limit: int | None = None, group: bool = False, skip: int = 0) -> XorData:
    """Read an XOR-AttriQA file (match or per-passage release); bad rows are returned, not raised.

    The NLI baselines' predictions are read from ``<stem>.nli-translate-en.json`` and ``<stem>.nli-in-lang.json``
    beside the file (or in ``nli_dir``). ``limit`` keeps the first N rows after the first ``skip``, bad ones included
    in both. With ``group``, the
    per-passage release's rows of one answer become one item with all its passages (:func:`group_by_answer`), as a
    match row holds them; without it each such row is an item with its single passage.
    """
    if text not in ("en", "native"):
        raise InputError(f"text={text!r} is not valid; choose 'en' (English translations) or 'native'.")
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path} does not exist; give an XOR-AttriQA JSONL file.")
    split = path.name.split(".")[0]
    folder = Path(nli_dir) if nli_dir else path.parent
    nli_paths = {name: folder / pattern.format(stem=split) for name, pattern in NLI_FILES.items()}
    nli_files = {name: values for name, nli_path in nli_paths.items()
                 if (values := _load_nli(nli_path)) is not None}

    def parse(raw: RawRow) -> XorItem:
        return parse_row(raw, file=str(path), split=split, text=text)

    items, bad = parse_rows(read_rows(path, what="XOR-AttriQA JSONL file"), parse, file=str(path), limit=limit,
                            skip=skip)
    if group:
        items = group_by_answer(items)
    for name, values in nli_files.items():
        _check_nli_length(nli_paths[name], values, items)
    items = [replace(item, nli={name: tuple(bool(values[i]) for i in item.idxs) for name, values in nli_files.items()})
             for item in items]
    return XorData(items=tuple(items), bad_rows=tuple(bad))


def concat_data(parts: Iterable[XorData]) -> XorData:
    parts = list(parts)
    return XorData(items=tuple(i for p in parts for i in p.items), bad_rows=tuple(b for p in parts for b in p.bad_rows))
