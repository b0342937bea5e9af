"""Loading on demand: a model given now or by a loader (nothing loads when nothing needs it), and package names
imported on first access (so that ``--help`` and configuration code never import torch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from mirage.pipeline import Mirage

__all__ = ["MirageSource", "lazy_exports", "resolve_mirage"]

#: A Mirage, or a function returning one (called only when some item still needs the model).
MirageSource = Union["Mirage", Callable[[], "Mirage"]]


def resolve_mirage(source: MirageSource) -> Mirage:
    """The Mirage itself, or the one the loader returns."""
    return source() if callable(source) and not hasattr(source, "lm") else source  # type: ignore[return-value]


def lazy_exports(package: str, names: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module ``__getattr__`` and ``__dir__`` for a package whose ``names`` (name → submodule) are imported on
    first access (PEP 562), so that importing the package does not import torch."""
    import importlib
    import sys

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(f".{names[name]}", package), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
