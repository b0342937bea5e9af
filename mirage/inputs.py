"""Input items (question, documents, optional answer): validation with errors that name the item and field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


def _require_text(value: Any, *, item: int | str | None, field: str, allow_empty: bool = False) -> str:
    if value is None:
        raise InputError("is missing; give a string.", item=item, field=field)
    if not isinstance(value, str):
        raise InputError(f"must be a string, got {type(value).__name__}.", item=item, field=field)
    if not allow_empty and not value.strip():
        raise InputError("is empty; give non-blank text.", item=item, field=field)
    return value


def make_document(raw: Any, *, item: int | str | None = None, index: int = 0) -> Document:
    """Validate one document: a mapping with ``text`` (required) and ``title`` (may be empty), or a Document."""
    if isinstance(raw, Document):
        raw = {"title": raw.title, "text": raw.text}
    field = f"docs[{index}]"
    if isinstance(raw, str):
        raise InputError('must be an object {"title": ..., "text": ...}, not a bare string.', item=item, field=field)
    if not isinstance(raw, dict):
        raise InputError(f'must be an object {{"title", "text"}}, got {type(raw).__name__}.', item=item, field=field)
    text = _require_text(raw.get("text"), item=item, field=f"{field}.text")
    title = raw.get("title") or ""
    if not isinstance(title, str):
        raise InputError(f"must be a string, got {type(title).__name__}.", item=item, field=f"{field}.title")
    return Document(title=title.strip(), text=text.strip())


def make_item(raw: Any, *, item: int | str | None = None) -> RAGItem:
    """Validate a raw item ``{"question", "docs": [{"title", "text"}], "output"?}`` into a RAGItem."""
    if isinstance(raw, RAGItem):
        raw = {"question": raw.question, "docs": list(raw.docs), "output": raw.output, "id": raw.id}
    if not isinstance(raw, dict):
        raise InputError(f'must be an object {{"question", "docs", "output"?}}, got {type(raw).__name__}.', item=item)
    question = _require_text(raw.get("question"), item=item, field="question").strip()
    docs_raw = raw.get("docs")
    if docs_raw is None:
        raise InputError('is missing; give a list of {"title", "text"} objects.', item=item, field="docs")
    if not isinstance(docs_raw, (list, tuple)):
        raise InputError(f"must be a list, got {type(docs_raw).__name__}.", item=item, field="docs")
    if not docs_raw:
        raise InputError("is empty; attribution needs at least one document.", item=item, field="docs")
    docs = tuple(make_document(d, item=item, index=i) for i, d in enumerate(docs_raw))
    output = raw.get("output")
    if output is not None:
        output = _require_text(output, item=item, field="output").strip()
    item_id = raw.get("id")
    return RAGItem(question=question, docs=docs, output=output, id=None if item_id is None else str(item_id))


@dataclass(frozen=True)
class BadRow:
    """A row that cannot be used: where it is (1-based line) and why; ``in_list``: it breaks a JSON list."""

    file: str
    line: int
    error: str
    in_list: bool = False

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.error}"


@dataclass(frozen=True)
class RawRow:
    """One parsed row, its 0-based position among the file's rows and its 1-based line number."""

    index: int
    line: int
    data: Any


def read_rows(path: str | Path) -> Iterator[RawRow | BadRow]:
    """Yield the rows of a JSONL file or a JSON list, each with its line number; unparsable rows come as BadRow.

    A JSON list that does not parse as a whole is read element by element up to the first broken one.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        yield from _read_json_list(path, text)
        return
    index = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield RawRow(index=index, line=lineno, data=json.loads(line))
        except json.JSONDecodeError as err:
            yield BadRow(file=str(path), line=lineno, error=f"not valid JSON ({err.msg}, column {err.colno})")
        index += 1


def _read_json_list(path: Path, text: str) -> Iterator[RawRow | BadRow]:
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    index = 0

    def skip(p: int) -> int:
        while p < len(text) and text[p] in " \t\r\n":
            p += 1
        return p

    pos = skip(pos)
    while pos < len(text) and text[pos] != "]":
        line = text.count("\n", 0, pos) + 1
        try:
            data, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            yield BadRow(file=str(path), line=err.lineno, error=f"not valid JSON ({err.msg}); rest of the file skipped",
                         in_list=True)
            return
        yield RawRow(index=index, line=line, data=data)
        index += 1
        pos = skip(end)
        if pos < len(text) and text[pos] == ",":
            pos = skip(pos + 1)


def read_items(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield ``(index, raw item)`` from a JSON list or a JSONL file.

    A JSONL line that is not valid JSON is yielded as an InputError naming its line; a JSON list that does not
    parse raises InputError with the line, since its later items cannot be located.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path} does not exist; give a JSON list or JSONL file of items.")
    index = 0
    for row in read_rows(path):
        if isinstance(row, RawRow):
            index = row.index + 1
            yield row.index, row.data
        elif row.in_list:
            raise InputError(f"{path} is not valid JSON at line {row.line}; the list cannot be read past it ({row.error}).")
        else:
            yield index, InputError(f"{row}.", item=index)
            index += 1
