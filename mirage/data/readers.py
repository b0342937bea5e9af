"""Reading the files items, rows and records come in, each bad row named by its file and line: UTF-8 text, gunzipped
under a ``.gz`` name (:func:`read_text`, the one text reader; :func:`text_lines`), a JSON value with bounded nesting
(:func:`parse_json`), and a JSON list, a JSONL file or a file holding one JSON object read row by row
(:func:`read_rows`, :func:`read_jsonl`: each row a :class:`RawRow` or a :class:`BadRow`, a broken element of a JSON
list passed over to the next), and the items to attribute (:func:`read_items`)."""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirage.data.inputs import InputError

__all__ = [
    "MAX_JSON_DEPTH",
    "BadRow",
    "RawRow",
    "decode_text",
    "parse_json",
    "read_items",
    "read_jsonl",
    "read_rows",
    "read_text",
    "text_lines",
]


#: How deeply a JSON value may nest (lists and objects inside each other, the file's own list counted). Python's
#: parser recurses once per level, and so does everything that walks the value later (hashing, writing it back);
#: deeper values are refused as one bad row instead of a RecursionError that stops the run.
MAX_JSON_DEPTH = 500


#: A JSON string (skipped whole: brackets inside it are text) or a bracket.
_DEPTH_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]')


def _deep_point(text: str, start: int = 0, end: int | None = None) -> int | None:
    """Where the nesting of ``text[start:end]`` (brackets outside strings) first goes past :data:`MAX_JSON_DEPTH`;
    None when it does not (known at once, from two counts, when the text holds too few brackets to nest that deep)."""
    end = len(text) if end is None else end
    if text.count("[", start, end) + text.count("{", start, end) <= MAX_JSON_DEPTH:
        return None
    depth = 0
    for found in _DEPTH_TOKEN.finditer(text, start, end):
        char = text[found.start()]
        if char in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return found.start()
        elif char in "]}":
            depth -= 1
    return None


def _too_deep(text: str, pos: int) -> json.JSONDecodeError:
    return json.JSONDecodeError(f"nested deeper than {MAX_JSON_DEPTH} levels", text, pos)


