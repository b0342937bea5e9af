"""Input items (question, documents, optional answer): validation with errors that name the item and field, and the
one way an error message shows a user's value (:func:`short_repr`, :func:`json_repr`, :func:`json_kind`). Reading the
files they come in is :mod:`mirage.data.readers`'."""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DOCS_FIELDS",
    "TEXT_FIELDS",
    "Document",
    "InputError",
    "NothingToScore",
    "RAGItem",
    "json_kind",
    "json_repr",
    "make_document",
    "make_item",
    "short_repr",
]


class InputError(ValueError):
    """Bad input. ``item`` and ``field`` locate it; the message says how to fix it."""

    def __init__(self, message: str, *, item: int | str | None = None, field: str | None = None) -> None:
        where = []
        if item is not None:
            where.append(f"item {item}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.item = item
        self.field = field


class NothingToScore(InputError):
    """A run that stopped before scoring because its input left nothing to score, after writing what it found (the
    self-match counts): the command still records the run folder and writes its page."""


@dataclass(frozen=True)
class Document:
    """A retrieved document."""

    title: str
    text: str


@dataclass(frozen=True)
class RAGItem:
    """A question with its retrieved documents and, optionally, a given answer to attribute."""

    question: str
    docs: tuple[Document, ...]
    output: str | None = None
    id: str | None = None


#: A UTF-16 surrogate code point: JSON's ``\\ud800`` escapes decode to one when unpaired (a pair becomes one character).
_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_unicode(value: str, *, item: int | str | None, field: str) -> None:
    """InputError naming the field when ``value`` holds a lone surrogate (text that cannot be encoded as UTF-8)."""
    found = _SURROGATE.search(value)
    if found:
        escape = ascii(found.group())[1:-1]
        raise InputError(f"contains an unpaired surrogate ({escape}) at character {found.start()}; the text is not "
                         f"valid Unicode (remove the {escape} escape or give its pair).", item=item, field=field)


def _require_text(value: Any, *, item: int | str | None, field: str, allow_empty: bool = False) -> str:
    if value is None:
        raise InputError("is missing; give a string.", item=item, field=field)
    if not isinstance(value, str):
        raise InputError(f"must be a string, got {type(value).__name__}.", item=item, field=field)
    _check_unicode(value, item=item, field=field)
    if not allow_empty and not value.strip():
        raise InputError("is empty; give non-blank text.", item=item, field=field)
    return value


#: Names of a document's text (Pyserini/BEIR corpora say ``contents``, some QA sets ``passage``) and of an item's
#: documents (DPR and retriever outputs say ``ctxs``), in the order they are looked for. One item or document may use
#: only one name of each.
TEXT_FIELDS = ("text", "contents", "passage")


DOCS_FIELDS = ("docs", "ctxs")


def _one_of(raw: Mapping[str, Any], names: Sequence[str], *, item: int | str | None, prefix: str = "") -> str | None:
    """Which of ``names`` ``raw`` gives (a null value counts as absent); InputError naming them when it gives
    several."""
    given = [name for name in names if raw.get(name) is not None]
    if len(given) > 1:
        shown = " and ".join(repr(f"{prefix}{name}") for name in given)
        raise InputError(f"has both {shown}; give only one (they mean the same).", item=item,
                         field=f"{prefix}{given[0]}".rstrip("."))
    return given[0] if given else None


def make_document(raw: Any, *, item: int | str | None = None, index: int = 0, field: str = "docs") -> Document:
    """Validate one document: a mapping with its text (``text``, or ``contents`` / ``passage``; required) and a
    ``title`` (may be empty or absent), a plain string (the text, no title), or a Document. ``field`` is the name of
    the item's documents list, for error messages."""
    if isinstance(raw, Document):
        raw = {"title": raw.title, "text": raw.text}
    field = f"{field}[{index}]"
    if isinstance(raw, str):
        text = _require_text(raw, item=item, field=field)
        return Document(title="", text=text.strip())
    if not isinstance(raw, Mapping):
        raise InputError(f'must be an object {{"title", "text"}} or a string, got {type(raw).__name__}.', item=item,
                         field=field)
    key = _one_of(raw, TEXT_FIELDS, item=item, prefix=f"{field}.")
    if key is None:
        raise InputError('is missing; give the document\'s text as "text" (or "contents" / "passage").', item=item,
                         field=f"{field}.text")
    text = _require_text(raw.get(key), item=item, field=f"{field}.{key}")
    title = raw.get("title")
    if title is None:  # absent or null: no title
        title = ""
    elif not isinstance(title, str):  # 0, false and [] too: only a missing title means "no title"
        raise InputError(f"must be a string, got {type(title).__name__} ({json_repr(title)}); leave it out or give "
                         'null (or "") for no title.', item=item, field=f"{field}.title")
    _check_unicode(title, item=item, field=f"{field}.title")
    return Document(title=title.strip(), text=text.strip())


def _doc_rows(docs_raw: Mapping[str, Any], *, item: int | str | None, field: str) -> list[Any]:
    """Documents given column-wise, as a ``datasets`` ``Sequence`` feature of dicts stores them
    (``{"title": [...], "text": [...]}``), as one dict per document; InputError when they are not all lists of one
    length (one document given as an object instead of a list of them included)."""
    columns = {key: value for key, value in docs_raw.items() if value is not None}
    lengths = {key: len(value) for key, value in columns.items() if _is_list(value)}
    if not columns or len(lengths) < len(columns):
        scalars = [repr(key) for key in columns if key not in lengths]
        what = (f"an object whose {', '.join(scalars)} {'is not a list' if len(scalars) == 1 else 'are not lists'} "
                "(one document?)" if columns else "an empty object")
        raise InputError(f'must be a list of documents, got {what}; give a list of {{"title", "text"}} objects (or '
                         'of strings), or lists of one value per document under "title" and "text".', item=item,
                         field=field)
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{key!r} has {n}" for key, n in lengths.items())
        raise InputError(f"is given column by column, but the columns differ in length ({shown}); give one value per "
                         "document in each.", item=item, field=field)
    n = next(iter(lengths.values()))
    return [{key: columns[key][i] for key in columns} for i in range(n)]


def _is_list(value: Any) -> bool:
    """A list-like value (a list, a tuple, any non-text Sequence, a numpy array), not a string."""
    if isinstance(value, (str, bytes, Mapping)):
        return False
    return isinstance(value, Sequence) or (hasattr(value, "__len__") and hasattr(value, "__getitem__")
                                           and hasattr(value, "tolist"))


def make_item(raw: Any, *, item: int | str | None = None) -> RAGItem:
    """Validate a raw item ``{"question", "docs": [{"title", "text"}], "output"?}`` into a RAGItem.

    The item may be any mapping (a ``datasets`` row, ``LazyRow`` included). Its documents may be called ``docs`` or
    ``ctxs``, and given as a list of objects, of plain strings (texts without titles), or column by column
    (``{"title": [...], "text": [...]}``, as a ``datasets`` ``Sequence`` feature stores them); a document's text may
    be called ``text``, ``contents`` or ``passage``. Every text (question, titles, document texts, output, a string
    id) must be valid Unicode: a lone surrogate (an unpaired ``\\ud800`` escape in the JSON) is an InputError naming
    the field.
    """
    if isinstance(raw, RAGItem):
        raw = {"question": raw.question, "docs": list(raw.docs), "output": raw.output, "id": raw.id}
    if not isinstance(raw, Mapping):
        raise InputError(f'must be an object {{"question", "docs", "output"?}}, got {type(raw).__name__}.', item=item)
    question = _require_text(raw.get("question"), item=item, field="question").strip()
    docs_field = _one_of(raw, DOCS_FIELDS, item=item)
    if docs_field is None:
        raise InputError('is missing; give a list of {"title", "text"} objects (or of strings) as "docs" (or "ctxs").',
                         item=item, field="docs")
    docs_raw = raw[docs_field]
    if isinstance(docs_raw, Mapping):
        docs_raw = _doc_rows(docs_raw, item=item, field=docs_field)
    if not _is_list(docs_raw):
        raise InputError(f"must be a list of documents, got {json_kind(docs_raw)}; give a list of "
                         '{"title", "text"} objects (or of strings), e.g. [{"title": "", "text": "..."}] for one '
                         "document.", item=item, field=docs_field)
    if not len(docs_raw):
        raise InputError("is empty; attribution needs at least one document.", item=item, field=docs_field)
    docs = tuple(make_document(d, item=item, index=i, field=docs_field) for i, d in enumerate(docs_raw))
    output = raw.get("output")
    if output is not None:
        output = _require_text(output, item=item, field="output").strip()
    item_id = raw.get("id")
    if isinstance(item_id, str):
        _check_unicode(item_id, item=item, field="id")
    return RAGItem(question=question, docs=docs, output=output, id=None if item_id is None else str(item_id))


def json_kind(value: Any) -> str:
    """The JSON name of a parsed value's type: object, list, string, number, boolean, null."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "null" if value is None else type(value).__name__


#: How much of a user's value an error message shows: this many items of a list or mapping, characters of a text,
#: levels of nesting (a YAML alias bomb or a 50 MB string is shown as its first few pieces, never expanded whole).
_PREVIEW_ITEMS = 8


_PREVIEW_DEPTH = 4


class _BoundedRepr(reprlib.Repr):
    """``reprlib`` with an integer of any size shown by its digits' count instead of converting it whole."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:
            return f"<an integer of about {int(x.bit_length() * 0.30103) + 1} digits>"
        return super().repr_int(x, level)


def _bounded_repr(limit: int) -> reprlib.Repr:
    shown = _BoundedRepr()
    shown.maxlevel = _PREVIEW_DEPTH
    shown.maxdict = shown.maxlist = shown.maxtuple = shown.maxset = shown.maxfrozenset = _PREVIEW_ITEMS
    shown.maxdeque = shown.maxarray = _PREVIEW_ITEMS
    shown.maxstring = shown.maxother = shown.maxlong = max(limit, 12)
    return shown


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split()) if ("\n" in text or "\r" in text) else text  # one line
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` for an error message, in at most ``limit`` characters on one line, in work bounded by
    ``limit`` whatever the value's size (strings, lists and mappings are cut before they are shown, a deep value
    at a few levels, a huge integer by its number of digits): every message that shows a user's value shows it
    through this or :func:`json_repr`."""
    try:
        return _cut(_bounded_repr(limit).repr(value), limit)
    except Exception:  # noqa: BLE001 - a user object whose __repr__ fails: say what it is instead
        return _cut(f"<{type(value).__name__}>", limit)


def _preview(value: Any, limit: int, depth: int = 0) -> Any:
    """A small copy of ``value`` for :func:`json_repr`: strings cut to ``limit`` characters, lists and mappings to a
    few items (a ``"..."`` marks the rest), nesting to a few levels, huge integers described."""
    if isinstance(value, str):
        return value[: limit + 1]
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return (value if value.bit_length() <= 128
                else f"<an integer of about {int(value.bit_length() * 0.30103) + 1} digits>")
    if depth >= _PREVIEW_DEPTH and isinstance(value, (Mapping, list, tuple)):
        return "..."
    if isinstance(value, Mapping):
        out = {}
        for n, (key, item) in enumerate(value.items()):
            if n == _PREVIEW_ITEMS:
                out["..."] = "..."
                break
            out[str(key)[: limit + 1]] = _preview(item, limit, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        out_list = [_preview(item, limit, depth + 1) for item in value[:_PREVIEW_ITEMS]]
        return out_list + ["..."] if len(value) > _PREVIEW_ITEMS else out_list
    return short_repr(value, limit)


def json_repr(value: Any, limit: int = 40) -> str:
    """``value`` as JSON, cut to ``limit`` characters, for error messages; bounded work whatever the value's size
    (see :func:`short_repr`)."""
    try:
        text = json.dumps(_preview(value, limit), ensure_ascii=True, default=str)
    except (TypeError, ValueError):
        text = short_repr(value, limit)
    return _cut(text, limit)
