"""Attribution results: plain dataclasses that carry their config and versions and round-trip through JSON.

Plain data only: rendering is :mod:`mirage.views.rendering` (text) and :mod:`mirage.views.report` (HTML), the
faithfulness check :func:`mirage.scoring.faithfulness.faithfulness`.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mirage.attribution.serialization import JSONRecord

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = ["AnswerSpan", "AnswerToken", "AttributionResult", "ContextCue", "ContextSpan", "SaliencyMatrix",
           "SentenceAttribution", "summed_shares"]

RESULT_FORMAT = 1


@dataclass
class ContextCue:
    """A context token behind an answer token: its text, 1-based document id, span in ``prompt`` and saliency.

    ``share`` is its saliency over the answer token's total (positive) saliency on the context tokens attribution
    considers (all of them, or the documents' titles and texts with ``aggregation.context="content"``): comparable
    across answer tokens, where raw saliencies are not (None in results written before it existed).
    """

    token: str
    doc: int
    start: int
    end: int
    score: float
    share: float | None = None


@dataclass
class AnswerToken:
    """One answer token: CTI score and flag, contrastive alternative, cited documents and top context tokens.

    ``doc_scores[d]`` is the largest saliency on a token of document d+1, divided by the largest over all context
    tokens; ``doc_shares[d]`` is document d+1's share of the token's kept saliency (the context tokens the CCI
    selector keeps; it sums to 1 and is what orders citations). Both are present only for context-sensitive tokens.
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
    doc_shares: list[float] | None = None


@dataclass
class SentenceAttribution:
    """One answer sentence with both citation sets (1-based document ids, strongest first for mirage).

    ``doc_scores[d]``: document d+1's summed share of kept saliency over the sentence's context-sensitive tokens
    (the quantity that orders ``mirage_citations``), normalised to sum to 1; all zeros when the sentence has no
    context-sensitive token; empty in results written before it existed.
    """

    index: int
    text: str
    start: int
    end: int
    mirage_citations: list[int]
    self_citations: list[int]
    invalid_self_citations: list[int] = field(default_factory=list)
    doc_scores: list[float] = field(default_factory=list)


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
class SaliencyMatrix:
    """The whole CCI saliency of an answer, kept with ``aggregation.keep_saliency``: ``[n_selected, n_context]``.

    Row k is answer token ``answer_tokens[k]`` (a CCI target: the context-sensitive tokens); column j is context
    token j: position ``context_positions[j]`` in the prompt's token ids, 1-based document ``context_docs[j]``, span
    ``context_offsets[j]`` in ``prompt``, and ``content[j]`` whether it lies in a document's title or text rather than
    the prompt's scaffolding (``Document [1](Title: …``). Every context token is kept, whatever
    ``aggregation.context``. The values are compact: ``data`` is base64 of the little-endian float16 matrix divided
    by ``scale`` (its largest finite absolute value), so about three significant digits survive; :meth:`to_numpy`
    gives the matrix back.
    """

    answer_tokens: list[int]
    context_positions: list[int]
    context_docs: list[int]
    context_offsets: list[list[int]]
    content: list[bool] | None
    scale: float
    data: str

    @classmethod
    def encode(cls, rows: Sequence[Sequence[float]], *, answer_tokens: Sequence[int],
               context_positions: Sequence[int], context_docs: Sequence[int],
               context_offsets: Sequence[tuple[int, int]], content: Sequence[bool] | None = None) -> SaliencyMatrix:
        """Store ``rows`` (``[n_selected, n_context]``; ``context_docs`` 0-based, stored 1-based)."""
        import numpy as np

        matrix = np.asarray(rows, dtype=np.float64).reshape(len(answer_tokens), len(context_positions))
        finite = np.abs(matrix[np.isfinite(matrix)])
        scale = float(finite.max()) if finite.size else 0.0
        scaled = matrix / scale if scale > 0 else matrix
        return cls(answer_tokens=[int(i) for i in answer_tokens],
                   context_positions=[int(p) for p in context_positions],
                   context_docs=[int(d) + 1 for d in context_docs],
                   context_offsets=[[int(a), int(b)] for a, b in context_offsets],
                   content=None if content is None else [bool(c) for c in content], scale=scale,
                   data=base64.b64encode(scaled.astype("<f2").tobytes()).decode("ascii"))

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.answer_tokens), len(self.context_positions)

    def to_numpy(self) -> np.ndarray:
        """The saliency matrix ``[n_selected, n_context]`` as float32."""
        import numpy as np

        flat = np.frombuffer(base64.b64decode(self.data), dtype="<f2").astype(np.float32)
        return flat.reshape(self.shape) * np.float32(self.scale or 1.0)


