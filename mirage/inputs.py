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


def read_items(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield ``(index, raw item)`` from a JSON list or a JSONL file; malformed JSON raises InputError with the line."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path} does not exist; give a JSON list or JSONL file of items.")
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise InputError(f"{path} is not valid JSON at line {err.lineno}, column {err.colno}: {err.msg}.") from err
        yield from enumerate(data)
        return
    index = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield index, json.loads(line)
        except json.JSONDecodeError as err:
            yield index, InputError(f"line {lineno} of {path} is not valid JSON ({err.msg}).", item=index)
        index += 1
