"""The MIRAGE authors' XOR-AttriQA scoring (``sec4_alignment/MIRAGE_match.py`` of ``Betswish/MIRAGE-reproduce``),
re-implemented from its description on the outputs of inseq's ``attribute_context``
(:func:`mirage.peers.inseq.run_reference`), as an independent check of ``--preset authors``. Nothing of mirage's
own selection or aggregation is used here (numpy only, as the script), except which context tokens are a passage's
content (:func:`passage_of_tokens`).

What the script does with one answer's inseq outputs (inseq run with ``context_sensitivity_std_threshold=0``, so
with CCI rows for every token at or above the answer's mean CTI, ranked by CTI, strongest first):

* ``n`` = the tokens with ``score >= threshold``: ``np.mean + np.std`` (population std) for MIRAGE-EX, the
  calibrated threshold for MIRAGE-CAL; the CCI rows of the first ``n`` ranked tokens are used; ``n = 0``: nothing cited;
* each row's context scores lose the passage markers and are split into passages (here: ``passage_of`` per context
  token, ``-1`` for scaffolding, which on mirage's prompts is what ``aggregation.context: content`` masks);
* top-% (``top < 0``): keep scores ``>= (1 + top/100)·max − top/100·min`` of all passages' scores concatenated (a
  range rule); top-k (``top > 0``): keep scores ``>= np.sort(scores)[-top]`` (ties kept);
* a passage is cited when its kept scores, summed over the rows, are non-zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mirage.attribution.prompts import PreparedItem

__all__ = ["authors_citations", "ex_threshold", "kept_sums", "passage_of_tokens", "ranked_by_cti"]


def kept_sums(passages: Sequence[Sequence[float] | np.ndarray], top: int) -> np.ndarray:
    """Per passage, the sum of its scores the script's rule keeps: ``top > 0`` the top ``top`` of all passages'
    scores concatenated (ties kept), ``top < 0`` the range rule for ``-top`` %."""
    arrays = [np.asarray(p, dtype=float) for p in passages]
    scores = np.concatenate(arrays)
    if top < 0:
        threshold = (1 + top / 100) * np.max(scores) - top / 100 * np.min(scores)
    else:
        threshold = np.sort(scores)[-top]
    return np.array([np.where(p < threshold, 0.0, p).sum() for p in arrays])


def ex_threshold(cti: Sequence[float], std_k: float = 1.0) -> float:
    """MIRAGE-EX's CTI threshold in the script: ``np.mean + std_k * np.std`` (the population std)."""
    values = np.asarray(cti, dtype=float)
    return float(np.mean(values) + std_k * np.std(values))


def authors_citations(cti: Sequence[float], ranked_rows: Sequence[Sequence[float]], threshold: float,
                      passage_of: Sequence[int], n_passages: int, top: int) -> list[bool]:
    """The script's citations of one answer: ``ranked_rows`` are the CCI rows (one score per context token) of the
    tokens at or above the answer's mean CTI, strongest CTI first; ``passage_of[j]`` is context token j's passage
    (``-1``: scaffolding, left out); ``top``: 3 for top-3, -5 for top-5 %."""
    n = int(np.sum(np.asarray(cti, dtype=float) >= threshold))
    members = [[j for j, d in enumerate(passage_of) if d == p] for p in range(n_passages)]
    total = np.zeros(n_passages)
    for row in ranked_rows[:n]:
        values = np.asarray(row, dtype=float)
        total += kept_sums([values[m] for m in members], top)
    return [bool(v) for v in total]


def ranked_by_cti(selected: Sequence[int], cti: Sequence[float]) -> list[int]:
    """inseq's order of the tokens it attributes: by |CTI| descending, ties in token order (a stable sort)."""
    return sorted(selected, key=lambda i: -abs(cti[i]))


def passage_of_tokens(prep: PreparedItem) -> list[int]:
    """Per context token of mirage's prompt, its passage (0-based), or -1 for the prompt's scaffolding
    (``Document [i]:``, newlines): the script splits passages at CORA's ``<i>`` markers, which mirage's prompts do
    not have; these are the tokens ``aggregation.context: content`` keeps."""
    from mirage.attribution.aggregation import content_mask

    content = content_mask(prep.tokens, prep.prompt.user_spans)
    return [d if c else -1 for d, c in zip(prep.tokens.context_docs, content)]

