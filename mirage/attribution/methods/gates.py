"""The document-gate JVP (:class:`DocumentGateJVPMethod`, ``document_gate_jvp``): a first-order estimate of each
document's effect on every answer token at once, by forward-mode differentiation through one gate per document
(:func:`gated_logprobs`, the gated pass it differentiates).

Shapes: ``n_answer`` answer tokens, ``n_docs`` documents, ``seq`` input positions, ``hidden`` model width.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from mirage.attribution.forward import embed, logits_from_embeds, model_inputs
from mirage.attribution.methods.base import DocumentMethod, MethodScores, register_document_method
from mirage.likelihood.signals import eager_attention_on

if TYPE_CHECKING:
    from mirage.attribution.methods.base import DocumentInputs, PassMeter

__all__ = ["DocumentGateJVPMethod", "gated_logprobs", "gated_pass"]


def gated_pass(inputs: DocumentInputs) -> Callable[[torch.Tensor], torch.Tensor]:
    """``f(alpha) -> [n_answer]``: the log-probability of each answer token after the full prompt whose input
    embeddings at document d's context tokens are scaled by ``alpha[d]`` (``alpha`` ``[n_docs]``; every other
    position as it is). ``alpha = 1`` is the plain pass; ``alpha[d] = 0`` zeroes document d's embeddings (its
    positions remain: not the prompt without it). Differentiable in ``alpha``, forward- and reverse-mode."""
    lm, tokens = inputs.lm, inputs.prepared.tokens
    seq, positions = model_inputs(lm, tokens.ids, inputs.answer_ids)
    embeds = embed(lm, seq)  # [1, seq, hidden]
    gate_of = torch.zeros(len(seq), dtype=torch.long)  # 0: ungated, 1 + d: document d's gate
    gate_of[torch.tensor(list(tokens.context_positions), dtype=torch.long)] = \
        torch.tensor(list(tokens.context_docs), dtype=torch.long) + 1
    gate_of = gate_of.to(lm.device)
    ids = torch.tensor(list(inputs.answer_ids), device=lm.device, dtype=torch.long).unsqueeze(1)

    def f(alpha: torch.Tensor) -> torch.Tensor:
        scale = torch.cat([alpha.new_ones(1), alpha])[gate_of].to(embeds.dtype)  # [seq]
        logits = logits_from_embeds(lm, embeds * scale[None, :, None], inputs.answer_ids, positions)[0]
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # fp32 at least, a float64 model's own
        return torch.log_softmax(logits, dim=-1).gather(1, ids).squeeze(1)

    return f


def gated_logprobs(inputs: DocumentInputs, alpha: torch.Tensor) -> torch.Tensor:
    """:func:`gated_pass` at ``alpha`` ``[n_docs]``: ``[n_answer]`` (no graph kept)."""
    with torch.no_grad():
        return gated_pass(inputs)(alpha.to(inputs.lm.device))


def _forward_ad_missing(err: BaseException) -> bool:
    """Whether ``err`` says an operation (an attention kernel) has no forward-mode derivative."""
    text = str(err).lower()
    return "forward ad" in text or "forward-mode" in text


@dataclass(frozen=True)
class DocumentGateJVPMethod(DocumentMethod):
    """A document gate differentiated forward (mirage's; the first-order estimate of an ablation is that of
    attribution patching, Nanda, 2023, "Attribution Patching: Activation Patching At Industrial Scale", and Syed,
    Rager and Conmy, 2023, "Attribution Patching Outperforms Automated Circuit Discovery", here with forward-mode
    differentiation: Baydin et al., 2018, "Automatic Differentiation in Machine Learning: a Survey").

    Each document's input embeddings are scaled by a gate ``alpha_d = 1`` (:func:`gated_pass`);
    ``doc_scores[t][d] = d log p(y_t) / d alpha_d`` at ``alpha = 1``, from ``torch.func.jvp`` with tangent e_d: one
    forward-mode pass per document gives the derivative for every answer token at once. Since
    ``f(1) - f(alpha_d = 0) ~ d f / d alpha_d``, it is the first-order estimate of zeroing the document's embeddings
    (positive: the document raises the token's probability), comparable in sign with ``leave_one_out``.
    Where ``torch.func.jvp`` cannot run through the model's attention kernel (SDPA's fused kernels have no
    forward-mode derivative), the passes use eager attention, and ``notes["attention"]`` says so. No context scores.
    Cost: n_docs forward-mode (JVP) passes over the full prompt, each about the cost of two to three forward passes;
    no cache reuse (every gate moves the whole sequence)."""

    name: str = "document_gate_jvp"

    def compute(self, inputs: DocumentInputs, meter: PassMeter) -> MethodScores:
        lm = inputs.lm
        f = gated_pass(inputs)
        ones = torch.ones(inputs.n_docs, device=lm.device, dtype=torch.promote_types(lm.dtype, torch.float32))
        notes: dict[str, str] = {}

        def jvp(d: int) -> torch.Tensor:
            tangent = torch.zeros_like(ones)
            tangent[d] = 1.0
            with meter.mode("jvp"), torch.no_grad():
                return torch.func.jvp(f, (ones,), (tangent,))[1]

        try:
            columns = [jvp(d) for d in range(inputs.n_docs)]
        except (NotImplementedError, RuntimeError) as err:
            if not _forward_ad_missing(err):
                raise
            kernel = str(getattr(lm.model.config, "_attn_implementation", None))
            with eager_attention_on(lm.model) as eager:
                if not eager:
                    raise ValueError(f"{self.name}: torch.func.jvp cannot run through {lm.name}'s attention kernel "
                                     f"({kernel}), and it cannot switch to eager attention.") from err
                columns = [jvp(d) for d in range(inputs.n_docs)]
            cause = str(err).strip().splitlines()[0][:160]
            notes["attention"] = f"eager (torch.func.jvp cannot run through {kernel}: {cause})"
        return MethodScores(doc=torch.stack(columns, dim=1), notes=notes)


register_document_method(DocumentGateJVPMethod())
