"""Results pages: ``DIR/README.md`` written from a run folder's results alone (no model, no data), by the run itself
and by ``mirage report DIR``.

    from mirage.views.pages import write_page
    write_page("out/xor")            # out/xor/README.md from out/xor/results.json (and provenance.json)

A page says the settings, the data (as given, with the SHA-256 the run recorded), the tables, the plots, the versions
and the command that reproduces the run. One writer per kind of results, in :data:`PAGE_KINDS` (keyed by the kind's
name; :func:`register_page_kind` adds one); the kind of a folder is the first whose ``detect`` accepts it.
A README.md that ``mirage report`` did not write (no :data:`~mirage.views.pages.core.MARK` on its first line) is never
overwritten.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mirage.data.inputs import InputError
from mirage.options import add_options, cli_arg
from mirage.runs.files import portable_command
from mirage.runs.store import write_atomic
from mirage.views.pages.bench import BENCH_SCALE_PAGE, BENCHMARK_JSON_PAGE
from mirage.views.pages.bias import BIAS_PROTOCOL_PAGE, BIAS_RETRIEVERS_PAGE, BIAS_STUDY_PAGE, BIAS_SWEEP_PAGE
from mirage.views.pages.core import MARK, PAGE, Provenance, data_entries, subfolders, write_provenance
from mirage.views.pages.kinds import PageKind, first, tail_sections
from mirage.views.pages.scoring import (
    ELI5_PAGE,
    SELF_MATCH_CHECKS_PAGE,
    SELF_MATCH_PAGE,
    XOR_ATTRIQA_PAGE,
    XOR_PEERS_PAGE,
)
from mirage.views.pages.tune import TUNE_FOLLOW_PAGE, TUNE_PAGE

#: The built-in kinds, in the order they are tried (the benchmark-JSON folder last: it takes any JSON).
BUILTIN: tuple[PageKind, ...] = (XOR_ATTRIQA_PAGE, ELI5_PAGE, BIAS_STUDY_PAGE, BIAS_PROTOCOL_PAGE, BIAS_SWEEP_PAGE,
                                 BIAS_RETRIEVERS_PAGE, XOR_PEERS_PAGE, TUNE_PAGE, BENCH_SCALE_PAGE, TUNE_FOLLOW_PAGE,
                                 SELF_MATCH_CHECKS_PAGE, SELF_MATCH_PAGE, BENCHMARK_JSON_PAGE)
#: Page writers by results kind, tried in order.
PAGE_KINDS: dict[str, PageKind] = {k.name: k for k in BUILTIN}


def register_page_kind(kind: PageKind, *, before: str | None = "benchmark-json") -> None:
    """Add (or replace) a page writer; it is tried before ``before`` (default: before the catch-all JSON folder)."""
    items = [(n, k) for n, k in PAGE_KINDS.items() if n != kind.name]
    at = next((i for i, (n, _k) in enumerate(items) if n == before), len(items))
    items.insert(at, (kind.name, kind))
    PAGE_KINDS.clear()
    PAGE_KINDS.update(items)


def page_kind(run_dir: str | Path) -> str | None:
    """The name of the kind of results ``run_dir`` holds, or None."""
    kind = first(PAGE_KINDS, Path(run_dir)) if Path(run_dir).is_dir() else None
    return kind.name if kind else None


def render_page(run_dir: str | Path) -> str:
    """The page of a results folder, from its files alone. InputError if it holds no results of a known kind."""
    run_dir = Path(run_dir)
    kind = first(PAGE_KINDS, run_dir) if run_dir.is_dir() else None
    if kind is None:
        raise InputError(f"{run_dir} holds no results mirage writes a page for (results.json of `mirage score` or "
                         f"`mirage bias`, protocol.json, sweep.json, retrievers.json, peers.json, tuning records or "
                         f"benchmark JSONs); give a run's output folder.")
    try:
        return kind.render(run_dir, lambda d: tail_sections(d, _holds_results))
    except InputError:
        raise
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as err:  # a file hand-edited or another's
        raise InputError(f"{run_dir / kind.files}: not the {kind.name} results mirage writes "
                         f"({type(err).__name__}: {err}); restore the file the run wrote, or run it again.") from None


def _holds_results(folder: Path) -> bool:
    """Whether ``folder`` holds results of a known kind, or results files it cannot read (its page says why)."""
    try:
        return first(PAGE_KINDS, folder) is not None
    except InputError:
        return True


def ours(path: Path) -> bool:
    """Whether ``path`` is absent or a page ``mirage report`` wrote (so it may be rewritten); never read when it is
    no regular file (a FIFO would make the read wait for ever)."""
    if not path.exists():
        return True
    if not path.is_file():
        return False
    with path.open(encoding="utf-8", errors="replace") as f:
        return f.readline().rstrip("\n") == MARK


def write_page(run_dir: str | Path) -> Path:
    """Write ``run_dir/README.md`` (:func:`render_page`); InputError rather than overwrite a README.md mirage did not
    write."""
    path = Path(run_dir) / PAGE
    if not ours(path):
        raise InputError(f"{path} was not written by mirage (its first line is not the page mark); move it away to "
                         "have the results page written there.")
    text = render_page(run_dir)
    write_atomic(path, text)
    return path


def page_folders(root: str | Path) -> list[Path]:
    """``root`` and every folder below it (:func:`~mirage.views.pages.core.subfolders`: no symbolic link followed)
    that :func:`_holds_results` (sorted)."""
    root = Path(root)
    return [p for p in [root, *subfolders(root)] if _holds_results(p)]


def write_pages(root: str | Path, *, failed: Callable[[InputError], None] | None = None) -> list[Path]:
    """:func:`write_page` for every folder of :func:`page_folders`; folders whose README.md is the user's are left
    alone (and not returned). A folder whose page cannot be written (its results unreadable or of another shape)
    goes to ``failed`` and the others are still written; without ``failed`` its InputError is raised."""
    written = []
    for folder in page_folders(root):
        try:
            if ours(folder / PAGE):
                written.append(write_page(folder))
        except InputError as err:
            if failed is None:
                raise
            failed(err)
    return written


def record_run(run_dir: str | Path, argv: Sequence[str], *, cwd: str | Path | None = None) -> Path | None:
    """After a run: record its command (``argv``, the words after ``mirage``, without machine paths) and the SHA-256
    of the data its results name in ``run_dir/provenance.json``, then write the pages of ``run_dir`` and the run
    folders below it. Returns the page, or None where ``run_dir`` holds no results of a known kind (or, under a
    launcher, on a rank other than 0, whose results rank 0 writes)."""
    run_dir = Path(run_dir)
    if os.environ.get("RANK", "0") not in ("", "0") or not run_dir.is_dir():
        return None
    kind = first(PAGE_KINDS, run_dir)
    if kind is None or kind.name == "benchmark-json":  # JSON files alone are no run's results
        return None
    folders = [p.relative_to(run_dir).as_posix() for p in page_folders(run_dir) if p != run_dir]
    write_provenance(run_dir, Provenance(command=portable_command(argv, cwd), data=data_entries(kind.data(run_dir)),
                                         folders=folders))
    write_pages(run_dir)
    return run_dir / PAGE


# -- the command ------------------------------------------------------------------------------------------------------

REPORT_HELP = "write a run folder's results page (DIR/README.md) from its results alone"


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    """What ``mirage report`` writes pages for (:func:`write_page`, :func:`write_pages`)."""

    dir: str = cli_arg(flag="dir", help=(
        "a run's output folder (mirage score, bias, bias-protocol, tune; benchmarks/results), or a file in it"))
    recursive: bool = cli_arg(False, flag="--recursive", aliases=("-r",), help=(
        "also every folder below DIR that holds results (e.g. benchmarks/results)"))


def cmd_report(args: argparse.Namespace) -> int:
    folder = Path(args.dir).parent if Path(args.dir).is_file() else Path(args.dir)  # DIR/results.json names DIR
    failed: list[InputError] = []
    written = write_pages(folder, failed=failed.append) if args.recursive else [write_page(folder)]
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    for err in failed:
        print(f"mirage: error: {err}", file=sys.stderr)
    if failed:
        raise InputError(f"{len(failed)} folder{'s' * (len(failed) != 1)} under {args.dir} got no page (each named "
                         "above); mend their files and run mirage report again.")
    if not written:
        raise InputError(f"no folder under {args.dir} holds results mirage writes a page for.")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``mirage report DIR [--recursive]``."""
    p = sub.add_parser("report", help=REPORT_HELP,
                       description="Write DIR/README.md: the settings, the data and its checksums, the tables, the "
                                   "plots, the versions and the command, from the files the run wrote (no model, "
                                   "no data). A README.md mirage did not write is never overwritten.")
    add_options(p, ReportOptions)
    p.set_defaults(func=cmd_report)


__all__ = ["BUILTIN", "PAGE_KINDS", "PageKind", "ReportOptions", "page_folders", "page_kind", "record_run", "register",
           "register_page_kind", "render_page", "write_page", "write_pages"]
