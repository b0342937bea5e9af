"""Attribution results: plain dataclasses that carry their config and versions and round-trip through JSON.

Plain data only: rendering is :mod:`mirage.rendering` (text) and :mod:`mirage.report` (HTML), the faithfulness check
:func:`mirage.faithfulness.faithfulness`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .serialization import JSONRecord

RESULT_FORMAT = 1


@dataclass
class ContextCue:
    """A context token behind an answer token: its text, 1-based document id, span in ``prompt`` and saliency."""

    token: str
    doc: int
    start: int
    end: int
    score: float


@dataclass
class AnswerToken:
    """One answer token: CTI score and flag, contrastive alternative, cited documents and top context tokens.

    ``doc_scores[d]`` is the largest saliency on a token of document d+1, divided by the largest over all context
    tokens (present only for context-sensitive tokens).
    """

    index: int
    text: str
    start: int
    end: int
    cti: float
    context_sensitive: bool
    contrast_token: str | None = None
    prob: float | None = None  # the token's probability with the documents in the prompt
    cited_docs: list[int] = field(default_factory=list)
    doc_scores: list[float] | None = None
    top_context: list[ContextCue] = field(default_factory=list)


@dataclass
class SentenceAttribution:
    """One answer sentence with both citation sets (1-based document ids, strongest first for mirage)."""

    index: int
    text: str
    start: int
    end: int
    mirage_citations: list[int]
    self_citations: list[int]
    invalid_self_citations: list[int] = field(default_factory=list)


@dataclass
class AnswerSpan:
    """Consecutive context-sensitive answer tokens citing the same documents, widened to whole words."""

    start: int
    end: int
    text: str
    docs: list[int]
    tokens: list[int]


@dataclass
class ContextSpan:
    """Consecutive selected context tokens of one document, widened to whole words; span in ``prompt``."""

    doc: int
    start: int
    end: int
    text: str
    score: float
    answer_tokens: list[int]


@dataclass
class AttributionResult(JSONRecord):
    """Everything about one attributed answer, and what reproduces it."""

    question: str
    docs: list[dict[str, str]]
    answer: str
    raw_answer: str
    context: str
    prompt: str
    contextless_prompt: str
    model: str
    config: dict[str, Any]
    sentences: list[SentenceAttribution]
    tokens: list[AnswerToken]
    spans: list[AnswerSpan]
    context_spans: list[ContextSpan]
    cti_threshold: float
    generated: bool
    truncated_docs: list[int] = field(default_factory=list)
    id: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    format: int = RESULT_FORMAT

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttributionResult:
        """Inverse of :meth:`to_dict`."""
        data = cls.known_fields(data)
        data["sentences"] = [SentenceAttribution(**s) for s in data["sentences"]]
        data["tokens"] = [
            AnswerToken(**{**t, "top_context": [ContextCue(**c) for c in t.get("top_context", [])]})
            for t in data["tokens"]
        ]
        data["spans"] = [AnswerSpan(**s) for s in data["spans"]]
        data["context_spans"] = [ContextSpan(**s) for s in data["context_spans"]]
        return cls(**data)

    @property
    def mirage_citations(self) -> list[list[int]]:
        """Per sentence, mirage's citations."""
        return [s.mirage_citations for s in self.sentences]

    @property
    def self_citations(self) -> list[list[int]]:
        """Per sentence, the model's own citations."""
        return [s.self_citations for s in self.sentences]
