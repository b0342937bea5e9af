"""The numbers of mirage's markdown tables (mirage/views/markdown.py): a count as a percentage of another is ``–``
where the count is missing, as a missing share is, rather than an error."""

from __future__ import annotations

from mirage.views.markdown import fmt_pct


def test_a_missing_count_of_a_total_is_a_dash_like_a_missing_share():
    assert fmt_pct(3, of=4) == "75.0"
    assert fmt_pct(3, of=0) == "–"
    assert fmt_pct(None, of=4) == "–"  # was a TypeError (None * 100)
    assert fmt_pct(None) == "–"
    assert fmt_pct(0.25, 0) == "25"