def summed_shares(tokens: Sequence[AnswerToken], n_docs: int) -> list[float]:
    """Per document, the summed ``doc_shares`` of ``tokens`` (those without are skipped), normalised to sum to 1;
    all zeros when no token has any. What :attr:`SentenceAttribution.doc_scores` and
    :meth:`AttributionResult.span_scores` are."""
    totals = [0.0] * n_docs
    for tok in tokens:
        for d, share in enumerate(tok.doc_shares or ()):
            totals[d] += share
    mass = sum(totals)
    return [t / mass for t in totals] if mass > 0 else totals


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
    saliency: SaliencyMatrix | None = None  # with aggregation.keep_saliency
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
        if data.get("saliency") is not None:
            data["saliency"] = SaliencyMatrix(**data["saliency"])
        return cls(**data)

    @property
    def can_self_cite(self) -> bool:
        """Whether the answer could carry the model's own citations: a generated answer, or a given one that has
        citation marks. A given answer without marks has no self-citation to compare: views show "n/a (given
        answer)" and leave it out of the self-citation rates."""
        return self.generated or any(s.self_citations or s.invalid_self_citations for s in self.sentences)

    @property
    def mirage_citations(self) -> list[list[int]]:
        """Per sentence, mirage's citations."""
        return [s.mirage_citations for s in self.sentences]

    @property
    def self_citations(self) -> list[list[int]]:
        """Per sentence, the model's own citations."""
        return [s.self_citations for s in self.sentences]

    def span_scores(self, start: int, end: int) -> list[float]:
        """Per document (entry d for document d+1), the attribution of the answer's characters ``start:end``: the
        summed share of kept saliency of the context-sensitive tokens overlapping that span, normalised to sum to 1
        (:func:`summed_shares`; all zeros when no context-sensitive token overlaps it). For a sentence's span this is
        its ``doc_scores``, unless a token straddles the sentence's edge or is whitespace between sentences (a
        sentence counts such a token where :func:`mirage.attribution.aggregation.sentence_of_token` puts it)."""
        if isinstance(start, bool) or isinstance(end, bool) or not (0 <= start < end <= len(self.answer)):
            raise ValueError(f"span_scores({start!r}, {end!r}): give 0 <= start < end <= {len(self.answer)} "
                             "(character offsets in res.answer).")
        inside = [t for t in self.tokens if t.context_sensitive and t.start < end and start < t.end]
        if any(t.cited_docs and t.doc_shares is None for t in inside):
            raise ValueError("this result has no per-token document shares (written by an older mirage); "
                             "attribute the item again to get span scores.")
        return summed_shares(inside, len(self.docs))

    def to_dataframe(self) -> pd.DataFrame:
        """The sentences × documents table (pandas): one row per sentence with ``sentence`` (its index),
        ``text``, ``start``, ``end``, ``mirage_citations``, ``self_citations``, ``invalid_self_citations`` and
        ``doc_1`` … ``doc_N``, its document scores (``doc_scores``; NaN in results written before they existed)."""
        import pandas as pd

        n = len(self.docs)
        doc_columns = [f"doc_{d + 1}" for d in range(n)]
        rows = []
        for s in self.sentences:
            scores = s.doc_scores if len(s.doc_scores) == n else [float("nan")] * n
            rows.append([s.index, s.text, s.start, s.end, list(s.mirage_citations), list(s.self_citations),
                         list(s.invalid_self_citations), *scores])
        return pd.DataFrame(rows, columns=["sentence", "text", "start", "end", "mirage_citations", "self_citations",
                                           "invalid_self_citations", *doc_columns])
