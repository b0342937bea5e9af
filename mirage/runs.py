"""Resumable JSONL runs: one line per finished item, flushed as it finishes; a re-run skips finished items."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any


def item_key(index: int, raw: Any) -> str:
    """A stable key for an input item: its position and a hash of its content."""
    blob = json.dumps(raw, sort_keys=True, ensure_ascii=False, default=str)
    return f"{index}:{hashlib.sha1(blob.encode()).hexdigest()[:12]}"


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The JSON records of a JSONL file, skipping lines that do not parse (a torn last line); never writes."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


class ResumableJSONL:
    """Append-only JSONL file of records carrying a ``key``; knows which keys are already done.

    A torn last line (a run killed mid-write) is dropped on open, so the file stays valid JSONL.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.done: set[str] = set()
        if self.path.exists():
            good: list[str] = []
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                good.append(line)
                if isinstance(record, dict) and "key" in record:
                    self.done.add(record["key"])
            self.path.write_text("".join(line + "\n" for line in good), encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        """Append one record and flush it to disk."""
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if "key" in record:
            self.done.add(record["key"])

    def records(self) -> list[dict[str, Any]]:
        """All records written so far."""
        return read_records(self.path)
