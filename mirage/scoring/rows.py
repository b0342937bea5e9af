"""Reading benchmark files row by row, keeping each row's line number so that bad rows can be reported and skipped."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class BadRow:
    """A row that cannot be scored: where it is (1-based line) and why."""

    file: str
    line: int
    error: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.error}"


class RowError(ValueError):
    """A row's content is unusable; the message says which field and why."""


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
            yield BadRow(file=str(path), line=err.lineno, error=f"not valid JSON ({err.msg}); rest of the file skipped")
            return
        yield RawRow(index=index, line=line, data=data)
        index += 1
        pos = skip(end)
        if pos < len(text) and text[pos] == ",":
            pos = skip(pos + 1)


def require(row: dict[str, Any], name: str, kind: type | tuple[type, ...], *, nonempty: bool = True) -> Any:
    """The field ``name`` of a row, checked for type (and non-emptiness); RowError naming the field otherwise."""
    if not isinstance(row, dict):
        raise RowError(f"row must be a JSON object, got {type(row).__name__}")
    if name not in row or row[name] is None:
        raise RowError(f"field {name!r} is missing")
    value = row[name]
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        raise RowError(f"field {name!r} must be {' or '.join(k.__name__ for k in kinds)}, got {type(value).__name__}")
    if nonempty and (not value.strip() if isinstance(value, str) else len(value) == 0):
        raise RowError(f"field {name!r} is empty")
    return value


def content_key(payload: Any) -> str:
    """A stable key for what a model sees (e.g. question, documents and answer): equal inputs share results."""
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]
