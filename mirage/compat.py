"""What mirage keeps reading from its earlier versions, in one place: the old names of values (accepted with a
warning), the defaults that changed after runs were published, the names records stored before a rename keep, and
the answer files ``tune eval`` wrote before :class:`~mirage.runs.store.ResumableJSONL`. Each shim goes with the
records and flags it reads; renamed flags are declared on their field instead (``renamed_from`` in
:mod:`mirage.options`), and fields added after stores were first written carry ``later`` in their metadata.

    renamed("learned", RULE_ALIASES, "aggregation.rule={old!r} is now called {new!r}")  # "likelihood", and a warning
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mirage.checks import ConfigError
from mirage.runs.store import ResumableJSONL, settings_differences, write_synced

__all__ = ["CHANGED_DEFAULTS", "GROUP_ALIASES", "LATER_AGGREGATION", "RULE_ALIASES", "RULE_TIMINGS",
           "STORED_RULE_NAMES", "convert_v0_answer_store", "renamed", "stored_aggregation"]

#: Old names of ``aggregation.rule`` values (``--citation-rule``, ``tune --judge-rule``), still accepted.
RULE_ALIASES = {"learned": "likelihood"}
#: Old names of ``mirage score xor-attriqa``'s setting groups (``--settings``), still accepted.
GROUP_ALIASES = {"learned": "likelihood"}
#: What each new name of the renames above is, as the warnings say it.
_WHAT = {"likelihood": "the passage-likelihood classifier"}

#: The key of a citation rule's time in a result's ``timings``: none for ``reference`` (aggregation's own work),
#: ``learned`` for ``likelihood`` (its key in the results written before the rename); any other rule's name.
RULE_TIMINGS: dict[str, str | None] = {"reference": None, "likelihood": "learned"}
#: A citation rule's name in the fingerprints of stored outputs, where it differs from today's: the name stores were
#: first written with, so that they resume.
STORED_RULE_NAMES = {"likelihood": "learned"}
#: Aggregation fields added after stores were first written: left out of a fingerprint while at their defaults (the
#: behaviour those stores were written with), so existing runs resume.
LATER_AGGREGATION = ("context", "keep_saliency", "rule", "learned_model", "ranking")

#: Defaults that changed after runs were published: (benchmark, section, field, the value before). A run that
#: recorded the value before gets it back as a flag on its results page, so that its recorded command still
#: reproduces it (:func:`mirage.config.flags_for_changed_defaults`); a run that predates the field had the value
#: before.
CHANGED_DEFAULTS: tuple[tuple[str, str, str, Any], ...] = (("xor-attriqa", "cci", "target", "logprob"),)


def stored_aggregation(aggregation: Any) -> dict[str, Any]:
    """An ``AggregationConfig`` as fingerprints hold it: the fields added after stores were first written
    (:data:`LATER_AGGREGATION`) left out at their defaults, the rule under the name those stores knew it by
    (:data:`STORED_RULE_NAMES`), so that they resume."""
    out = dataclasses.asdict(aggregation)
    defaults = dataclasses.asdict(type(aggregation)())
    out["rule"] = STORED_RULE_NAMES.get(out["rule"], out["rule"])
    return {k: v for k, v in out.items() if k not in LATER_AGGREGATION or v != defaults[k]}


def renamed(value: Any, aliases: Mapping[str, str], says: str, *, note: bool = False, stacklevel: int = 2) -> Any:
    """``value`` under its current name: ``aliases[value]`` for an old name, after a DeprecationWarning whose text is
    ``says`` (formatted with ``old`` and ``new``) followed by what the new name is and that the old one will go
    (with ``note``, the same words on stderr as ``mirage: note: …``, for a command-line user); any other value as
    it is. ``stacklevel`` counts from the caller, as :func:`warnings.warn`'s does."""
    if not isinstance(value, str) or value not in aliases:
        return value
    new = aliases[value]
    text = f"{says.format(old=value, new=new)} ({_WHAT[new]}); the old name will go."
    if note:
        print(f"mirage: note: {text}", file=sys.stderr)
    warnings.warn(text, DeprecationWarning, stacklevel=stacklevel + 1)
    return new


#: How an answer file written before :class:`mirage.runs.store.ResumableJSONL` begins: a header line, then rows
#: keyed by ``id``.
_V0_PREFIX = b'{"header": '


def _keep_original(path: Path, data: bytes) -> Path:
    """Write ``data`` (``path``'s original bytes) to ``STEM.v0.jsonl`` beside it, or ``STEM.v0-2.jsonl``, … where
    that exists (a backup is never overwritten), synced to disk; the backup's path."""
    n = 1
    while True:
        backup = path.with_name(f"{path.stem}.v0{'' if n == 1 else f'-{n}'}{path.suffix}")
        try:
            write_synced(backup, data, exclusive=True)
            return backup
        except FileExistsError:
            n += 1


def _v0_rows(lines: Sequence[bytes]) -> tuple[dict[str, dict[str, Any]], int]:
    """The answer rows of an earlier-format file's lines after its header, by ``id`` (a repeated id: the last
    answer wins, as the earlier reader had it), and how many lines were damaged."""
    rows: dict[str, dict[str, Any]] = {}
    dropped = 0
    for raw in lines:
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except ValueError:
            row = None
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            dropped += 1
            continue
        rows[row["id"]] = row
    return rows, dropped


def convert_v0_answer_store(path: Path, settings: dict[str, Any], keys: Mapping[str, set[str]]) -> None:
    """Convert the answer file ``path`` in place if an earlier mirage wrote it (first line ``{"header": settings}``,
    then one row per answer keyed by ``id``); any other file is left to :class:`mirage.runs.store.ResumableJSONL`.

    ``keys``: per example id of this run, the store keys of its examples. Each row becomes a record under its id's
    key (rows of ids not in ``keys``, or of an id with several keys, are not carried over); damaged lines (the torn
    last line of a killed run) are dropped, so those answers are redone. The new file replaces the old one
    atomically, the original is kept as ``STEM.v0.jsonl`` (or ``STEM.v0-N.jsonl``, never overwriting a file) and a
    warning says what was converted. A header other than ``settings`` raises :class:`ConfigError`."""
    if not path.is_file():
        return
    with path.open("rb") as fh:
        if fh.read(len(_V0_PREFIX)) != _V0_PREFIX:
            return
    staging = path.with_name(path.name + ".converting")
    with ResumableJSONL(staging, settings=settings) as staged:  # its lock lets one process at a time convert
        data = path.read_bytes()
        if not data.startswith(_V0_PREFIX):  # another process converted it meanwhile
            staging.unlink()
            return
        head, *lines = data.split(b"\n")
        try:
            header = json.loads(head)["header"]
        except (ValueError, TypeError, KeyError):  # a header cut short: no answer was ever stored
            header = None
        if header is not None and header != settings:
            staging.unlink()
            diffs = settings_differences(header, settings)
            raise ConfigError(f"{path} holds answers of another evaluation ({'; '.join(diffs)}); give another output "
                              "file, or delete it to start over.")
        rows, dropped = _v0_rows(lines)
        carried = {next(iter(keys[i])): row for i, row in rows.items() if len(keys.get(i, ())) == 1}
        for key, row in carried.items():
            staged.write_once({"key": key, **row})  # write fsyncs each record
        backup = _keep_original(path, data)
        os.replace(staging, path)
    left = len(rows) - len(carried)
    warnings.warn(f"{path}: converted {len(carried)} stored answer(s) from mirage's earlier answer-file format and "
                  f"kept the original as {backup}"
                  + (f"; {dropped} damaged line(s) dropped (those answers are redone)" if dropped else "")
                  + (f"; {left} answer(s) of items not in this run stay only in {backup.name}" if left else "")
                  + ".", stacklevel=3)
