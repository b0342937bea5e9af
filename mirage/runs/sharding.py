"""Runs split across processes: each rank takes a disjoint shard of the work and writes its own resumable JSONL.

Launch any mirage run command with an existing engine, which sets ``RANK`` and ``WORLD_SIZE``::

    torchrun --nproc-per-node 2 -m mirage.cli score xor-attriqa DATA... -o DIR
    accelerate launch --num_processes 2 -m mirage.cli score xor-attriqa DATA... -o DIR

Rank r of w owns the keys whose stable hash is r modulo w, and writes ``NAME.rank<r>-of-<w>.jsonl`` beside the
single-process file ``NAME.jsonl``. Every store reads all of them, so a run resumes under any number of processes.
When its shard is done, each rank waits for the others (a ``gloo`` process group, so CPUs work too); rank 0 then
runs the command's work once more over the merged records, which finds everything done and writes the same
``results.json`` a single process would (items the pipeline rejected are retried there, so the bad-row counts
match too), and folds the rank files into the single-process files. A rank only ever writes its own file (other
ranks' files are read, never rewritten, while they may be appending). Ranks started without a rendezvous (separate
jobs with ``RANK``/``WORLD_SIZE`` set by hand and ``MIRAGE_SHARD_NO_SYNC=1``) just finish their shard; running the
same command once more without a launcher merges.

A file is a rank's file only if mirage wrote it as that rank: every record carries ``"mirage_shard": "<r>-of-<w>"``
matching its name (and, for a store with settings, the run's settings, or the store refuses to open). Any other file
that happens to be named like one (an input ``data.rank0-of-2.jsonl``, someone's ``notes.rank1-of-3.jsonl``) is
neither read, nor folded, nor removed; nor is a file the run names as an input (``in_shards(..., keep=...)``).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from mirage.runs.store import (
    ResumableJSONL,
    StoreError,
    dumps_record,
    is_record,
    is_torn_record,
    read_records,
    settings_differences,
    write_atomic,
)

__all__ = ["SHARD_FIELD", "Shard", "ShardError", "ShardedJSONL", "StoreFor", "consolidate", "in_shards", "owns",
           "report_share_done", "shard_files", "shard_path"]

ResultT = TypeVar("ResultT")


class ShardError(ValueError):
    """RANK / WORLD_SIZE are set but do not describe a valid shard."""


@dataclass(frozen=True)
class Shard:
    """This process's share of a run: rank ``rank`` of ``world`` processes."""

    rank: int = 0
    world: int = 1

    def __post_init__(self) -> None:
        if self.world < 1 or not 0 <= self.rank < self.world:
            raise ShardError(f"shard rank {self.rank} of {self.world}: "
                             "need 0 <= RANK < WORLD_SIZE and WORLD_SIZE >= 1.")

    @classmethod
    def from_env(cls) -> Shard:
        """The shard ``torchrun`` / ``accelerate launch`` describe in ``RANK`` and ``WORLD_SIZE`` (one process if
        unset)."""
        rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
        if world is None:
            return cls()
        try:
            rank_n, world_n = int(rank or 0), int(world)
        except ValueError as err:
            raise ShardError(f"RANK={rank!r} WORLD_SIZE={world!r}: both must be integers (set by torchrun or "
                             "accelerate launch).") from err
        return cls(rank=rank_n, world=world_n)

    @property
    def is_main(self) -> bool:
        """Rank 0 merges and writes the results."""
        return self.rank == 0

    def owns(self, key: str) -> bool:
        """Whether this rank computes ``key`` (a stable hash, independent of item order)."""
        if self.world == 1:
            return True
        digest = hashlib.sha1(key.encode("utf-8")).digest()
        return int.from_bytes(digest[:8], "big") % self.world == self.rank

    def barrier(self) -> None:
        """Wait until every rank reaches this point (a gloo process group, set up on first use)."""
        if self.world == 1 or os.environ.get("MIRAGE_SHARD_NO_SYNC") == "1":
            return
        import torch.distributed as dist

        if not dist.is_initialized():
            if "MASTER_ADDR" not in os.environ:
                raise ShardError("WORLD_SIZE > 1 but MASTER_ADDR is unset: start the ranks with torchrun or "
                                 "accelerate launch, or set MIRAGE_SHARD_NO_SYNC=1 and merge by running the command "
                                 "once more in one process.")
            # Ranks of a long run finish far apart: wait for days, not gloo's default 30 minutes.
            dist.init_process_group("gloo", rank=self.rank, world_size=self.world,
                                    timeout=datetime.timedelta(days=7))
        dist.barrier()


