"""The files of a run folder (``mirage bias -o DIR``, ``mirage score eli5 -o DIR``) as ``mirage view`` reads them:
each stored plain or gzipped (``generations.jsonl`` or ``generations.jsonl.gz``, as shipped results keep them small).
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

from .inputs import InputError, parse_json
from .runs import is_record


def run_file(folder: str | Path, name: str) -> Path | None:
    """``folder/name``, or else ``folder/name.gz``; None when neither is a file."""
    for path in (Path(folder) / name, Path(folder) / f"{name}.gz"):
        if path.is_file():
            return path
    return None


def read_text(path: str | Path) -> str:
    """A run file's text, gunzipped when its name ends in ``.gz``; an InputError names a file that is not UTF-8 or
    not gzip."""
    path = Path(path)
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        return data.decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise InputError(f"{path} cannot be read ({type(err).__name__}: {err}); give the file as the run wrote "
                         "it (plain, or gzipped with a .gz name).") from None


def read_run_records(path: str | Path) -> list[dict[str, Any]]:
    """The records (JSON objects with a string ``key``) of a run's JSONL store, plain or gzipped. As
    :func:`mirage.runs.read_records`: a line that does not parse (the torn last line of a stopped run) or is not a
    record is skipped."""
    out = []
    for line in read_text(path).split("\n"):
        if not line.strip():
            continue
        try:
            value = parse_json(line)
        except ValueError:
            continue
        if is_record(value):
            out.append(value)
    return out


def read_json(path: str | Path) -> Any:
    """A run's JSON file (``results.json``), plain or gzipped; an InputError names a file that is not JSON."""
    text = read_text(path)
    try:
        return parse_json(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path} is not valid JSON ({err}); give the file as the run wrote it.") from None


def figure_uri(path: str | Path) -> str | None:
    """A run's PNG figure as a ``data:`` URI, so that a page embeds it (None when the run has none)."""
    path = Path(path)
    return f"data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}" if path.is_file() else None
