"""mirage: model-internals-based answer attribution for retrieval-augmented generation.

``import mirage`` is light: torch and transformers load when :class:`Mirage` (or :func:`attribute_dataset`) is first
used, so that ``mirage --help`` and configuration code start at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mirage.attribution.results import AttributionResult
from mirage.config import AggregationConfig, CCIConfig, CTIConfig, GenerationConfig, MirageConfig, PromptConfig
from mirage.data.inputs import Document, InputError, RAGItem
from mirage.runs.lazy import lazy_exports
from mirage.version import __version__ as __version__

if TYPE_CHECKING:
    from mirage.pipeline import Mirage, attribute_dataset
    from mirage.views.frames import read_results

#: Names imported from their module on first access (they bring torch).
__getattr__, __dir__ = lazy_exports(__name__, {
    "Mirage": "pipeline", "attribute_dataset": "pipeline", "read_results": "views.frames",
})


__all__ = [
    "AggregationConfig",
    "AttributionResult",
    "CCIConfig",
    "CTIConfig",
    "Document",
    "GenerationConfig",
    "InputError",
    "Mirage",
    "MirageConfig",
    "PromptConfig",
    "RAGItem",
    "attribute_dataset",
    "read_results",
]
