"""Results as plain text (computing never prints; rendering returns strings). HTML is :mod:`mirage.views.report`'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mirage.attribution.results import AttributionResult


def format_citations(ids: Sequence[int]) -> str:
    """Document ids as citation marks, ``[1][3]``; ``—`` for none."""
    return "".join(f"[{i}]" for i in ids) or "—"


def result_to_text(res: AttributionResult) -> str:
    """Plain-text summary: each sentence with mirage's and the model's own citations."""
    lines = [f"Q: {res.question}"]
    for s in res.sentences:
        flag = "" if sorted(s.mirage_citations) == sorted(s.self_citations) else "  (differ)"
        lines.append(f"  {s.text}\n    mirage {format_citations(s.mirage_citations)}  "
                     f"self {format_citations(s.self_citations)}{flag}")
    return "\n".join(lines)
