"""``mirage attribute`` as a library runner: every item of a file of RAG items attributed into a resumable JSONL
store, one line per item (:func:`attribute_file`), the items that cannot be attributed in a second store beside it
(``OUTPUT.errors.jsonl``, :func:`errors_path`), in one process or in the shards of several.

    from mirage.runs.attribute import AttributeOptions, attribute_file
    from mirage.runs.experiment import ExperimentConfig

    skipped = attribute_file(ExperimentConfig(), AttributeOptions(input="items.jsonl", output="out.jsonl"))

A rerun skips the items already in the output; an item whose id the output holds for other content is refused
before any model loads; what needs no model (each item's fields) is checked before the model loads.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.data.inputs import InputError, make_item
from mirage.data.readers import read_items
from mirage.options import cli_arg
from mirage.runs.experiment import ExperimentConfig
from mirage.runs.progress import Progress, write_line
from mirage.runs.sharding import ShardedJSONL, StoreFor, in_shards
from mirage.runs.store import StoreError, changed_ids, drop_resolved, item_keys, read_records

if TYPE_CHECKING:
    from mirage.attribution.results import AttributionResult
    from mirage.pipeline import Mirage

__all__ = ["AttributeOptions", "attribute_file", "errors_path"]


@dataclass(frozen=True, kw_only=True)
class AttributeOptions:
    """What ``mirage attribute`` reads and writes beside its experiment (:class:`ExperimentConfig`: the model, the
    pipeline, ``--limit``)."""

    input: str = cli_arg(flag="input", help=(
        'JSON list or JSONL of {"question", "docs": [{"title", "text"}], "output"?}, or a dataset of such items '
        "(e.g. eli5-alce; `mirage data list`)"))
    output: str = cli_arg(flag="--output", aliases=("-o",), help=(
        "output JSONL (re-running skips finished items; an id names one item's result, so an item whose content "
        "changed under an id already stored is refused: give a new -o)"))
    quiet: bool = cli_arg(False, flag="--quiet", help="do not print the attributed answers")


def errors_path(output: str | Path) -> Path:
    """Where :func:`attribute_file` records the items it skipped: ``OUTPUT.errors.jsonl``."""
    return Path(str(output) + ".errors.jsonl")


def attribute_file(exp: ExperimentConfig, options: AttributeOptions, *,
                   on_result: Callable[[AttributionResult], None] | None = None,
                   progress: Progress | None = None) -> int | None:
    """Attribute every item of ``options.input`` (from ``exp.skip``, at most ``exp.limit``) with ``exp``'s model and
    pipeline into ``options.output``, each item's result as it finishes (``on_result`` is called with it; ``progress``
    wraps the items being attributed). An item that is not valid, or fails, is skipped and recorded in
    :func:`errors_path`, never stopping the run; the errors of items that have a result now are dropped from it.
    Returns the number of items skipped, or None where this process ran one share of a sharded run and another
    merges (``mirage.runs.sharding``). The model loads only if some item still needs it."""
    exp.check_device()
    items = list(read_items(options.input))[exp.skip or 0:]
    if exp.limit is not None:
        items = items[: exp.limit]
    keys = item_keys(raw for _index, raw in items)
    settings = exp.fingerprint()
    loaded: list[Mirage] = []
    errors = errors_path(options.output)

    def compute(store_for: StoreFor) -> int:
        out = store_for(options.output, settings=settings)
        _refuse_changed_ids(out, [(key, i, raw) for key, (i, raw) in zip(keys, items) if key not in out.done],
                            options.input, options.output)
        skipped = _Skipped(store_for(errors, settings=settings))
        todo = [(key, i, raw) for key, (i, raw) in zip(keys, items) if key not in out.done and out.owns(key)]
        where = f"rank {out.shard.rank} of {out.shard.world}: " if out.shard.world > 1 else ""
        valid = _valid_items(todo, skipped)
        print(f"{where}{len(items) - len(todo)} of {len(items)} items already in {options.output}"
              f"{' or in other ranks’ shares' if where else ''}; {skipped.count} invalid; attributing {len(valid)}.",
              file=sys.stderr)
        if valid:
            if not loaded:
                loaded.append(exp.load_mirage())
            _attribute_items(loaded[0], valid, out, skipped, on_result=on_result, progress=progress)
        if todo:
            print(f"done: {len(todo) - skipped.count} attributed"
                  + (f", {skipped.count} skipped (see {skipped.errors.path})" if skipped.count else "") + ".",
                  file=sys.stderr)
        return skipped.count

    failed = in_shards(compute, keep=[options.input])
    if failed is None:
        return None
    # the errors of items that have a result now are no longer errors of this output
    drop_resolved(errors, {r["key"] for r in read_records(options.output)}, settings=settings)
    return failed


class _Skipped:
    """Items skipped by :func:`attribute_file`: each written once to the errors store, reported and counted."""

    def __init__(self, errors: ShardedJSONL) -> None:
        self.errors = errors
        self.count = 0

    def add(self, key: str, index: int, err: Exception) -> None:
        self.count += 1
        message = str(err) if isinstance(err, InputError) else f"item {index}: {type(err).__name__}: {err}"
        self.errors.write_once({"key": key, "index": index, "error": message})
        write_line(f"skipped: {message}", file=sys.stderr)


def _valid_items(todo: list[tuple[str, int, Any]], skipped: _Skipped) -> list[tuple[str, int, Any]]:
    """The items of ``todo`` that read as items (what needs no model is checked before the model loads)."""
    valid = []
    for key, index, raw in todo:
        try:
            if isinstance(raw, Exception):
                raise raw
            make_item(raw, item=index)
        except InputError as err:
            skipped.add(key, index, err)
            continue
        valid.append((key, index, raw))
    return valid


def _attribute_items(mirage: Mirage, valid: list[tuple[str, int, Any]], out: ShardedJSONL, skipped: _Skipped, *,
                     on_result: Callable[[AttributionResult], None] | None, progress: Progress | None) -> None:
    """Attribute each item, writing its result to ``out`` (and passing it to ``on_result``); an item that fails is
    skipped, never stopping the batch."""
    for key, index, raw in progress(valid, len(valid), "attribute") if progress else valid:
        try:
            res = mirage.attribute_item(raw, index=index)
        except Exception as err:  # one bad item never stops the batch
            logging.getLogger(__name__).info("item %s failed", index, exc_info=True)
            skipped.add(key, index, err)
            continue
        out.write({"key": key, "index": index, **res.to_dict()})
        if on_result is not None:
            on_result(res)


def _refuse_changed_ids(out: ShardedJSONL, new: list[tuple[str, int, Any]], input_path: str, output: str) -> None:
    """An id names one item's result: refuse (StoreError, before any model loads) an item to attribute whose id
    ``out`` already holds for other content (its question, documents or answer changed since)."""
    ids = [(key, raw.get("id") if isinstance(raw, dict) else None) for key, _i, raw in new]
    if not any(item_id is not None for _key, item_id in ids):
        return
    changed = changed_ids(out.records(), ids)
    if changed:
        item_id, key = changed[0]
        index = next(i for k, i, _raw in new if k == key)
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise StoreError(f"item {index} of {input_path} has id {item_id!r}{more}, but {output} holds a result under "
                         "that id made from other content (its question, documents or answer changed): an id names "
                         f"one item's result. Give a new -o, or remove the old results (delete {output}, or its "
                         "line with that id) and run again.")
