"""MIRAGE itself as a document method (:class:`MirageCCIMethod`): CTI picks the answer's context-sensitive tokens,
CCI takes the gradient of each one's contrastive target on every context token's embedding (saliency,
input×gradient or integrated gradients, :mod:`mirage.attribution.cci`), and a document's score for a token is the
sum of its context tokens' CCI scores. Registered twice: ``mirage_cci`` (the method as the paper runs it: CCI of the
tokens CTI selects, every other token scoring 0 for every document) and ``gradient_all`` (CCI of every answer token,
no CTI selection: the plain gradient baseline), so that MIRAGE is compared with the other methods on the same
answers, through the same interface and the same cost meter.

Shapes: ``n_answer`` answer tokens, ``n_docs`` documents, ``n_context`` context tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch

from mirage.attribution.methods.base import DocumentMethod, MethodScores, register_document_method

if TYPE_CHECKING:
    from mirage.attribution.methods.base import DocumentInputs, PassMeter

__all__ = ["MirageCCIMethod"]


@dataclass(frozen=True)
class MirageCCIMethod(DocumentMethod):
    """MIRAGE's CTI and CCI steps as a document method.

    ``context_scores[t][j]``: CCI score of context token j for answer token t (``cci_method``: ``saliency``,
    ``input_x_gradient`` or ``integrated_gradients`` with ``ig_steps``), for the tokens attributed, 0 for the
    others; ``doc_scores[t][d]``: the sum of that row over document d's context tokens. ``targets="selected"``
    attributes the tokens CTI selects (KL of the next-token distributions without and with the documents, past
    mean + ``std_k``·std of the answer's scores); ``"all"`` attributes every answer token. Cost: two forward passes
    (with and without the documents; CCI reuses the first one's graph where it can) and one backward pass per
    attributed token (batched by vmap where memory allows, counted per token)."""

    name: str = "mirage_cci"
    cci_method: Literal["saliency", "input_x_gradient", "integrated_gradients"] = "saliency"
    targets: Literal["selected", "all"] = "selected"
    std_k: float = 1.0
    ig_steps: int = 16

    def compute(self, inputs: DocumentInputs, meter: PassMeter) -> MethodScores:
        from mirage.attribution.token_scores import score_tokens
        from mirage.attribution.tokenization import TokenizedAnswer
        from mirage.config import MirageConfig

        cfg = MirageConfig().replace(cti={"std_k": self.std_k},
                                     cci={"method": self.cci_method, "ig_steps": self.ig_steps})
        answer = TokenizedAnswer(ids=inputs.answer_ids, offsets=tuple((0, 0) for _ in inputs.answer_ids))
        scores = score_tokens(inputs.lm, inputs.prepared.tokens, answer, cfg, targets=self.targets)
        meter.add_backward(len(scores.cci.selected) * (self.ig_steps if self.cci_method == "integrated_gradients"
                                                        else 1))
        context = torch.zeros(inputs.n_answer, inputs.n_context, dtype=torch.float64)
        for t, row in zip(scores.cci.selected, scores.cci.scores):
            context[t] = torch.tensor(row, dtype=torch.float64)
        return MethodScores(doc=inputs.per_document(context), context=context,
                            notes={"attributed_tokens": ",".join(map(str, scores.cci.selected))})


register_document_method(MirageCCIMethod())
register_document_method(MirageCCIMethod(name="gradient_all", targets="all"))
