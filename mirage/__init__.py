"""mirage: model-internals-based answer attribution for retrieval-augmented generation."""

from .config import AggregationConfig, CCIConfig, CTIConfig, GenerationConfig, MirageConfig, PromptConfig
from .inputs import Document, InputError, RAGItem
from .pipeline import Mirage
from .results import AttributionResult
from .version import __version__ as __version__

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
]
