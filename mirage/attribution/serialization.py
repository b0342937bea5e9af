"""One place for how results round-trip through plain JSON, and for the versions they record."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any, TypeVar

T = TypeVar("T", bound="JSONRecord")


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
    def from_dict(cls: type[T], data: dict[str, Any]) -> T:  # noqa: PYI019
        return cls(**cls.known_fields(data))

    @classmethod
    def from_json(cls: type[T], text: str) -> T:  # noqa: PYI019
        return cls.from_dict(json.loads(text))


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
