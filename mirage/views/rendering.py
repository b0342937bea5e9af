"""Results as plain text (computing never prints; rendering returns strings). HTML is :mod:`mirage.views.report`'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mirage.attribution.citations import citation_marks

if TYPE_CHECKING:
    from mirage.attribution.results import AttributionResult

__all__ = ["NO_SELF_CITATION", "result_to_text"]


#: What the views show for the self-citations of a given answer without citation marks
#: (:attr:`~mirage.attribution.results.AttributionResult.can_self_cite`).
NO_SELF_CITATION = "n/a (given answer)"


def format_citations(ids: Sequence[int]) -> str:
    """Document ids as citation marks, ``[1][3]``; ``—`` for none."""
    return citation_marks(ids) or "—"


def result_to_text(res: AttributionResult) -> str:
    """Plain-text summary: each sentence with mirage's and the model's own citations."""
    lines = [f"Q: {res.question}"]
    for s in res.sentences:
        if not res.can_self_cite:
            self_cites, flag = NO_SELF_CITATION, ""
        else:
            self_cites = format_citations(s.self_citations)
            flag = "" if sorted(s.mirage_citations) == sorted(s.self_citations) else "  (differ)"
        lines.append(f"  {s.text}\n    mirage {format_citations(s.mirage_citations)}  self {self_cites}{flag}")
    return "\n".join(lines)
