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
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from .runs import ResumableJSONL, StoreError, dumps_record, read_records, settings_differences, write_atomic

T = TypeVar("T")


class ShardError(ValueError):
    """RANK / WORLD_SIZE are set but do not describe a valid shard."""


@dataclass(frozen=True)
class Shard:
    """This process's share of a run: rank ``rank`` of ``world`` processes."""

    rank: int = 0
    world: int = 1

    def __post_init__(self) -> None:
        if self.world < 1 or not 0 <= self.rank < self.world:
            raise ShardError(f"shard rank {self.rank} of {self.world}: need 0 <= RANK < WORLD_SIZE and WORLD_SIZE >= 1.")

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


class ShardedJSONL(ResumableJSONL):
    """A resumable JSONL store seen by one rank: it reads every rank's file and writes its own."""

    def __init__(self, path: str | Path, shard: Shard, *, settings: Mapping[str, Any] | None = None) -> None:
        base = Path(path)
        self.base = base
        self.shard = shard
        own = base if shard.world == 1 else shard_path(base, shard.rank, shard.world)
        super().__init__(own, settings=settings)
        for other in shard_files(base):
            if other != own:  # another rank may be appending to it: read only
                for record in read_records(other):
                    if self.settings is not None and record.get("settings") != self.settings:
                        diffs = settings_differences(record.get("settings"), self.settings)
                        raise StoreError(f"{other} holds results made with other settings ({'; '.join(diffs[:6])}); "
                                         "give another output path, or delete those files to start over.")
                    self.done.add(record["key"])

    def owns(self, key: str) -> bool:
        """Whether this rank computes ``key``."""
        return self.shard.owns(key)

    def records(self) -> list[dict[str, Any]]:
        """The records of every rank's file (the single-process file first)."""
        out: list[dict[str, Any]] = []
        for path in shard_files(self.base):
            out.extend(read_records(path))
        return out


def shard_path(base: Path, rank: int, world: int) -> Path:
    """``NAME.rank<r>-of-<w>.jsonl`` beside ``NAME.jsonl``."""
    return base.with_name(f"{base.stem}.rank{rank}-of-{world}{base.suffix}")


def shard_files(base: Path) -> list[Path]:
    """The single-process file (if present) and every rank's file of any world size, in a fixed order."""
    pattern = re.compile(re.escape(base.stem) + r"\.rank(\d+)-of-(\d+)" + re.escape(base.suffix) + "$")
    ranks = []
    if base.parent.exists():
        for p in base.parent.iterdir():
            m = pattern.match(p.name)
            if m:
                ranks.append((int(m.group(2)), int(m.group(1)), p))
    return ([base] if base.exists() else []) + [p for _w, _r, p in sorted(ranks)]


class StoreFor(Protocol):
    """Opens this rank's store for a path (``settings`` as :class:`mirage.runs.ResumableJSONL` takes them)."""

    def __call__(self, path: str | Path, *, settings: Mapping[str, Any] | None = None) -> ShardedJSONL: ...


def in_shards(work: Callable[[StoreFor], T], shard: Shard | None = None) -> T | None:
    """Run ``work(store_for)`` on this rank's shard; with several ranks, wait for all, then on rank 0 run it once
    more over the merged stores and return that (other ranks return None).

    ``store_for(path, settings=None)`` opens a store for ``path``; ``work`` computes only the keys
    ``store.owns(key)``.
    """
    shard = shard or Shard.from_env()
    if shard.world > 1:
        work(lambda path, *, settings=None: ShardedJSONL(path, shard, settings=settings))
        shard.barrier()
        if not shard.is_main or os.environ.get("MIRAGE_SHARD_NO_SYNC") == "1":
            return None
    opened: list[Path] = []

    def store_for(path: str | Path, *, settings: Mapping[str, Any] | None = None) -> ShardedJSONL:
        opened.append(Path(path))
        return ShardedJSONL(path, Shard(), settings=settings)

    result = work(store_for)
    for path in opened:
        consolidate(path)
    return result


def consolidate(base: str | Path) -> None:
    """Fold every rank's file into the single-process file ``base`` and remove them. Records carrying an ``index``
    are put in index order, as one process writes them; the file is replaced atomically."""
    base = Path(base)
    files = shard_files(base)
    if files in ([], [base]):
        return
    records, seen = [], set()
    for path in files:
        for rec in read_records(path):
            key = rec.get("key") if isinstance(rec, dict) else None
            if key is not None and key in seen:
                continue
            records.append(rec)
            if key is not None:
                seen.add(key)
    if records and all(isinstance(r, dict) and isinstance(r.get("index"), int) for r in records):
        records.sort(key=lambda r: r["index"])
    write_atomic(base, "".join(dumps_record(r) + "\n" for r in records))
    for path in files:
        if path != base:
            path.unlink()


def owns(store: Any, key: str) -> bool:
    """Whether the process holding ``store`` computes ``key`` (always, for a plain store or none)."""
    return store is None or not hasattr(store, "owns") or store.owns(key)
