"""A results file (JSONL written by ``mirage attribute``) read as AttributionResult objects, whole
(:func:`read_result_objects`) or a window of it (:func:`read_result_window`), and a stored record checked field by
field before a page shows it (:func:`result_from_record`, :func:`record_problem`): every bad line or field is an
InputError naming the file, the line and the field."""

from __future__ import annotations

import base64
import dataclasses
import types
import typing
import warnings
from dataclasses import MISSING, fields
from functools import cache
from pathlib import Path
from typing import Any

from mirage.attribution.results import AttributionResult
from mirage.data.inputs import InputError, json_kind, json_repr, short_repr
from mirage.data.readers import RawRow, read_jsonl

__all__ = [
    "read_result_objects",
    "read_result_window",
    "record_problem",
    "result_from_record",
]


def read_result_objects(path: str | Path) -> list[AttributionResult]:
    """The results of a ``mirage attribute`` JSONL file as AttributionResult objects (extra keys such as
    ``key``/``index`` are ignored); :func:`mirage.read_results` gives them as one pandas table.

    A torn last line (a record cut off without its newline, as a stopped run leaves it) is skipped with a warning;
    any other line that is not JSON, not an object, or not an attribution result is an InputError naming the file
    and line; so is a file that is missing, a directory, or not UTF-8.
    """
    return read_result_window(path)[0]


def read_result_window(path: str | Path, *, offset: int = 0, limit: int | None = None
                       ) -> tuple[list[AttributionResult], int]:
    """The results at positions ``offset`` to ``offset + limit`` of a results file (all from ``offset`` when
    ``limit`` is None), and how many results the file holds. The file is streamed and only the lines in the window
    are parsed (:func:`~mirage.data.readers.read_jsonl`'s ``parse``; the others are counted), so time and memory
    follow the window, not the file; a line in it that is not a result is refused (a torn last line skipped) as by
    :func:`read_result_objects`."""
    path = Path(path)

    def wanted(index: int) -> bool:
        return index >= offset and (limit is None or index < offset + limit)

    out = []
    total = 0
    for row in read_jsonl(path, what="JSONL written by `mirage attribute`", parse=wanted):
        if isinstance(row, RawRow):
            if row.parsed and wanted(row.index):
                out.append(_result(row.data, path, row.line))
            total += 1
        elif row.unterminated:  # the last line, without its newline: a record cut off mid-write
            warnings.warn(f"{path}: skipped line {row.line}, a record cut off mid-write (the run was stopped); "
                          "re-run `mirage attribute` to finish that item.", stacklevel=3)
        else:
            raise InputError(f"{path} line {row.line} is {row.error}; "
                             + (_INPUT_FILE.format(path=path) if total == 0 and _looks_like_items(path) else
                                "a results file has one JSON object per line, as `mirage attribute` writes it."))
    return out, total


#: What ``mirage view`` says of a file of items to attribute, not of results.
_INPUT_FILE = ("this is an input file of items (question, docs), not results: attribute it first (`mirage attribute "
               "{path} -o OUT.jsonl`), then view OUT.jsonl.")


def _looks_like_items(path: Path) -> bool:
    """Whether the file opens as a JSON list of items (``[{"question": …, "docs": …}``): its first 64 KiB only."""
    with open(path, encoding="utf-8", errors="replace") as f:
        head = f.read(1 << 16)
    return head.lstrip().startswith("[") and '"question"' in head and ('"docs"' in head or '"ctxs"' in head)


#: What a result record must hold (the fields of AttributionResult without a default).
_REQUIRED = tuple(f.name for f in fields(AttributionResult) if f.default is MISSING and f.default_factory is MISSING)


def _result(data: Any, path: Path, lineno: int) -> AttributionResult:
    if not isinstance(data, dict):
        raise InputError(f"{path} line {lineno} is a JSON {json_kind(data)}, not an object; a results file has one "
                         "attribution result object per line, as `mirage attribute` writes it.")
    missing = [name for name in _REQUIRED if name not in data]
    if missing and "question" in data and ("docs" in data or "ctxs" in data) and "sentences" not in data:
        raise InputError(f"{path} line {lineno} is an item to attribute; " + _INPUT_FILE.format(path=path))
    if missing:
        errors_file = " (it looks like the .errors.jsonl of a run: view the results file beside it)" if (
            "error" in data and "key" in data) else ""
        raise InputError(f"{path} line {lineno} is not a mirage attribution result: it lacks "
                         f"{', '.join(repr(m) for m in missing[:4])}{', …' if len(missing) > 4 else ''}"
                         f"{errors_file}; give the JSONL written by `mirage attribute`.")
    return result_from_record(data, f"{path} line {lineno}")


