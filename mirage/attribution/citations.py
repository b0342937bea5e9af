"""Self-citation parsing: ``[1]``, ``[1][2]``, ``[1, 2]`` marks, per sentence, and the answer stripped of them; the
marks written for a list of ids, and the two sources of an answer's citations (its own marks, mirage's)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from mirage.attribution.sentences import sentence_index, split_sentences

__all__ = ["CITATION_SOURCES", "CitationSource", "ParsedAnswer", "citation_marks", "citation_numbers", "mark_spans",
           "parse_answer", "strip_citations"]

#: One mark group: consecutive ``[n]`` / ``[n, m]`` marks, possibly separated by spaces.
_MARK = r"\[\s*\d+(?:\s*[,;]\s*\d+)*\s*\]"
_GROUP = re.compile(rf"\s*{_MARK}(?:\s*{_MARK})*")
_NUMBER = re.compile(r"\d+")

#: Where a sentence's citations come from: the model's own ``[n]`` marks (``self``) or mirage's attribution.
CitationSource = Literal["self", "mirage"]
#: The two citation sources, in the order the studies compare them.
CITATION_SOURCES: tuple[CitationSource, ...] = ("self", "mirage")


def citation_marks(ids: Iterable[int]) -> str:
    """Document ids as citation marks, ``[1][3]`` (empty for none)."""
    return "".join(f"[{i}]" for i in ids)


@dataclass(frozen=True)
class ParsedAnswer:
    """An answer with its citation marks removed.

    ``sentences[i]`` is the span of sentence i in ``text``; ``citations[i]`` the 1-based ids cited in it, in order of
    first mention (valid ids only); ``invalid[i]`` the ids that name no document.
    """

    raw: str
    text: str
    sentences: tuple[tuple[int, int], ...]
    citations: tuple[tuple[int, ...], ...]
    invalid: tuple[tuple[int, ...], ...]


def strip_citations(raw: str) -> tuple[str, list[tuple[int, list[int]]]]:
    """Remove citation marks; return the stripped text and, per mark group, its position there and its ids."""
    out: list[str] = []
    marks: list[tuple[int, list[int]]] = []
    last = 0
    length = 0
    for match in _GROUP.finditer(raw):
        before = raw[last : match.start()]
        out.append(before)
        length += len(before)
        ids = [int(n) for n in _NUMBER.findall(match.group())]
        following = raw[match.end() : match.end() + 1]
        had_space = match.group()[:1].isspace()
        if had_space and following and not following.isspace() and following not in ".,;:!?)]}'\"":
            out.append(" ")
            length += 1
        marks.append((length, ids))
        last = match.end()
    out.append(raw[last:])
    return "".join(out), marks


def mark_spans(text: str) -> list[tuple[int, int]]:
    """The character span of every citation mark group of ``text`` (``[1]``, ``[1][2]``, ``[1, 2]``; the space
    before it left out), in order."""
    spans = []
    for group in _GROUP.finditer(text):
        start = group.start() + len(group.group()) - len(group.group().lstrip())
        spans.append((start, group.end()))
    return spans


def citation_numbers(text: str) -> list[tuple[int, int, int]]:
    """Every number inside a citation mark of ``text`` (``[n]``, ``[n][m]``, ``[n, m]``) as ``(n, start, end)``, its
    character span in ``text``, in order."""
    return [(int(number.group()), group.start() + number.start(), group.start() + number.end())
            for group in _GROUP.finditer(text) for number in _NUMBER.finditer(group.group())]


def parse_answer(raw: str, n_docs: int) -> ParsedAnswer:
    """Parse self-citations of an answer over ``n_docs`` documents (ids 1..n_docs are valid)."""
    text, marks = strip_citations(raw)
    spans = split_sentences(text)
    if not spans and text.strip():
        spans = [(0, len(text))]
    cited: list[list[int]] = [[] for _ in spans]
    invalid: list[list[int]] = [[] for _ in spans]
    for position, ids in marks:
        if not spans:
            break
        # A mark belongs to the sentence it closes: the one containing, or ending just before, its position.
        index = sentence_index(spans, max(0, position - 1))
        for doc_id in ids:
            target = cited if 1 <= doc_id <= n_docs else invalid
            if doc_id not in target[index]:
                target[index].append(doc_id)
    return ParsedAnswer(
        raw=raw,
        text=text,
        sentences=tuple(spans),
        citations=tuple(tuple(c) for c in cited),
        invalid=tuple(tuple(c) for c in invalid),
    )
