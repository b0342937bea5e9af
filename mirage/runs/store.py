"""Resumable JSONL stores: one line per finished item, flushed as it finishes; a re-run skips finished items.

A store only ever appends to a file it recognises as its own, and rewrites nothing it did not write:

- a *mirage results file* is one whose every complete line is a JSON object with a string ``key``; an empty or
  missing file is one too. Any other file (an input file, notes, another program's JSONL) is refused with
  :class:`StoreError`, untouched;
- the one repair a store makes is to a torn last line, the half-written record a killed run leaves: it is cut back
  to the end of the last complete line (a last line that parses but lacks its newline gets the newline);
- a store opened with ``settings`` (what the stored outputs depend on: model, pipeline configuration) writes them
  into every record and refuses a file whose records were made with other settings, naming each difference;
- one process at a time writes a file: the store holds an exclusive advisory lock (``flock``) on it for as long as
  it lives, and a second process gets :class:`StoreError` instead of interleaving duplicate records. The lock dies
  with its process, so ``kill -9`` leaves nothing to clean up.
- a write that fails (a full disk) is cut back to the end of the last whole record and raised as an ``OSError``
  naming the store's path (:func:`disk_error_message` says it in one line): what was written before stays.

Records are keyed by :func:`content_key`, a hash of what determines the output, never of an item's position.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import json
import math
import os
import stat
import warnings
import weakref
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mirage.data.readers import parse_json

__all__ = ["ResumableJSONL", "StoreError", "canonical_json", "changed_ids", "content_key", "disk_error_message",
           "drop_resolved", "dumps_record", "is_record", "is_stream", "is_torn_record", "item_keys", "parse_records",
           "read_records", "settings_differences", "write_atomic", "write_synced"]

try:  # POSIX; elsewhere stores work without the lock
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


class StoreError(ValueError):
    """An output file mirage must not write to (not its own, other settings, in use); the message says why."""


def canonical_json(payload: Any) -> bytes:
    """The bytes that identify ``payload``: sorted keys, UTF-8, lone surrogates kept (``surrogatepass``)."""
    return json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")


def content_key(payload: Any, length: int = 16) -> str:
    """A stable key for what a model sees (question, documents, answer, seed, …): equal inputs share results.

    Position-free: moving an item within its file keeps its key. Any text works, including invalid Unicode.
    """
    return hashlib.sha1(canonical_json(payload)).hexdigest()[:length]


def item_keys(raws: Iterable[Any]) -> list[str]:
    """Keys of input items, in order: each item's :func:`content_key`; the n-th repeat of identical content gets
    ``~n`` (n >= 2), so every item keeps its own record while inserting other items changes no key."""
    seen: Counter[str] = Counter()
    keys = []
    for raw in raws:
        base = content_key(str(raw) if isinstance(raw, BaseException) else raw)
        seen[base] += 1
        keys.append(base if seen[base] == 1 else f"{base}~{seen[base]}")
    return keys


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps_record(record: Mapping[str, Any]) -> str:
    """One line of strict JSON: NaN and infinities (invalid JSON) become null; text that is not valid Unicode (lone
    surrogates) is written ``\\u``-escaped."""
    try:
        line = json.dumps(record, ensure_ascii=False, allow_nan=False)
    except ValueError:
        line = json.dumps(_finite(record), ensure_ascii=False, allow_nan=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(_finite(record), ensure_ascii=True, allow_nan=False)
    return line


def is_record(value: Any) -> bool:
    """Whether a parsed line is a mirage store record (an object with a string ``key``)."""
    return isinstance(value, dict) and isinstance(value.get("key"), str)


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of a store file, skipping lines that do not parse (a torn last line) or are not records; never
    writes. A missing file has none; a ``.gz`` file (a store shipped compressed) is read decompressed."""
    path = Path(path)
    if not path.is_file():
        return []
    data = path.read_bytes()
    return parse_records((gzip.decompress(data) if path.suffix == ".gz" else data).split(b"\n"))


def parse_records(lines: Iterable[str | bytes]) -> list[dict[str, Any]]:
    """The records among JSONL ``lines``, in order: the one rule of every reader of a store's lines. A blank line,
    a line that does not parse (the torn last line of a stopped run; bytes that are not UTF-8) or is not a record
    (:func:`is_record`) is skipped."""
    out = []
    for raw in lines:
        if not raw.strip():
            continue
        try:
            value = parse_json(raw)
        except ValueError:  # JSONDecodeError, or bytes that are not UTF-8
            continue
        if is_record(value):
            out.append(value)
    return out


# -- disks and folders -----------------------------------------------------------------------------------------------