def result_from_record(data: Any, where: str) -> AttributionResult:
    """An AttributionResult from a stored record (a results file's line, a scoring run's answer), checked field by
    field against the result's types and the places its fields point to (token indices, character spans, the
    saliency matrix's size), so that a page can show it; InputError naming ``where`` and the field otherwise (a
    record edited by hand: nulls, missing keys, wrong types, bad base64)."""
    if not isinstance(data, dict):
        raise InputError(f"{where} is a JSON {json_kind(data)}, not an attribution result object.")
    problem = record_problem(data, AttributionResult, "") or _reference_problem(data)
    if problem is not None:
        field_name, message = problem
        raise InputError(f"{where}: field {short_repr(field_name, 120)} {message}; give the record as "
                         "`mirage attribute` wrote it.")
    try:
        return AttributionResult.from_dict(data)
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise InputError(f"{where} is not a valid mirage attribution result ({type(err).__name__}: "
                         f"{short_repr(str(err), 200)}); give the record as `mirage attribute` wrote it.") from None


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _type_problem(value: Any, tp: Any, at: str) -> tuple[str, str] | None:
    """Where ``value`` (at field path ``at``) first differs from type ``tp``, and how; None when it conforms."""
    if tp is Any:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        problems = [_type_problem(value, option, at) for option in options if option is not type(None)]
        return None if any(p is None for p in problems) else problems[0]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return record_problem(value, tp, at)
    if origin is list:
        if not isinstance(value, list):
            return at, f"must be a list, got {json_kind(value)}"
        (item,) = typing.get_args(tp) or (Any,)
        for k, element in enumerate(value):
            found = _type_problem(element, item, f"{at}[{k}]")
            if found:
                return found
        return None
    if origin is dict:
        if not isinstance(value, dict):
            return at, f"must be an object, got {json_kind(value)}"
        _key, item = typing.get_args(tp) or (Any, Any)
        for key, element in value.items():
            found = _type_problem(element, item, f"{at}.{key}")
            if found:
                return found
        return None
    expected = {str: ("a string", lambda v: isinstance(v, str)),
                bool: ("true or false", lambda v: isinstance(v, bool)),
                int: ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
                float: ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))}.get(tp)
    if expected is not None and not expected[1](value):
        shown = "" if value is None or isinstance(value, (dict, list)) else f" {json_repr(value)}"
        return at, f"must be {expected[0]}, got {json_kind(value)}{shown}"
    return None


def record_problem(data: Any, cls: type, at: str = "") -> tuple[str, str] | None:
    """Where a stored record of dataclass ``cls`` (at field path ``at``; the top level: "") first goes wrong, as
    (field, what is wrong): not an object, a required field missing, a field of the wrong type (checked against the
    dataclass's annotations), a key a nested record does not know; None when it conforms."""
    if not isinstance(data, dict):
        return at or cls.__name__, f"must be an object, got {json_kind(data)}"
    hints = _hints(cls)
    if at:  # a nested record is built from all its keys: one it does not know is an error (the top level's are ignored)
        unknown = next((key for key in data if key not in hints), None)
        if unknown is not None:
            return f"{at}.{unknown}", f"is not a field of {cls.__name__}"
    for f in fields(cls):
        name = f"{at}.{f.name}" if at else f.name
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                return name, "is missing"
            continue
        found = _type_problem(data[f.name], hints[f.name], name)
        if found:
            return found
    return None


def _reference_problem(data: dict[str, Any]) -> tuple[str, str] | None:
    """Where a well-typed record points outside itself: a span outside its text, an answer token, document or
    sentence that does not exist, a document without its text, a saliency matrix whose data is not its size."""
    prompt, answer = len(data["prompt"]), len(data["answer"])
    n_docs = len(data["docs"])
    indices = {t["index"] for t in data["tokens"]}
    for k, d in enumerate(data["docs"]):
        if "text" not in d:
            return f"docs[{k}].text", "is missing"
    if not isinstance(data["config"].get("aggregation") or {}, dict):
        return "config.aggregation", f"must be an object, got {json_kind(data['config']['aggregation'])}"

    def span(at: str, start: int, end: int, size: int, of: str) -> tuple[str, str] | None:
        return None if 0 <= start <= end <= size else (at, f"spans {start}:{end}, outside the {of} ({size} chars)")

    checks = []
    for k, t in enumerate(data["tokens"]):
        checks.append(span(f"tokens[{k}]", t["start"], t["end"], answer, "answer"))
        checks += [span(f"tokens[{k}].top_context[{j}]", c["start"], c["end"], prompt, "prompt")
                   for j, c in enumerate(t.get("top_context") or [])]
    for k, s in enumerate(data["spans"]):
        checks.append(span(f"spans[{k}]", s["start"], s["end"], answer, "answer"))
        if not s["docs"]:
            checks.append((f"spans[{k}].docs", "is empty; an attributed span names its documents"))
        missing = [i for i in s["tokens"] if i not in indices]
        if missing:
            checks.append((f"spans[{k}].tokens", f"names answer token {missing[0]}, which the record lacks"))
    for k, s in enumerate(data["context_spans"]):
        checks.append(span(f"context_spans[{k}]", s["start"], s["end"], prompt, "prompt"))
    for k, s in enumerate(data["sentences"]):
        checks.append(span(f"sentences[{k}]", s["start"], s["end"], answer, "answer"))
    bad_docs = [d for d in data.get("truncated_docs") or [] if not 1 <= d <= n_docs]
    if bad_docs:
        checks.append(("truncated_docs", f"names document {bad_docs[0]} of {n_docs}"))
    if data.get("saliency") is not None:
        checks.append(_saliency_problem(data["saliency"], prompt))
    return next((c for c in checks if c is not None), None)


def _saliency_problem(sal: dict[str, Any], prompt: int) -> tuple[str, str] | None:
    rows, cols = len(sal["answer_tokens"]), len(sal["context_positions"])
    for name in ("context_docs", "context_offsets") + (("content",) if sal.get("content") is not None else ()):
        if len(sal[name]) != cols:
            return f"saliency.{name}", f"has {len(sal[name])} entries for {cols} context tokens"
    for j, pair in enumerate(sal["context_offsets"]):
        if len(pair) != 2 or not 0 <= pair[0] <= pair[1] <= prompt:
            return f"saliency.context_offsets[{j}]", f"must be a span [start, end] in the prompt, got {json_repr(pair)}"
    try:
        size = len(base64.b64decode(sal["data"], validate=True))
    except ValueError:
        return "saliency.data", "is not base64"
    if size != 2 * rows * cols:
        return "saliency.data", f"holds {size // 2} values for a {rows} x {cols} matrix"
    return None
