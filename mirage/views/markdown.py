"""Markdown as every table of mirage writes it: the one table builder (:func:`md_table`), a cell (:func:`cell`) and
a recorded value as plain text (:func:`text`), and numbers (a p-value, a percentage, a number to fixed decimals,
each with its mark for a missing value). Plain functions of the standard library only, so that the studies', the
benchmarks' and the results pages' tables are built one way."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["LINE_BREAK", "LINK_END", "TEXT_ESCAPES", "cell", "code", "fenced", "fmt_number", "fmt_p", "fmt_pct",
           "md_table", "stars", "text"]

#: A line break as markdown reads one.
LINE_BREAK = re.compile(r"\r\n?|\n")
#: What :func:`text` escapes: ``&`` and ``<`` as entities (a ``<`` starts HTML, an ``&`` an entity; a ``>`` alone is
#: text), a backtick (a code span) and a backslash (an escape of the next character) with a backslash.
TEXT_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", "\\": "\\\\", "`": "\\`"})
#: The ``]`` of a link or an image (``](`` or ``][``), which :func:`text` escapes too.
LINK_END = re.compile(r"\](?=[(\[])")


def text(value: Any) -> str:
    """A value a run recorded, as plain text on a page: on one line (a newline in it cannot end a heading, a table
    row or a list item), never HTML, a link, an image or a code span (:data:`TEXT_ESCAPES`, :data:`LINK_END`)."""
    return LINK_END.sub("\\\\]", LINE_BREAK.sub(" ", str(value)).translate(TEXT_ESCAPES))


def _ticks(value: str, least: int) -> str:
    """A run of backticks longer than any in ``value``, and at least ``least`` long."""
    return "`" * max(least, 1 + max(map(len, re.findall("`+", value)), default=0))


def code(value: Any) -> str:
    """A value a run recorded, as inline code: on one line, ``|`` escaped (a table cell), between backtick runs
    longer than any in it (so it cannot end the span)."""
    value = LINE_BREAK.sub(" ", str(value)).replace("|", "\\|")
    ticks, pad = _ticks(value, 1), " " if value.startswith("`") or value.endswith("`") else ""
    return f"{ticks}{pad}{value}{pad}{ticks}"


def fenced(body: str, lang: str = "text") -> str:
    """A code block that nothing in ``body`` can close: its fence is longer than any backtick run inside."""
    fence = _ticks(body, 3)
    return f"{fence}{lang}\n{body.rstrip()}\n{fence}"


def cell(value: Any, digits: int = 1) -> str:
    """A table cell: ``–`` for None, floats to ``digits`` decimals, lists joined, text as :func:`text`, ``|``
    escaped."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(cell(v, digits) for v in value) or "–"
    return text(value).replace("|", "\\|")


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table (cells through :func:`cell` unless already strings, which are markdown: no line break in
    any)."""
    def one_line(cells: Iterable[Any]) -> str:
        return "| " + " | ".join(LINE_BREAK.sub(" ", c) if isinstance(c, str) else cell(c) for c in cells) + " |"

    return "\n".join([one_line(header), "|" + "---|" * len(header), *map(one_line, rows)])


def fmt_p(p: float | None) -> str:
    """A p-value: three decimals, or in scientific notation below 0.001 (``1.2e-05``); ``–`` for none."""
    return "–" if p is None else (f"{p:.3f}" if p >= 0.001 else f"{p:.1e}")


def stars(p: float | None) -> str:
    """Significance stars of a p-value: ``**`` below 0.01, ``*`` below 0.05, else (or for none) nothing."""
    return "" if p is None else "**" if p < 0.01 else "*" if p < 0.05 else ""


def fmt_pct(value: float | None, digits: int = 1, *, of: float | None = None) -> str:
    """A share in percent to ``digits`` decimals: ``value`` a fraction, or with ``of`` a count of ``of`` (``100 *
    value / of``); ``–`` for a missing value or a count of none."""
    if of is not None:
        return "–" if not of or value is None else f"{100 * value / of:.{digits}f}"
    return "–" if value is None else f"{100 * value:.{digits}f}"


def fmt_number(value: Any, digits: int = 1, *, width: int = 0, missing: str = "-") -> str:
    """A float to ``digits`` decimals, any other value as ``str``, ``missing`` for None; right-aligned to ``width``."""
    if value is None:
        return missing.rjust(width)
    return (f"{value:.{digits}f}" if isinstance(value, float) else str(value)).rjust(width)
