"""What ``mirage view PATH [OTHER] -o report.html`` opens, told by what PATH is:

- a results JSONL written by ``mirage attribute``, or two of them compared side by side (:mod:`mirage.views.report`);
- a bias-study run folder, ``mirage bias … -o DIR``: ``generations.jsonl`` (or ``.jsonl.gz``) and ``results.json``
  (:mod:`mirage.views.bias_report`);
- an ELI5 scoring run folder, ``mirage score eli5 … -o DIR``: ``answers.jsonl`` (or ``.jsonl.gz``) and
  ``results.json`` (:mod:`mirage.views.scoring_report`).

Naming one of those files of a run folder (``DIR/results.json``, ``DIR/generations.jsonl.gz``, …) opens the folder.

The page goes to its output only when that file is new or is a page mirage view wrote (its ``<head>`` holds
:data:`PAGE_MARKER`): any other file (another run's results, a run folder's ``generations.jsonl``, your own page) is
refused with a StoreError, untouched. A pipe or device (``-o /dev/stdout``, a FIFO) is written into, never read.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from mirage.data.inputs import InputError
from mirage.runs.files import RESULTS_FILE, run_file
from mirage.runs.store import StoreError, is_stream, write_atomic
from mirage.views.bias_report import GENERATIONS, bias_report_html, bias_run_view
from mirage.views.report import MAX_ITEMS, write_report
from mirage.views.scoring_report import ANSWERS, eli5_report_html

__all__ = ["PAGE_MARKER", "view_kind", "write_view"]

ViewKind = Literal["results", "bias", "eli5"]
#: In the ``<head>`` of every page mirage view writes (the templates ``report.html.j2`` and ``bias.html.j2``): the
#: mark of a file it may replace.
PAGE_MARKER = '<meta name="generator" content="mirage view">'
#: How much of an existing output is read to find the mark (it comes right after ``<meta charset>``).
_HEAD_BYTES = 4096
#: The files that make a folder a run of each kind (each may be gzipped).
RUN_FILES: dict[ViewKind, tuple[str, ...]] = {"bias": (GENERATIONS, RESULTS_FILE), "eli5": (ANSWERS, RESULTS_FILE)}
EXPECTED = ("a results JSONL written by `mirage attribute`, a bias-study run folder (generations.jsonl or "
            "generations.jsonl.gz, and results.json: `mirage bias … -o DIR`), or an ELI5 run folder (answers.jsonl "
            "and results.json: `mirage score eli5 … -o DIR`)")


def folder_kind(folder: str | Path) -> ViewKind | None:
    """Which run ``folder`` holds (``bias`` or ``eli5``), or None when it holds neither's files."""
    for kind, names in RUN_FILES.items():
        if all(run_file(folder, name) is not None for name in names):
            return kind
    return None


def _run_file_names() -> set[str]:
    return {n for names in RUN_FILES.values() for name in names for n in (name, f"{name}.gz")}


def view_kind(path: str | Path) -> tuple[ViewKind, Path]:
    """What ``path`` is to ``mirage view``, and the path to open: a run folder (also when ``path`` is one of its
    files) or a results file (any other file, or a path that does not exist: reading it says what is wrong). A
    folder that is no run is an InputError naming what was expected and what the folder holds."""
    path = Path(path)
    if path.is_dir():
        kind = folder_kind(path)
        if kind is None:
            names = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
            more = f" and {len(names) - 8} more" if len(names) > 8 else ""
            held = f"it holds {', '.join(names[:8])}{more}" if names else "it is empty"
            missing = [f"{name} (the {run} run's {what})" for run, name, what in
                       (("bias", GENERATIONS, "generations"), ("ELI5", ANSWERS, "attributed answers"))
                       if run_file(path, RESULTS_FILE) is not None and run_file(path, name) is None]
            lacks = f"; with its results.json it lacks {' or '.join(missing)}" if missing else ""
            studies = sorted(str(sub) for sub in path.iterdir() if sub.is_dir() and folder_kind(sub) is not None)
            if studies:  # a protocol, sweep or retrievers folder: its studies are the runs
                more = f" (and {len(studies) - 4} more)" if len(studies) > 4 else ""
                raise InputError(f"{path} is no run but holds run folders; open one at a time, e.g. mirage view "
                                 f"{studies[0]}. Its runs: {', '.join(studies[:4])}{more}"
                                 + (f"; the overview of all of them is {path / 'protocol.md'}."
                                    if (path / "protocol.md").is_file() else "."))
            raise InputError(f"{path} is a folder mirage view cannot open: {held}{lacks}. Give {EXPECTED}.")
        return kind, path
    if path.name in _run_file_names() and (kind := folder_kind(path.parent)) is not None:
        return kind, path.parent
    return "results", path


def check_page_output(output: str | Path) -> None:
    """Refuse (StoreError) an ``output`` that exists and is not a page mirage view wrote (:data:`PAGE_MARKER`); a
    pipe or device (:func:`~mirage.runs.store.is_stream`) is no file to keep, and reading it would wait for
    ever."""
    out = Path(output)
    if (not out.exists() and not out.is_symlink()) or is_stream(out):
        return
    if out.is_dir():
        raise StoreError(f"-o {output} is a directory; give a file path, e.g. {out / 'report.html'}.")
    try:
        with out.open("rb") as fh:
            head = fh.read(_HEAD_BYTES)
    except OSError as err:
        raise StoreError(f"-o {output} exists and cannot be read ({err.strerror or err}), so mirage cannot tell it is "
                         "a page it wrote; it leaves it untouched: give another -o.") from None
    if PAGE_MARKER.encode() not in head:
        raise StoreError(f"-o {output} exists and is not a page mirage view wrote; mirage leaves it untouched: give "
                         "another -o (e.g. report.html), or delete that file first.")


def write_view(paths: str | Path | Sequence[str | Path], output: str | Path, *, title: str | None = None,
               max_items: int = MAX_ITEMS, offset: int = 0) -> Path:
    """Write the page of what ``paths`` are (:func:`view_kind`): one results file or two to compare (the items at
    positions ``offset`` to ``offset + max_items`` of each, :func:`~mirage.views.report.write_report`), or one run
    folder; returns the output path. An existing ``output`` that is not a page mirage view wrote is refused
    (:func:`check_page_output`)."""
    check_page_output(output)
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    kinds = [view_kind(p) for p in paths]
    runs = [(kind, where) for kind, where in kinds if kind != "results"]
    if runs and len(paths) > 1:
        raise InputError(f"mirage view opens one run folder at a time (two results files can be compared); got "
                         f"{len(paths)} paths, {runs[0][1]} among them a {runs[0][0]} run.")
    if not runs:
        return write_report([where for _kind, where in kinds], output, title=title, max_items=max_items,
                            offset=offset)
    kind, folder = runs[0]
    html = bias_report_html(bias_run_view(folder, title=title)) if kind == "bias" else \
        eli5_report_html(folder, title=title)
    return write_atomic(output, html)
