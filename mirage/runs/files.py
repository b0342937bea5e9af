"""The files of a run folder (``mirage bias -o DIR``, ``mirage score eli5 -o DIR``) as ``mirage view`` reads them:
each stored plain or gzipped (``generations.jsonl`` or ``generations.jsonl.gz``, as shipped results keep them small).
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mirage.data.inputs import InputError
from mirage.data.readers import parse_json, read_text
from mirage.runs.store import parse_records

__all__ = ["RESULTS_FILE", "figure_uri", "portable_arg", "portable_command", "read_json", "read_run_records",
           "run_file"]


def run_file(folder: str | Path, name: str) -> Path | None:
    """``folder/name``, or else ``folder/name.gz``; None when neither is a file."""
    for path in (Path(folder) / name, Path(folder) / f"{name}.gz"):
        if path.is_file():
            return path
    return None


def read_run_records(path: str | Path) -> list[dict[str, Any]]:
    """The records (JSON objects with a string ``key``) of a run's JSONL store, plain or gzipped, by the store's rule
    (:func:`mirage.runs.store.parse_records`: a line that does not parse, as the torn last line of a stopped run, or
    is not a record is skipped); unlike :func:`mirage.runs.store.read_records` (a run resuming), an InputError names
    a file that is missing or not text (:func:`mirage.data.readers.read_text`)."""
    return parse_records(read_text(path).split("\n"))


def read_json(path: str | Path, *, what: str = "UTF-8 text file", fix: str = "give the file as the run wrote it.",
              ) -> Any:
    """A JSON file (a run's ``results.json``, ``run.json``, a saved result), plain or gzipped: the one reader of
    mirage's JSON files (:func:`mirage.data.readers.read_text`, then :func:`mirage.data.readers.parse_json`, which
    callers with errors of their own use as this does). An InputError names a file that is missing or not text
    (:func:`~mirage.data.readers.read_text`'s, ``what`` saying what the file should be) or not JSON (``fix``: what
    to do then)."""
    text = read_text(path, what=what)
    try:
        return parse_json(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path} is not valid JSON ({err}); {fix}") from None


#: The file every run folder's results are in (what its page, its view and a later run read).
RESULTS_FILE = "results.json"
#: The first bytes of every PNG file.
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: The largest figure a page embeds.
MAX_FIGURE_BYTES = 32 * 1024 * 1024


def figure_uri(path: str | Path, folder: str | Path | None = None) -> str | None:
    """A run's PNG figure as a ``data:`` URI, so that a page embeds it; None when the run has none. Only a real PNG
    (its signature checked) that lies inside ``folder`` (default: the figure's own folder) is read: a link leading
    out of the folder (to a key file, say) or any other file is left out of the page with a warning, so that a page
    meant to be shared never carries a file the run did not make."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return None
    refused = _outside_or_not_png(path, Path(folder) if folder is not None else path.parent)
    if refused:
        warnings.warn(f"{path}: not embedded in the page ({refused}).", stacklevel=2)
        return None
    return f"data:image/png;base64,{base64.b64encode(_read_png(path)).decode()}"


def _outside_or_not_png(path: Path, folder: Path) -> str | None:
    """Why ``path`` is no figure of ``folder`` to embed, or None when it is one."""
    try:
        real = path.resolve(strict=True)
        if not real.is_relative_to(folder.resolve(strict=True)):
            return f"it leads out of {folder}"
        if not real.is_file():
            return "not a file"
        if real.stat().st_size > MAX_FIGURE_BYTES:
            return f"larger than {MAX_FIGURE_BYTES // 2**20} MB"
        with real.open("rb") as fh:
            head = fh.read(len(PNG_SIGNATURE))
    except (OSError, RuntimeError) as err:  # RuntimeError: a loop of links
        return f"cannot be read: {getattr(err, 'strerror', None) or err}"
    return None if head == PNG_SIGNATURE else "not a PNG image"


def _read_png(path: Path) -> bytes:
    """The bytes of a figure :func:`_outside_or_not_png` accepted, read without following a link swapped in since."""
    fd = os.open(path.resolve(strict=True), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        return fh.read(MAX_FIGURE_BYTES + 1)[:MAX_FIGURE_BYTES]


def portable_arg(arg: str, cwd: Path) -> str:
    """A command-line word without the machine's absolute paths: an absolute path becomes relative to ``cwd`` when
    it is under it, else its last name (``/tmp/abc/out`` → ``out``)."""
    if os.path.isabs(arg):
        path = Path(arg)
        return path.relative_to(cwd).as_posix() if path.is_relative_to(cwd) else path.name
    if "=" in arg and arg.startswith("--"):
        flag, value = arg.split("=", 1)
        return f"{flag}={portable_arg(value, cwd)}"
    return arg


def portable_command(argv: Sequence[str], cwd: str | Path | None = None) -> str:
    """``mirage ARGS…`` as a shell line, absolute paths made relative to ``cwd`` (default: the working folder)."""
    here = Path(cwd or Path.cwd())
    return shlex.join(["mirage", *(portable_arg(a, here) for a in argv)])
