"""Progress reporting for long runs: one callable type every runner accepts, and the terminal bar the CLI passes.

A runner takes ``progress: Progress | None`` and wraps its loop as ``progress(items, total, "what")``; ``None`` means
silent. The library never prints a bar by itself, so notebooks and services choose their own.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Progress", "terminal_progress", "write_line"]

#: ``progress(iterable, total, description) -> iterable``: wraps a loop to report how far it is.
Progress = Callable[[Iterable[Any], "int | None", str], Iterable[Any]]


def terminal_progress(iterable: Iterable[Any], total: int | None, desc: str) -> Iterable[Any]:
    """A tqdm bar on stderr (the CLI's progress); ``total`` is the number of items the loop will yield.

    In a notebook with ``ipywidgets`` installed it is a widget (``tqdm.auto``); without ``ipywidgets`` a plain text
    bar, never tqdm's "IProgress not found" warning.
    """
    if importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm
    else:
        from tqdm.std import tqdm

    return tqdm(iterable, total=total, desc=desc, file=sys.stderr, dynamic_ncols=True)


def write_line(text: str, *, file: Any = None) -> None:
    """Print ``text`` (to stdout, or ``file``) without breaking a progress bar on the terminal: the bar's line is
    cleared first and drawn again below the text (``tqdm.write``), so text and bar never share a line."""
    from tqdm.std import tqdm

    tqdm.write(text, file=file or sys.stdout)