def make_parent(path: str | Path) -> None:
    """Make ``path``'s folder (and those above it); a StoreError names the part of the path that is a file, not a
    folder (``-o notes.txt/out.jsonl``)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()), path.parent)
        raise StoreError(f"{path}: {blocker} is a file, not a folder; give an output path inside a folder.") from None


def with_path(err: OSError, path: str | Path) -> OSError:
    """``err`` (same class and errno) naming ``path``, the file the user asked for, instead of a temporary file
    beside it or no file at all."""
    return OSError(err.errno, err.strerror or str(err), str(path)) if err.errno else err  # the errno's subclass


def disk_error_message(err: OSError) -> str:
    """One line for an error of the disk (full, read-only, not allowed, a file where a folder belongs), naming the
    path and what to do."""
    where = f"{err.filename}: " if err.filename else ""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"{where}the disk is full (no space left on device); what was written before is kept: free some space "
                "and run the same command again to resume.")
    if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        why = "the disk is read-only" if err.errno == errno.EROFS else "permission denied"
        return f"{where}cannot write there ({why}); give an output path on a disk and in a folder you can write to."
    if err.errno == errno.ENOTDIR:
        return f"{where}a part of this path is a file, not a folder; give an output path inside a folder."
    if err.errno == errno.EEXIST:
        return f"{where}a file is there where a folder belongs; give a folder path (a new one, or a run's folder)."
    return f"{where}{err.strerror or err}."


# -- whole-file writes ------------------------------------------------------------------------------------------------

def _standard_fd(path: str | Path) -> int | None:
    """1 or 2 where ``path`` is this process's standard output or error (``/dev/stdout``, or the file it is
    redirected to), else None."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    for fd in (1, 2):
        try:
            if os.path.samestat(st, os.fstat(fd)):
                return fd
        except OSError:  # closed
            continue
    return None


def is_stream(path: str | Path) -> bool:
    """Whether ``path`` is a pipe or a character device (a FIFO, ``/dev/null``, a terminal) or this process's
    standard output or error (``-o /dev/stdout``, wherever it goes): an output written straight into, never read,
    checked for a mark or replaced."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or _standard_fd(path) is not None


def _open_stream(path: Path) -> int:
    """A descriptor writing into the pipe or device ``path``; a pipe no process reads is a StoreError at once, never
    a wait for a reader."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ENXIO:
            raise StoreError(f"{path} is a pipe no process reads; start its reader first (e.g. cat {path}), or give "
                             "a file path.") from None
        raise with_path(err, path) from err
    os.set_blocking(fd, True)  # the reader is there: wait for it to take each part
    return fd


def _write_stream(path: Path, payload: bytes) -> Path:
    """Write ``payload`` into the stream ``path`` (:func:`is_stream`); a standard stream through its own descriptor
    (which keeps a shell's ``>>``)."""
    std = _standard_fd(path)
    fd = std if std is not None else _open_stream(path)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
    except OSError as err:
        raise with_path(err, path) from err
    finally:
        if std is None:
            os.close(fd)
    return path


