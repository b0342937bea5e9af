"""A model given now or on demand: run commands pass a loader, so that nothing loads when nothing needs it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from .pipeline import Mirage

#: A Mirage, or a function returning one (called only when some item still needs the model).
MirageSource = Union["Mirage", Callable[[], "Mirage"]]


def resolve_mirage(source: MirageSource) -> Mirage:
    """The Mirage itself, or the one the loader returns."""
    return source() if callable(source) and not hasattr(source, "lm") else source  # type: ignore[return-value]
