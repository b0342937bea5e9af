"""What a kind of results page is (:class:`PageKind`: how to recognise its folder, which data its results name and
how to write the page, from the folder's files alone: no model, no data) and what every kind's writer shares: the
folder's ``results.json`` (:func:`results_of`), the pipeline flags its command rebuilds (:func:`pipeline_flags_of`)
and the sections that end every page (:func:`tail_sections`). The kinds themselves are written per study
(:mod:`~mirage.views.pages.scoring`, :mod:`~mirage.views.pages.bias`, :mod:`~mirage.views.pages.tune`,
:mod:`~mirage.views.pages.bench`); their tables come from the writers the runs already use
(:mod:`mirage.scoring.tables`, :mod:`mirage.bias.tables`, :mod:`mirage.bias.full_protocol`,
:mod:`mirage.bias.retrievers_study`), and figures are formatted there only where no such writer exists (tuning runs,
benchmark JSONs)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirage.runs.files import RESULTS_FILE
from mirage.views.pages.core import files_section, read_json

__all__ = [
    "SELF_MATCH",
    "PageKind",
    "as_list",
    "first",
    "has_keys",
    "no_data",
    "pipeline_flags_of",
    "results_of",
    "tail_sections",
]




#: A self-match check's counts (``mirage.scoring.benchmarks.SELF_MATCH_FILE``).
SELF_MATCH = "self_match.json"


@dataclass(frozen=True)
class PageKind:
    """A kind of results folder: ``detect(dir)``, ``data(dir)`` (the data paths or names the results record) and
    ``render(dir, sections)`` (the page's text; ``sections(dir)`` gives the shared tail: folders, files); ``files``:
    the file(s) of the folder the page is written from, as an error names them."""

    name: str
    detect: Callable[[Path], bool]
    data: Callable[[Path], list[str]]
    render: Callable[[Path, Callable[[Path], list[str | None]]], str]
    files: str = RESULTS_FILE


def results_of(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / RESULTS_FILE
    if not path.is_file():
        return None
    value = read_json(path)
    return value if isinstance(value, dict) else None


def has_keys(*keys: str) -> Callable[[Path], bool]:
    def detect(run_dir: Path) -> bool:
        res = results_of(run_dir)
        return res is not None and all(k in res for k in keys)

    return detect


def as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def no_data(_run_dir: Path) -> list[str]:
    return []


def pipeline_flags_of(config: Mapping[str, Any], base: Mapping[str, Any], skip: Collection[str] = ()) -> list[str]:
    """The pipeline flags that turn the pipeline ``base`` into ``config`` (both as ``MirageConfig.to_dict()``), in
    the order of the sections and their fields, less the flags in ``skip`` (those the command takes no flag for, or
    gives from another setting)."""
    from mirage.options import options_argv
    from mirage.runs.experiment import pipeline_sections

    return [word for name, section_cls in pipeline_sections()
            for word in options_argv(section_cls, config.get(name, {}), skip=skip, changed=True,
                                     defaults=base.get(name, {}))]


def tail_sections(run_dir: Path, has_page: Callable[[Path], bool]) -> list[str | None]:
    """What ends every page: the run folders below it and the folder's files."""
    from mirage.views.pages.core import folders_section

    return [folders_section(run_dir, has_page), files_section(run_dir)]


def first(kinds: Mapping[str, PageKind], run_dir: Path) -> PageKind | None:
    return next((k for k in kinds.values() if k.detect(run_dir)), None)