def parse_json(text: str | bytes) -> Any:
    """``json.loads`` for text read from a file: a value nested deeper than :data:`MAX_JSON_DEPTH` levels is a
    ``json.JSONDecodeError`` ("nested deeper than 500 levels") like any other broken JSON, never a RecursionError;
    bytes that are not UTF-8 are a ValueError (UnicodeDecodeError) too."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    deep = _deep_point(text)
    if deep is not None:
        raise _too_deep(text, deep)
    try:
        return json.loads(text)
    except RecursionError:  # a deep value read where the stack is already deep
        raise _too_deep(text, 0) from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer of more digits than Python converts
        raise _too_long_number(text, 0) from None


def _too_long_number(text: str, pos: int) -> json.JSONDecodeError:
    return json.JSONDecodeError(f"a number has more than {sys.get_int_max_str_digits()} digits", text, pos)


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _looks_utf16(data: bytes) -> bool:
    """Every other byte zero in the first 4 KiB: UTF-16 text without a byte-order mark (mostly ASCII, as JSON is).
    Valid UTF-8 JSON never holds a NUL byte (control characters are not allowed in JSON strings)."""
    sample = data[:4096]
    if len(sample) < 4 or b"\x00" not in sample:
        return False
    half = len(sample) // 2
    return max(sample[0::2].count(0), sample[1::2].count(0)) >= 0.3 * half


def _utf8_copy(path: str | Path) -> str:
    path = Path(path)
    return str(path.with_name(f"{path.stem}.utf8{path.suffix}"))


def _refuse_utf16(head: bytes, path: str | Path, *, undecodable: bool = False) -> None:
    """InputError when ``head`` (the file's first bytes) looks like UTF-16; ``undecodable``: it is known not to be
    UTF-8, and any NUL byte points to UTF-16."""
    if head.startswith(_UTF16_BOMS):
        how = "it starts with a UTF-16 byte-order mark"
    elif _looks_utf16(head):
        how = "every other byte is 0"
    elif undecodable and b"\x00" in head[:4096]:
        how = "it holds NUL bytes"
    else:
        return
    raise InputError(f"{path} is not UTF-8: it looks like UTF-16 ({how}). Re-save it as UTF-8 (e.g. "
                     f"`iconv -f UTF-16 -t UTF-8 {path} > {_utf8_copy(path)}`, or choose UTF-8 in your editor).")


def decode_text(data: bytes, path: str | Path) -> str:
    """``data`` decoded as UTF-8 (a UTF-8 byte-order mark is dropped); InputError naming ``path`` if it is not UTF-8:
    UTF-16 is named as such; otherwise the message gives the line of the first byte that is not UTF-8."""
    _refuse_utf16(data, path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        _refuse_utf16(data, path, undecodable=True)
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise InputError(f"{path} is not UTF-8: byte 0x{data[err.start]:02x} at line {line}, byte {column} is not "
                         "valid UTF-8 (the file may be Latin-1 or Windows-1252). Re-save it as UTF-8 (e.g. "
                         f"`iconv -f latin1 -t UTF-8 {path} > {_utf8_copy(path)}`).") from None


def _existing_file(path: str | Path, what: str) -> Path:
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path} is a directory; give a {what}.")
    if not path.exists():
        raise InputError(f"{path} does not exist; give a {what}.")
    return path


def read_text(path: str | Path, *, what: str = "UTF-8 text file") -> str:
    """The text of a UTF-8 file (a UTF-8 byte-order mark is dropped), gunzipped first when its name ends in ``.gz``
    (as run folders store large files). InputError naming the path when it does not exist, is a directory, cannot be
    read, is not gzip under a ``.gz`` name, or is not UTF-8 (UTF-16 and Latin-1 are named as such); ``what`` says
    what the file should be."""
    import gzip

    path = _existing_file(path, what)
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
    except (OSError, EOFError) as err:
        plain = path.suffix != ".gz"
        raise InputError(f"{path} cannot be read ({getattr(err, 'strerror', None) or err}); give a readable {what}"
                         + ("." if plain else " (a .gz name must hold gzip data).")) from None
    return decode_text(data, path)


def text_lines(path: str | Path, *, what: str = "UTF-8 text file") -> Iterator[str]:
    """The lines of a UTF-8 file, read as a stream (for files too large to hold twice in memory), with the checks and
    InputErrors of :func:`read_text`."""
    path = _existing_file(path, what)
    try:
        with path.open("rb") as f:
            _refuse_utf16(f.read(4096), path)
        with path.open(encoding="utf-8-sig") as f:
            yield from f
    except UnicodeDecodeError:
        decode_text(path.read_bytes(), path)  # raises InputError naming the line
        raise
    except OSError as err:
        raise InputError(f"{path} cannot be read ({err.strerror or err}); give a readable {what}.") from None


@dataclass(frozen=True)
class BadRow:
    """A row that cannot be used: where it is (1-based line) and why; ``in_list``: it is an element of a JSON list
    (``line`` is where that element starts); ``unterminated``: it is a JSONL file's last line and has no newline,
    as a record cut off mid-write (a stopped run) leaves it."""

    file: str
    line: int
    error: str
    in_list: bool = False
    unterminated: bool = False

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.error}"


@dataclass(frozen=True)
class RawRow:
    """One parsed row, its 0-based position among the file's rows and its 1-based line number; ``parsed`` False: a
    row :func:`read_jsonl` was told to count but not parse (``data`` is then None)."""

    index: int
    line: int
    data: Any
    parsed: bool = True


_WHITESPACE = " \t\r\n"


#: How a JSON value can start (an object or list with what may follow its bracket): a cheap test before a full parse
#: (a failed parse is not cheap: its error counts the lines up to where it failed).
_VALUE_START = re.compile(r'\{[ \t\r\n]*["}]|\[[ \t\r\n]*[\]{\["\-0-9tfnNI]|"|-?[0-9]|true|false|null|NaN|-?Infinity')


def read_rows(path: str | Path, *, what: str = "JSON list or JSONL file") -> Iterator[RawRow | BadRow]:
    """Yield the rows of a JSONL file, a JSON list, or a file holding one JSON object, each with its line number;
    rows that cannot be parsed come as BadRow, in their place (they count in ``RawRow.index``).

    - A file whose whole text parses as one JSON object (e.g. pretty-printed over many lines) is one row.
    - A file starting with ``[`` is a JSON list. A broken element becomes one BadRow (its line: where it starts) and
      reading goes on at the next element (see :func:`_resync`); a missing ``,`` between two whole elements and a
      trailing ``,`` are tolerated; a list cut short or followed by other text ends with a BadRow saying so. Only
      when nothing at all can be read does it raise InputError naming the file and line.
    - Anything else is JSONL, read as :func:`read_jsonl` reads it.

    InputError when the file is missing, a directory, or not UTF-8 (a UTF-8 byte-order mark is accepted).
    """
    path = Path(path)
    text = read_text(path, what=what)
    body = text.lstrip(_WHITESPACE)
    if body.startswith("["):
        yield from _read_json_list(path, text)
        return
    if body.startswith("{"):
        start = len(text) - len(body)
        whole = _whole_object(path, text, start)
        if whole is not None:
            yield whole
            return
    yield from _jsonl_rows(path, io.StringIO(text, newline=None))


def read_jsonl(path: str | Path, *, what: str = "JSONL file",
               parse: Callable[[int], bool] | None = None) -> Iterator[RawRow | BadRow]:
    """Yield the rows of a JSONL file, one JSON value per line, each with its 1-based line number and its 0-based
    position among the rows; a line that does not parse comes as a BadRow in its place (counted in
    ``RawRow.index``), marked ``unterminated`` when it is the last line and lacks its newline. Blank lines are skipped.

    Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` only (which JSON strings cannot hold raw), not at the other breaks of
    ``str.splitlines`` (U+2028, U+0085, …) that a JSON string may hold. The file is streamed, so a large corpus is
    never held twice in memory. InputError (from :func:`text_lines`) when the file is missing, a directory, or not
    UTF-8 (a UTF-8 byte-order mark is accepted); ``what`` says what the file should be. Each caller decides what a
    BadRow means to it (skip it, warn, or raise an InputError naming ``FILE line N``).

    ``parse``: which rows, by position, are parsed (default: all); the others come as ``RawRow(parsed=False)``,
    counted and never parsed, so a page of a large file costs no parse of the rest. A last line without its newline
    is parsed all the same (it may be a torn record, a BadRow).
    """
    yield from _jsonl_rows(Path(path), text_lines(path, what=what), parse)


def _jsonl_rows(path: Path, lines: Iterable[str], parse: Callable[[int], bool] | None = None
                ) -> Iterator[RawRow | BadRow]:
    """The rows of JSONL ``lines`` (each with its ``\\n``, universal newlines translated): see :func:`read_jsonl`."""
    index = 0
    for lineno, line in enumerate(lines, start=1):
        if not line.strip(_WHITESPACE):
            continue
        terminated = line.endswith("\n")
        if parse is not None and terminated and not parse(index):
            yield RawRow(index=index, line=lineno, data=None, parsed=False)
            index += 1
            continue
        try:  # without its newline, so that an error at the end of the line is located on it
            yield RawRow(index=index, line=lineno, data=parse_json(line[:-1] if terminated else line))
        except json.JSONDecodeError as err:
            yield BadRow(file=str(path), line=lineno, error=f"not valid JSON ({err.msg}, column {err.colno})",
                         unterminated=not terminated)
        index += 1


def _whole_object(path: Path, text: str, start: int) -> RawRow | None:
    """The file as one row when its whole text is one JSON object; None when it is JSONL (its first line parses
    alone, or the text is not one object and does not look pretty-printed)."""
    line = text.count("\n", 0, start) + 1
    try:
        data, end = _Decoder(text).decode(start)
    except json.JSONDecodeError as err:
        error = err
    else:
        if _skip(text, end) >= len(text):
            return RawRow(index=0, line=line, data=data)
        error = json.JSONDecodeError("Extra data", text, _skip(text, end))
    line_end = text.find("\n", start)
    # a lone "{": one pretty-printed object, broken (JSONL lines are whole objects)
    if not text[start + 1:line_end if line_end != -1 else len(text)].strip(_WHITESPACE):
        raise InputError(f"{path} is not valid JSON at line {error.lineno} ({error.msg}, column {error.colno}): it "
                         "starts as one JSON object over several lines but does not parse as one. Fix it there, or "
                         "give a JSON list, or one object per line (JSONL).")
    return None


class _LineCounter:
    """1-based line numbers of positions in ``text``, counted incrementally (positions mostly increase)."""

    def __init__(self, text: str) -> None:
        self.text, self.pos, self.line = text, 0, 1

    def __call__(self, pos: int) -> int:
        if pos < self.pos:
            return self.text.count("\n", 0, pos) + 1
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return self.line


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WHITESPACE:
        pos += 1
    return pos


class _Decoder:
    """``raw_decode`` over one text, refusing values nested deeper than :data:`MAX_JSON_DEPTH` (as a
    JSONDecodeError where the nesting goes too deep) and remembering, per position, what a list element starting
    there leads to (:meth:`chain`): each position of the text is decoded a bounded number of times, so that recovery
    after a broken element stays linear in the file (nested values aside: a value is decoded again from each of its
    commas that recovery tries)."""

    def __init__(self, text: str, last_close: int = -1) -> None:
        self.text, self.last_close = text, last_close
        self.decoder = json.JSONDecoder()
        self.chains: dict[int, bool | None] = {}

    def decode(self, pos: int) -> tuple[Any, int]:
        """The value at ``pos`` and where it ends; JSONDecodeError when none parses there or it nests too deep."""
        try:
            data, end = self.decoder.raw_decode(self.text, pos)
        except RecursionError:
            deep = _deep_point(self.text, pos)
            raise _too_deep(self.text, pos if deep is None else deep) from None
        except json.JSONDecodeError:
            raise
        except ValueError:  # an integer of more digits than Python converts
            raise _too_long_number(self.text, pos) from None
        deep = _deep_point(self.text, pos, end)
        if deep is not None:
            raise _too_deep(self.text, deep)
        return data, end

    def chain(self, pos: int) -> bool | None:
        """None when nothing parses at ``pos``; else whether list elements can be read from ``pos`` up to the
        list's closing ``]`` (or another broken element): what tells a next element from a value nested in the
        broken one (its siblings end with a ``]`` or ``}`` that does not close the list). Remembered for every
        position the walk passes, so that no walk is taken twice."""
        text, n = self.text, len(self.text)
        passed: list[int] = []
        result: bool | None
        while True:
            if pos in self.chains:
                known = self.chains[pos]
                result = known if known is not None or not passed else True
                break
            try:
                _, end = self.decode(pos)
            except json.JSONDecodeError:
                self.chains[pos] = None
                result = True if passed else None  # another broken element: the chain held up to it
                break
            passed.append(pos)
            after = _skip(text, end)
            if after >= n:
                result = True
                break
            if text[after] == "]":
                result = after == self.last_close
                break
            if text[after] in "{[":
                pos = after
                continue
            if text[after] != ",":
                result = False
                break
            pos = _skip(text, after + 1)
            if pos < n and text[pos] == "]":
                result = pos == self.last_close
                break
        for at in passed:
            self.chains[at] = result
        return result


def _read_json_list(path: Path, text: str) -> Iterator[RawRow | BadRow]:
    line_of = _LineCounter(text)
    last_close = text.rfind("]")
    decoder = _Decoder(text, last_close)
    pos = _skip(text, text.index("[") + 1)
    index = 0  # elements so far, broken ones included
    good = 0

    def bad(at: int, error: str) -> BadRow:
        nonlocal index
        index += 1
        return BadRow(file=str(path), line=line_of(at), error=error, in_list=True)

    while True:
        if pos >= len(text):
            if index:
                yield bad(pos, "the list ends without its closing ']' (is the file cut short?)")
                return
            raise InputError(f"{path} is not valid JSON at line {line_of(pos)}: the list ends without its closing "
                             "']' and holds no element.")
        if text[pos] == "]":
            rest = _skip(text, pos + 1)
            if rest < len(text):
                yield bad(rest, f"text after the list's closing ']' (line {line_of(pos)}) is ignored")
            return
        try:
            data, end = decoder.decode(pos)
            after = _skip(text, end)
            if after < len(text) and text[after] not in ",]{[":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, after)
        except json.JSONDecodeError as err:
            nxt = _resync(decoder, pos, max(err.pos, pos))
            if nxt is None and not good:
                raise InputError(f"{path} is not valid JSON at line {err.lineno} ({err.msg}, column {err.colno}); "
                                 "nothing in its list could be read. Fix the JSON there.") from None
            yield bad(pos, f"not valid JSON ({_located(err)}); this list element is skipped")
            if nxt is None:
                return
            pos = nxt
            continue
        yield RawRow(index=index, line=line_of(pos), data=data)
        index += 1
        good += 1
        if after < len(text) and text[after] == ",":
            pos = _skip(text, after + 1)
        else:  # "]", the end of the text, or the next element with its "," missing
            pos = after


def _located(err: json.JSONDecodeError) -> str:
    """``Expecting value at line 3, column 5`` (json's "Unterminated string starting at" reads on)."""
    where = f"line {err.lineno}, column {err.colno}"
    return f"{err.msg} {where}" if err.msg.endswith(" at") else f"{err.msg} at {where}"


def _candidate(decoder: _Decoder, pos: int) -> bool | None:
    """True: a list element that parses starts at ``pos``, followed by more elements up to the list's end (or another
    broken element); False: a value parses there but is not followed so; None: nothing parses there."""
    if not _VALUE_START.match(decoder.text, pos):
        return None
    return decoder.chain(pos)


_CLOSER = {"{": "}", "[": "]"}


def _resync(decoder: _Decoder, start: int, error_at: int) -> int | None:
    """Where the list element after the broken one at ``start`` (first error at ``error_at``) begins; None when no
    element follows.

    The next element starts after a ``,`` past the error (what precedes the error parsed, so it belongs to the broken
    element). The first such ``,`` is taken that is followed by a value that parses and is itself followed by more
    elements up to the list's closing ``]`` (or another broken element): a value nested in the broken element fails
    that, its siblings ending with a ``]`` or ``}`` that does not close the list. A ``}, {`` whose ``{`` does not parse
    is taken too: the next element, broken as well, reported on its own.
    """
    text, n = decoder.text, len(decoder.text)
    opener = text[start]
    i = text.find(",", error_at)
    while i != -1:
        nxt = _skip(text, i + 1)
        if nxt >= n or (text[nxt] == "]" and nxt == decoder.last_close):
            return None  # a trailing comma: the broken element was the last one
        found = _candidate(decoder, nxt)
        if found:
            return nxt
        if found is None and opener in _CLOSER and text[nxt] == opener:
            before = i - 1
            while before > start and text[before] in _WHITESPACE:
                before -= 1
            if text[before] == _CLOSER[opener]:
                return nxt
        i = text.find(",", i + 1)
    return None


def read_items(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Yield ``(index, raw item)`` from a JSON list, a JSONL file, or a file holding one JSON object (one item).

    A row that cannot be parsed (a JSONL line, or an element of a JSON list) is yielded in its place as an InputError
    naming its line, so that it is recorded as that item's error; InputError is raised when the file is missing, a
    directory, not UTF-8, or when nothing at all can be read from it.
    """
    index = 0
    for row in read_rows(path, what='JSON list or JSONL file of items {"question", "docs", "output"?}'):
        if isinstance(row, RawRow):
            index = row.index + 1
            yield row.index, row.data
        else:
            yield index, InputError(f"{row}.", item=index)
            index += 1
