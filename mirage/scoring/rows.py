"""Reading benchmark files row by row, keeping each row's line number so that bad rows can be reported and skipped."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sized
from typing import Any, TypeVar

from mirage.data.readers import BadRow, RawRow, read_rows

__all__ = ["BadRow", "RawRow", "RowError", "parse_rows", "read_rows", "require"]

ParsedT = TypeVar("ParsedT")


class RowError(ValueError):
    """A row's content is unusable; the message says which field and why."""


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
    if nonempty and (not value.strip() if isinstance(value, str) else isinstance(value, Sized) and len(value) == 0):
        raise RowError(f"field {name!r} is empty")
    return value


def parse_rows(rows: Iterable[RawRow | BadRow], parse: Callable[[RawRow], ParsedT], *, file: str,
               limit: int | None = None, skip: int = 0) -> tuple[list[ParsedT], list[BadRow]]:
    """``parse`` each of the first ``limit`` rows after the first ``skip`` (bad ones included in both counts); rows
    that could not be read, or that ``parse`` rejects with RowError, come back as BadRow with their line number."""
    items: list[ParsedT] = []
    bad: list[BadRow] = []
    for n, raw in enumerate(rows):
        if n < skip:
            continue
        if limit is not None and n >= skip + limit:
            break
        if isinstance(raw, BadRow):
            bad.append(raw)
            continue
        try:
            items.append(parse(raw))
        except RowError as err:
            bad.append(BadRow(file=file, line=raw.line, error=str(err)))
    return items, bad
