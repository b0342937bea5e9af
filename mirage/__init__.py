"""mirage: model-internals-based answer attribution for retrieval-augmented generation."""

__version__ = "0.1.0"

from .config import AggregationConfig, CCIConfig, CTIConfig, GenerationConfig, MirageConfig, PromptConfig
from .inputs import Document, InputError, RAGItem
from .pipeline import Mirage
from .results import AttributionResult

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