def write_synced(path: Path, data: bytes, *, exclusive: bool = False) -> None:
    """Write ``data`` to ``path`` (created, or emptied first) and sync it to disk before returning; ``exclusive``:
    only as a new file, ``FileExistsError`` where ``path`` exists."""
    with path.open("xb" if exclusive else "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Replace ``path`` with ``data`` (text is written as UTF-8) whole or not at all: it goes to a temporary file
    beside it, is flushed to disk, then renamed over ``path``. A run killed mid-write leaves the previous version
    (or no file), never half of one; processes writing the same path leave one whole version. Makes the parent
    folder. An ``OSError`` (a full or read-only disk) names ``path``, not the temporary file. A pipe or device
    (:func:`is_stream`: ``-o /dev/stdout``) cannot be replaced: ``data`` is written into it."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if is_stream(path):
        return _write_stream(path, payload)
    make_parent(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write_synced(tmp, payload)
        os.replace(tmp, path)
    except BaseException as err:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # a read-only disk refuses even that; there is no temporary file then
            pass
        if isinstance(err, OSError):
            raise with_path(err, path) from err
        raise
    return path


# -- locks -----------------------------------------------------------------------------------------------------------

class _Lock:
    """An exclusive flock on one file, shared by every store of this process on that file."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.inode = os.fstat(self.fd).st_ino
        self.holders = 0  # open stores using it; the last one to close releases it
        self._close = weakref.finalize(self, os.close, self.fd)  # also closed when no store refers to it any more
        if fcntl is None:  # pragma: no cover - Windows
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(f"{path} is being written by another running mirage process; wait for it to finish, "
                             "or give this run another output.") from None

    def current(self, path: Path) -> bool:
        try:
            return os.stat(path).st_ino == self.inode
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """One store is done with it; the last one closes the file, which releases the flock."""
        self.holders -= 1
        if self.holders <= 0:
            self._close()  # a finalizer runs once: closing here leaves nothing for the garbage collector


_LOCKS: weakref.WeakValueDictionary[str, _Lock] = weakref.WeakValueDictionary()


def _lock(path: Path) -> _Lock:
    """This process's lock on ``path`` (taken once; released when no store of this process uses it)."""
    name = os.path.realpath(path)
    held = _LOCKS.get(name)
    if held is not None and held.current(path) and held.holders > 0:
        held.holders += 1
        return held
    lock = _Lock(path)
    lock.holders = 1
    _LOCKS[name] = lock
    return lock


# -- settings --------------------------------------------------------------------------------------------------------

def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix: {}}
    return {prefix: value}


def settings_differences(stored: Any, current: Mapping[str, Any]) -> list[str]:
    """``"field: X in the file, Y now"`` for each setting that differs (dotted names for nested settings)."""
    if not isinstance(stored, Mapping):
        return ["the file's records carry no settings (written by an older mirage or another command)"]
    a, b = _flatten(stored), _flatten(json.loads(json.dumps(current, default=str)))
    return [f"{k}: {a.get(k)!r} in the file, {b.get(k)!r} now" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


# -- the store -------------------------------------------------------------------------------------------------------

#: How every record line starts (``key`` is written first): a torn last line is recognised by it.
RECORD_PREFIX = b'{"key": "'


def is_torn_record(tail: bytes, *, after_records: bool) -> bool:
    """Whether ``tail``, a last line without its newline, is the start of a record cut off mid-write (also a cut
    inside the prefix itself, when the file holds records before it)."""
    return tail.startswith(RECORD_PREFIX) or (after_records and RECORD_PREFIX.startswith(tail))


class ResumableJSONL:
    """Append-only JSONL store of records carrying a ``key``; knows which keys are already done.

    ``settings``: what the records depend on; written into each record, and a file made with other settings is
    refused. Opening checks the file is a mirage results file (see the module docstring), repairs only a torn last
    line, and locks it against other processes until :meth:`close` (or the end of a ``with`` block, or of the
    process). A store shipped compressed (``scores.jsonl.gz`` beside no ``scores.jsonl``, as the repository's
    results keep them) is resumed: it is first decompressed into the plain file the run appends to, and the ``.gz``
    is left as it is.
    """

    def __init__(self, path: str | Path, *, settings: Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.settings = None if settings is None else json.loads(json.dumps(settings, default=str))
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a directory; give a file path for the output.")
        if self.path.exists() and not self.path.is_file():  # a FIFO: appending would wait for a reader for ever
            raise StoreError(f"{self.path} is a pipe or device, not a file; results are stored in a file (a re-run "
                             "resumes it): give a file path for the output.")
        make_parent(self.path)
        self.done: set[str] = set()
        shipped = self.path.with_name(self.path.name + ".gz")
        if not self.path.exists() and self.path.suffix != ".gz" and shipped.is_file():
            try:
                write_atomic(self.path, gzip.decompress(shipped.read_bytes()))
            except (OSError, EOFError, zlib.error) as err:
                raise StoreError(f"{shipped}: cannot resume from this compressed store ({err}); decompress it into "
                                 f"{self.path.name} yourself, or move it aside.") from None
        existed = self.path.exists() and self.path.stat().st_size > 0
        lock = _lock(self.path)
        self._lock: _Lock | None = lock  # None once closed
        if existed:
            try:
                self._open_existing(lock)
            except BaseException:  # a refused file: this store never opened, so it holds no lock
                self.close()
                raise

    def _open_existing(self, lock: _Lock) -> None:
        data = self.path.read_bytes()
        *complete, tail = data.split(b"\n")
        foreign = None
        records = 0
        damaged = []
        for lineno, raw in enumerate(complete, start=1):
            if not raw.strip():
                continue
            try:
                value = parse_json(raw)
            except ValueError:
                damaged.append(lineno)
                continue
            if not is_record(value):
                foreign = foreign or lineno
                continue
            records += 1
            self._check_settings(value, lineno)
            self.done.add(value["key"])
        if tail.strip():
            try:
                value = parse_json(tail)
            except ValueError:
                value = None
            if is_record(value):  # a whole record whose newline was lost
                self._check_settings(value, len(complete) + 1)
                os.write(lock.fd, b"\n")
                self.done.add(value["key"])
                records += 1
            elif foreign is None and is_torn_record(tail, after_records=records > 0):
                os.truncate(self.path, len(data) - len(tail))  # the half-written record of a killed run
                warnings.warn(f"{self.path}: removed a torn last line (a run was stopped mid-write).", stacklevel=3)
            else:
                foreign = foreign or len(complete) + 1
        if foreign is not None or (records == 0 and damaged):
            line = foreign if foreign is not None else damaged[0]
            raise StoreError(f"{self.path} is not a mirage results file (line {line} is not a mirage record); "
                             "mirage leaves it untouched: give another output path.")
        if damaged:
            warnings.warn(f"{self.path}: skipped damaged line(s) {damaged[:5]}; their items will be computed again.",
                          stacklevel=3)

    def _check_settings(self, record: dict[str, Any], lineno: int) -> None:
        if self.settings is None or record.get("settings") == self.settings:
            return
        diffs = settings_differences(record.get("settings"), self.settings)
        raise StoreError(f"{self.path} holds results made with other settings (line {lineno}: "
                         f"{'; '.join(diffs[:6])}{'; …' if len(diffs) > 6 else ''}); give another output path, or "
                         "delete that file to start over.")

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one record (``key`` first, then ``settings`` if the store has them) and flush it to disk."""
        if not isinstance(record.get("key"), str):
            raise StoreError("a store record needs a string 'key'.")
        out: dict[str, Any] = {"key": record["key"]}
        if self.settings is not None:
            out["settings"] = self.settings
        out.update((k, v) for k, v in record.items() if k not in out)
        line = (dumps_record(out) + "\n").encode("utf-8")
        if self._lock is None:
            raise StoreError(f"{self.path}: this store was closed; open the file again to add records.")
        if not self._lock.current(self.path):  # the file was replaced (a merge) since this store opened it
            stale, self._lock = self._lock, _lock(self.path)
            stale.release()
        end = os.fstat(self._lock.fd).st_size
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._lock.fd, view):]
            os.fsync(self._lock.fd)
        except OSError as err:  # a full disk: cut back to the last whole record, which stays
            try:
                os.ftruncate(self._lock.fd, end)
            except OSError:
                pass  # a torn last line is what the next open repairs
            raise with_path(err, self.path) from err
        self.done.add(record["key"])

    def write_once(self, record: Mapping[str, Any]) -> bool:
        """:meth:`write` unless a record with this key is already stored (an error reported by an earlier run);
        whether it wrote."""
        if record.get("key") in self.done:
            return False
        self.write(record)
        return True

    def records(self) -> list[dict[str, Any]]:
        """All records written so far."""
        return read_records(self.path)

    def close(self) -> None:
        """Stop writing: releases this store's hold on the file's lock (idempotent)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def __enter__(self) -> ResumableJSONL:  # noqa: PYI034 - typing.Self needs Python 3.11; the project runs on 3.10
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- what a store's records say about each other ---------------------------------------------------------------------

def drop_resolved(path: str | Path, done: Iterable[str], *, settings: Mapping[str, Any] | None = None) -> int:
    """Remove from the store at ``path`` (an errors file a run owns) the records whose key is in ``done`` (items that
    failed once and have a result now), atomically; the file goes when no record is left. Returns how many records
    stay. The store is opened first, so a file that is not a mirage store with these ``settings`` is refused
    untouched."""
    path = Path(path)
    if not path.is_file():
        return 0
    with ResumableJSONL(path, settings=settings) as store:
        records = store.records()
        done = set(done)
        kept = [r for r in records if r["key"] not in done]
        if not kept:
            path.unlink()
        elif len(kept) < len(records):
            write_atomic(path, "".join(dumps_record(r) + "\n" for r in kept))
    return len(kept)


def changed_ids(stored: Iterable[Mapping[str, Any]], current: Iterable[tuple[str, Any]]) -> list[tuple[str, str]]:
    """``(id, key)`` for each item of ``current`` (its ``(key, id)`` pairs) that would get a second result under an
    id the store already holds for other content: an item whose question, documents or answer changed since its
    result was stored. An id names one item's result, so those are refused (:class:`StoreError`) by the run, never
    mixed in. Items without an id, new ids, and the results of items no longer given are no conflict."""
    by_id: dict[str, set[str]] = {}
    for record in stored:
        if record.get("id") is not None:
            by_id.setdefault(str(record["id"]), set()).add(record["key"])
    pairs = [(key, str(item_id)) for key, item_id in current if item_id is not None]
    given: dict[str, set[str]] = {}
    for key, item_id in pairs:
        given.setdefault(item_id, set()).add(key)
    return [(item_id, key) for key, item_id in pairs
            if item_id in by_id and key not in by_id[item_id] and by_id[item_id] - given[item_id]]
