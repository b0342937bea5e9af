"""One place for how results round-trip through plain JSON, and for the versions they record."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["JSONRecord", "library_versions"]

RecordT = TypeVar("RecordT", bound="JSONRecord")


class JSONRecord:
    """Mixin for dataclasses that serialize to plain JSON and load back.

    ``from_dict`` ignores keys the class does not know (files written by other versions) and builds flat records;
    a record with nested dataclasses overrides it, starting from :meth:`known_fields`.
    """

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, **kwargs)

    @classmethod
    def known_fields(cls, data: dict[str, Any]) -> dict[str, Any]:
        """The entries of ``data`` that are fields of this class."""
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return {k: v for k, v in data.items() if k in names}

    @classmethod
    def from_dict(cls: type[RecordT], data: dict[str, Any]) -> RecordT:  # noqa: PYI019
        return cls(**cls.known_fields(data))

    @classmethod
    def from_json(cls: type[RecordT], text: str) -> RecordT:  # noqa: PYI019
        return cls.from_dict(json.loads(text))

    def save(self, path: str | Path) -> None:
        """Write the record to ``path`` as indented JSON, atomically (:func:`mirage.runs.store.write_atomic`)."""
        from mirage.runs.store import write_atomic

        write_atomic(path, self.to_json(indent=2))

    @classmethod
    def load(cls: type[RecordT], path: str | Path) -> RecordT:  # noqa: PYI019
        """The record :meth:`save` wrote to ``path`` (plain or gzipped; :func:`mirage.runs.files.read_json`: an
        InputError names a file that is missing or not JSON)."""
        from mirage.runs.files import read_json

        return cls.from_dict(read_json(path))


def library_versions(*extra: str) -> dict[str, str]:
    """Versions of mirage, torch and transformers, recorded in every result, and of the ``extra`` distributions a
    result also depends on (``"trl"``, ``"peft"``: training records), where installed."""
    from importlib import metadata

    import torch
    import transformers

    from mirage.version import __version__

    versions = {"mirage": __version__, "torch": torch.__version__, "transformers": transformers.__version__}
    for name in extra:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions
