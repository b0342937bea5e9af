"""mirage: model-internals-based answer attribution for retrieval-augmented generation."""

__version__ = "0.1.0"

from .config import AggregationConfig, CCIConfig, CTIConfig, GenerationConfig, MirageConfig, PromptConfig  # noqa: E402
from .inputs import Document, InputError, RAGItem  # noqa: E402
from .pipeline import Mirage  # noqa: E402
from .results import AttributionResult  # noqa: E402

__all__ = [
    "Mirage",
    "MirageConfig",
    "PromptConfig",
    "GenerationConfig",
    "CTIConfig",
    "CCIConfig",
    "AggregationConfig",
    "AttributionResult",
    "Document",
    "RAGItem",
    "InputError",
]
