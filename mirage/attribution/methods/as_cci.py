"""A document method as MIRAGE's CCI step (``cci.method`` = ``attention_last``, ``attention_all``, ``rollout`` or
``attnlrp``, :data:`mirage.attribution.cci.CONTEXT_DOCUMENT_METHODS`): CTI selects the answer tokens as always, the
method scores every context token for every answer token in its own passes, and its rows of the selected tokens
become the CCI scores, which the existing selectors (top-k / top-%) and the aggregation turn into sentence citations.

These methods attribute the answer token itself, not MIRAGE's contrastive target (log p(y) − log p(y_nc)): their
``contrast_ids`` are None (the report then names the answer token as its own contrast), and their cost is the
method's (one eager-attention forward pass for attention and rollout, one forward and one backward per answer token
for AttnLRP), whatever CTI selected.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from mirage.attribution.cci import CCIScores, document_method
from mirage.attribution.methods.base import DocumentAttribution, document_inputs
from mirage.attribution.token_scores import TargetSpec, TokenScores, cci_targets, score_tokens
from mirage.registry import DOCUMENT_METHODS

if TYPE_CHECKING:
    from mirage.attribution.generation import Generated
    from mirage.attribution.prompts import PreparedItem
    from mirage.attribution.tokenization import TokenizedAnswer
    from mirage.config import MirageConfig

__all__ = ["context_cci"]


def context_cci(mirage: Any, prepared: PreparedItem, answer: TokenizedAnswer, cfg: MirageConfig, *,
                targets: TargetSpec = "selected", generated: Generated | None = None) -> TokenScores:
    """:func:`mirage.attribution.token_scores.score_tokens` with CCI from the document method ``cfg.cci.method``
    names: CTI of every answer token, then the method's context rows of the ``targets``. Raises a ValueError naming
    the method when it scores documents only."""
    name = document_method(cfg.cci)
    if name is None:
        raise ValueError(f"cci.method={cfg.cci.method!r} is a gradient method; score it with score_tokens.")
    base = score_tokens(mirage.lm, prepared.tokens, answer, cfg, targets="none", generated=generated)
    picked = cci_targets(base.cti, len(answer.ids), targets)
    t = time.perf_counter()
    if picked:
        found = DOCUMENT_METHODS.lookup(name)
        result: DocumentAttribution = found.attribute(document_inputs(mirage, prepared, answer.ids, config=cfg))
        if result.context_scores is None:
            raise ValueError(f"cci.method={cfg.cci.method!r}: the document method {name!r} scores documents only; "
                             "give one that scores context tokens (attention_last, attention_all, rollout, attnlrp).")
        rows = tuple(result.context_scores[i] for i in picked)
    else:
        rows = ()
    cci = CCIScores(selected=picked, contrast_ids=tuple(None for _ in picked), scores=rows)
    return TokenScores(cti=base.cti, cci=cci, timings={**base.timings, "cci": time.perf_counter() - t})
