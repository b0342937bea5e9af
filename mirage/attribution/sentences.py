"""Offline sentence splitting with character spans (no NLTK data download needed).

Rules (the default), in the spirit of punkt's defaults: a sentence ends at ``.``, ``!``, ``?`` (and their
CJK/Devanagari forms) followed by optional closing quotes/brackets, then whitespace, unless the word before the period
is a known abbreviation or a single letter (initials), or the next character is lowercase. Line breaks always end a
sentence.

``method="punkt"`` uses NLTK's untrained Punkt splitter (``PunktSentenceTokenizer()``, no data download) within each
line instead. It stays an option: on the shipped answers (ALCE ELI5 answers and demos, 664 XOR-AttriQA predictions in
English and in bn, fi, ja, ru, te, 253 answers of the bias study) it splits 8 answers differently from the rules, and
in all 8 the rules are right: untrained Punkt knows no abbreviations (``St. Petersburg``, ``Inc.``, ``30 sq. km``)
and merges ``A.D.. The``; it also never ends a sentence at ``。`` or ``।``.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any, Literal, get_args

__all__ = ["sentence_index", "split_sentences"]

SplitMethod = Literal["rules", "punkt"]

_ABBREVIATIONS = frozenset(
    ["mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "cf", "al", "fig", "figs", "no",
     "nos", "vol", "approx", "dept", "est", "inc", "ltd", "co", "corp", "jan", "feb", "mar", "apr", "jun", "jul", "aug",
     "sep", "sept", "oct", "nov", "dec", "u.s", "u.k", "a.m", "p.m", "ca", "resp", "ed", "eds"]
)
_BOUNDARY = re.compile(r"[.!?。！？।]+[\"'”’»)\]]*(?=\s)|[。！？]+|\n+")


def _is_abbreviation(text: str, dot: int) -> bool:
    """Whether the period at ``dot`` closes an abbreviation or an initial."""
    if text[dot] != ".":
        return False
    start = dot
    while start > 0 and not text[start - 1].isspace() and text[start - 1] not in "([\"'":
        start -= 1
    word = text[start:dot].lower().rstrip(".")
    if not word:
        return False
    if word in _ABBREVIATIONS:
        return True
    return len(word) == 1 and word.isalpha()


def split_sentences(text: str, *, method: SplitMethod = "rules") -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of the sentences of ``text``, surrounding whitespace excluded; ``method``:
    ``"rules"`` (the default) or ``"punkt"`` (NLTK's untrained Punkt within each line; needs ``nltk``)."""
    if method == "punkt":
        return _punkt_split(text)
    if method != "rules":
        raise ValueError(f"method={method!r} is not valid; choose one of "
                         f"{', '.join(map(repr, get_args(SplitMethod)))}.")
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        end = match.end()
        if match.group().startswith("\n"):
            end = match.start()
        else:
            first = match.start()
            if _is_abbreviation(text, first) and len(match.group().rstrip("\"'”’»)]")) == 1:
                continue
            rest = text[end:].lstrip()
            if rest and rest[0].islower():
                continue
        _append(text, start, end, spans)
        start = match.end()
    _append(text, start, len(text), spans)
    return spans


@cache
def _punkt() -> Any:
    try:
        from nltk.tokenize.punkt import PunktSentenceTokenizer
    except ImportError as err:
        raise ImportError("split_sentences(method='punkt') needs NLTK: pip install 'mirage-rag[punkt]' (no data "
                          "download is needed).") from err
    return PunktSentenceTokenizer()  # untrained: default parameters, nothing loaded


def _punkt_split(text: str) -> list[tuple[int, int]]:
    """Punkt's sentences within each line (line breaks end a sentence, as with the rules)."""
    spans: list[tuple[int, int]] = []
    start = 0
    for line in text.split("\n"):
        for a, b in _punkt().span_tokenize(line):
            _append(text, start + a, start + b, spans)
        start += len(line) + 1
    return spans


def _append(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end > start:
        spans.append((start, end))


def sentence_index(spans: list[tuple[int, int]], position: int) -> int:
    """Index of the sentence containing (or, in whitespace between sentences, preceding) ``position``."""
    index = 0
    for i, (start, _end) in enumerate(spans):
        if start <= position:
            index = i
        else:
            break
    return index

