"""A per-answer citation rule over any document method's scores (:func:`cite_documents`): sum each document's
scores over the answer's tokens (or over its context-sensitive tokens, when given) and cite the documents past
mean + k·std of the answer's documents (``rule="std"``) or past a calibrated threshold (``rule="threshold"``).

A plain function, not yet a citation rule of :data:`mirage.registry.CITATION_RULES`. A threshold is calibrated on
labelled answers' document totals, e.g. with :func:`mirage.likelihood.classifier.best_threshold`.

Shapes: ``n_answer`` answer tokens, ``n_docs`` documents.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from mirage.attribution.methods.base import DocumentAttribution

__all__ = ["DocumentCitation", "cite_documents"]


@dataclass(frozen=True)
class DocumentCitation:
    """An answer's document citations: ``totals[d]``, document d's (0-based) summed score; ``cited``, the cited
    documents numbered from 1 as the prompt numbers them (as ``mirage_citations`` are), strongest first; the
    ``threshold`` they reached (NaN when no token was summed)."""

    totals: tuple[float, ...]
    cited: tuple[int, ...]
    threshold: float


def cite_documents(scores: DocumentAttribution | Sequence[Sequence[float]] | torch.Tensor, *,
                   tokens: Sequence[int] | None = None, rule: Literal["std", "threshold"] = "std", k: float = 1.0,
                   threshold: float | None = None,
                   std_kind: Literal["population", "sample"] = "population") -> DocumentCitation:
    """The documents one answer cites, from a method's document scores ``[n_answer, n_docs]`` (a
    :class:`DocumentAttribution` or its ``doc_scores``).

    Each document's total is its score summed over the answer's tokens, or over ``tokens`` (0-based answer token
    indices, e.g. CTI's context-sensitive ones: ``cti.selected``) when given. ``rule="std"`` cites the documents whose
    total is at least mean + ``k``·std of the answer's totals (``std_kind``: the population std, n, or the sample
    std, n - 1; one document is compared with its own total); ``rule="threshold"`` those at least ``threshold``
    (calibrated). Either way a document is cited only with a positive total (one that does not raise the answer's
    score is never cited); ties at the threshold are kept."""
    matrix = torch.as_tensor(scores.doc_scores if isinstance(scores, DocumentAttribution) else scores,
                             dtype=torch.float64)
    if matrix.dim() != 2:
        raise ValueError(f"scores has shape {list(matrix.shape)}; give document scores [n_answer, n_docs].")
    if rule not in ("std", "threshold"):
        raise ValueError(f"rule={rule!r} is not valid; choose 'std' (mean + k·std) or 'threshold' (calibrated).")
    if rule == "threshold" and (threshold is None or not math.isfinite(threshold)):
        raise ValueError("threshold is missing: rule='threshold' needs the calibrated threshold (a finite number).")
    if not math.isfinite(k) or k < 0:
        raise ValueError(f"k={k!r} is not valid; give a number >= 0 (how many stds above the mean).")
    if std_kind not in ("population", "sample"):
        raise ValueError(f"std_kind={std_kind!r} is not valid; choose 'population' or 'sample'.")
    n_answer, n_docs = matrix.shape
    if tokens is not None:
        bad = [t for t in tokens if not 0 <= int(t) < n_answer]
        if bad:
            raise ValueError(f"tokens has indices {bad} outside the answer's {n_answer} tokens; give 0-based indices.")
        matrix = matrix[sorted({int(t) for t in tokens})]
    totals = matrix.sum(dim=0)
    if len(matrix) == 0 or n_docs == 0:
        return DocumentCitation(totals=tuple(totals.tolist()), cited=(), threshold=float("nan"))
    if rule == "threshold":
        bar = float(threshold)  # type: ignore[arg-type]
    elif n_docs == 1 or k == 0:
        bar = float(totals.mean())
    else:
        bar = float(totals.mean() + k * totals.std(correction=0 if std_kind == "population" else 1))
    slack = 1e-9 * max(1.0, abs(bar))
    kept = [d for d in range(n_docs) if totals[d] > 0 and totals[d] >= bar - slack]
    kept.sort(key=lambda d: (-float(totals[d]), d))
    return DocumentCitation(totals=tuple(totals.tolist()), cited=tuple(d + 1 for d in kept), threshold=bar)