def report_share_done(what_rank0_does: str = "writes the results") -> int:
    """On a rank other than 0 after :func:`in_shards`: say on stderr that this rank's share is done; exit status 0."""
    shard = Shard.from_env()
    print(f"rank {shard.rank} of {shard.world}: shard done; rank 0 {what_rank0_does}.", file=sys.stderr)
    return 0


#: The field that marks a record written by one rank of a sharded run: ``"<rank>-of-<world>"``.
SHARD_FIELD = "mirage_shard"


class ShardedJSONL(ResumableJSONL):
    """A resumable JSONL store seen by one rank: it reads every rank's file and writes its own (each record marked
    with :data:`SHARD_FIELD`, which :meth:`records` leaves out)."""

    def __init__(self, path: str | Path, shard: Shard, *, settings: Mapping[str, Any] | None = None) -> None:
        base = Path(path)
        self.base = base
        self.shard = shard
        own = base if shard.world == 1 else shard_path(base, shard.rank, shard.world)
        self.created = not own.exists()  # by this store: removed again if it stays empty (:func:`in_shards`)
        super().__init__(own, settings=settings)
        try:
            if own != base and own.stat().st_size > 0 and rank_records(own) is None:
                raise StoreError(f"{own} is named like the file of rank {shard.rank} of {shard.world}, but mirage did "
                                 "not write it as that rank; mirage leaves it untouched: give another output path.")
            for other in shard_files(base):
                if other != own:  # another rank may be appending to it: read only
                    for record in _file_records(base, other):
                        _check_settings(other, record, self.settings)
                        self.done.add(record["key"])
        except BaseException:  # a refused store holds no lock
            self.close()
            raise

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one record; a rank of several marks it as its own (:data:`SHARD_FIELD`)."""
        if self.shard.world > 1:
            record = {**record, SHARD_FIELD: shard_tag(self.shard.rank, self.shard.world)}
        super().write(record)

    def owns(self, key: str) -> bool:
        """Whether this rank computes ``key``."""
        return self.shard.owns(key)

    def records(self) -> list[dict[str, Any]]:
        """The records of every rank's file (the single-process file first), without the ranks' marks."""
        out: list[dict[str, Any]] = []
        for path in shard_files(self.base):
            out.extend(_file_records(self.base, path))
        return out


def shard_tag(rank: int, world: int) -> str:
    """The mark of rank ``rank`` of ``world`` (:data:`SHARD_FIELD`)."""
    return f"{rank}-of-{world}"


def shard_path(base: Path, rank: int, world: int) -> Path:
    """``NAME.rank<r>-of-<w>.jsonl`` beside ``NAME.jsonl``."""
    return base.with_name(f"{base.stem}.rank{rank}-of-{world}{base.suffix}")


def _named_rank(base: Path, path: Path) -> tuple[int, int] | None:
    """``(rank, world)`` when ``path`` is named as a rank's file of ``base``."""
    m = re.fullmatch(re.escape(base.stem) + r"\.rank(\d+)-of-(\d+)" + re.escape(base.suffix), path.name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def rank_records(path: Path) -> list[dict[str, Any]] | None:
    """The records of a rank's file ``NAME.rank<r>-of-<w>.SUFFIX``, without their marks; None when mirage did not
    write ``path`` as the rank its name says: any line that is not a record marked with that rank (a torn last line,
    cut off mid-write, is skipped), or no record at all. Never writes."""
    m = re.search(r"\.rank(\d+)-of-(\d+)(\.[^.]*)?$", path.name)
    if m is None or not path.is_file():
        return None
    tag = shard_tag(int(m.group(1)), int(m.group(2)))
    try:
        data = path.read_bytes()
    except OSError:
        return None
    *complete, tail = data.split(b"\n")
    out = []
    for raw in complete:
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        if not is_record(value) or value.get(SHARD_FIELD) != tag:
            return None
        out.append({k: v for k, v in value.items() if k != SHARD_FIELD})
    if tail.strip():
        try:
            value = json.loads(tail)
        except ValueError:
            value = None
        if is_record(value) and value.get(SHARD_FIELD) == tag:  # a whole record that lost its newline
            out.append({k: v for k, v in value.items() if k != SHARD_FIELD})
        elif not is_torn_record(tail, after_records=bool(out)):
            return None
    return out or None  # no record at all: nothing says mirage wrote it


def _check_settings(path: Path, record: Mapping[str, Any], settings: Mapping[str, Any] | None) -> None:
    """A StoreError when a rank's record was made with other ``settings`` than the run's (None: any)."""
    if settings is not None and record.get("settings") != settings:
        diffs = settings_differences(record.get("settings"), settings)
        raise StoreError(f"{path} holds results made with other settings ({'; '.join(diffs[:6])}); give another "
                         "output path, or delete those files to start over.")


def _file_records(base: Path, path: Path) -> list[dict[str, Any]]:
    """The records of ``base`` itself, or of one of its ranks' files (without the marks)."""
    return read_records(path) if path == base else rank_records(path) or []


def shard_files(base: Path) -> list[Path]:
    """The single-process file (if present) and every rank's file of any world size that mirage wrote as that rank
    (:func:`rank_records`), in a fixed order. Other files named like a rank's are left out: never read nor removed."""
    base = Path(base)
    ranks = []
    if base.parent.is_dir():
        for p in base.parent.iterdir():
            named = _named_rank(base, p)
            if named is not None and rank_records(p) is not None:
                ranks.append((named[1], named[0], p))
    return ([base] if base.is_file() else []) + [p for _w, _r, p in sorted(ranks)]


class StoreFor(Protocol):
    """Opens this rank's store for a path (``settings`` as :class:`mirage.runs.store.ResumableJSONL` takes them)."""

    def __call__(self, path: str | Path, *, settings: Mapping[str, Any] | None = None) -> ShardedJSONL: ...


def in_shards(work: Callable[[StoreFor], ResultT], shard: Shard | None = None, *,
              keep: Iterable[str | Path] = ()) -> ResultT | None:
    """Run ``work(store_for)`` on this rank's shard; with several ranks, wait for all, then on rank 0 run it once
    more over the merged stores, fold the ranks' files into the single-process files (:func:`consolidate`) and
    return that (other ranks return None).

    ``store_for(path, settings=None)`` opens a store for ``path``; ``work`` computes only the keys
    ``store.owns(key)``. ``keep``: the files the run reads (its inputs), never folded nor removed.
    """
    shard = shard or Shard.from_env()
    if shard.world > 1:
        mine: list[ShardedJSONL] = []

        def rank_store(path: str | Path, *, settings: Mapping[str, Any] | None = None) -> ShardedJSONL:
            mine.append(ShardedJSONL(path, shard, settings=settings))
            return mine[-1]

        work(rank_store)
        for store in mine:  # a file this rank made and left empty (no errors, say) is not left behind
            if store.created and store.path.is_file() and store.path.stat().st_size == 0:
                store.close()
                store.path.unlink()
        shard.barrier()
        if not shard.is_main or os.environ.get("MIRAGE_SHARD_NO_SYNC") == "1":
            return None
    opened: list[tuple[Path, Mapping[str, Any] | None]] = []

    def store_for(path: str | Path, *, settings: Mapping[str, Any] | None = None) -> ShardedJSONL:
        store = ShardedJSONL(path, Shard(), settings=settings)
        opened.append((Path(path), store.settings))
        return store

    result = work(store_for)
    for path, settings in opened:
        consolidate(path, settings=settings, keep=keep)
    return result


def consolidate(base: str | Path, *, settings: Mapping[str, Any] | None = None,
                keep: Iterable[str | Path] = ()) -> None:
    """Fold every rank's file that mirage wrote as that rank (:func:`shard_files`) into the single-process file
    ``base`` and remove them. Records carrying an ``index`` are put in index order, as one process writes them; the
    file is replaced atomically. A rank's file whose records were made with other ``settings`` is a StoreError (and
    nothing is folded); the files in ``keep`` (a run's inputs) are neither folded nor removed."""
    base = Path(base)
    kept = [Path(k) for k in keep]
    files = [p for p in shard_files(base) if p == base or not any(_same_file(p, k) for k in kept)]
    if files in ([], [base]):
        return
    records, seen = [], set()
    for path in files:
        for rec in _file_records(base, path):
            if path != base:
                _check_settings(path, rec, settings)
            if rec["key"] in seen:
                continue
            records.append(rec)
            seen.add(rec["key"])
    if records and all(isinstance(r.get("index"), int) for r in records):
        records.sort(key=lambda r: r["index"])
    write_atomic(base, "".join(dumps_record(r) + "\n" for r in records))
    for path in files:
        if path != base:
            path.unlink()


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def owns(store: Any, key: str) -> bool:
    """Whether the process holding ``store`` computes ``key`` (always, for a plain store or none)."""
    return store is None or not hasattr(store, "owns") or store.owns(key)
