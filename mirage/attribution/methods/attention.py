"""Attention-based document methods: the answer's raw attention to each document (:class:`AttentionMethod`,
registered as ``attention_last`` and ``attention_all``), AttnTrace's top-k, subsampled variant
(:class:`AttnTraceMethod`, ``attntrace``) and attention rollout (:class:`RolloutMethod`, ``rollout``; the
arithmetic in :func:`rollout`).

Every attention score reads, for answer token t, the attention row of the position whose logits predict t (the
prompt's last token for the first answer token, answer token t - 1 after it), as
:func:`mirage.likelihood.signals.passage_signals` reads the answer's attention share; the pass runs with eager
attention (the model's own kernel restored after). Decoder-only models only.

Shapes: ``n_answer`` answer tokens, ``n_docs`` documents, ``n_context`` context tokens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from mirage.attribution.forward import model_inputs
from mirage.attribution.methods.base import DocumentMethod, MethodScores, register_document_method
from mirage.attribution.methods.passes import attention_pass, attention_rows, layer_indices

if TYPE_CHECKING:
    from mirage.attribution.methods.base import DocumentInputs, PassMeter
    from mirage.attribution.prompts import PreparedItem

__all__ = ["AttentionMethod", "AttnTraceMethod", "RolloutMethod", "context_attention", "rollout", "subsamples"]


def context_attention(inputs: DocumentInputs, prepared: PreparedItem, layers: str, *, method: str) -> torch.Tensor:
    """``[n_answer, n_context]`` of ``prepared`` (the item with some of its documents): each answer token's
    attention to each of its context tokens, averaged over heads and the ``layers`` chosen
    (:func:`~mirage.attribution.methods.passes.layer_indices`)."""
    ids = list(prepared.tokens.ids)
    attentions = attention_pass(inputs, ids, method=method)
    _seq, rows = model_inputs(inputs.lm, ids, inputs.answer_ids)
    return attention_rows(attentions, rows, prepared.tokens.context_positions,
                          layer_indices(len(attentions), layers))


@dataclass(frozen=True)
class AttentionMethod(DocumentMethod):
    """Raw attention (the attention baseline of ContextCite, Cohen-Wang et al., 2024, "ContextCite: Attributing
    Model Generation to Context", and of AttnTrace, Wang et al., 2025).

    ``context_scores[t][j]``: the attention weight from the position predicting answer token t to context token j,
    averaged over every head of the chosen layers (``layers="last_quarter"``: the last ⌈L/4⌉ of the model's L
    layers, ``attention_last``; ``"all"``, ``attention_all``); ``doc_scores[t][d]``: its sum over document d's
    tokens (the attention mass document d receives; a row sums to at most 1, the rest going to the template,
    the question and the answer). Cost: one forward pass with eager attention, returning every layer's weights
    (``[heads, seq, seq]`` per layer)."""

    name: str = "attention_all"
    layers: str = "all"

    def __post_init__(self) -> None:
        layer_indices(4, self.layers)  # a ValueError naming the field for another value

    def compute(self, inputs: DocumentInputs, meter: PassMeter) -> MethodScores:
        context = context_attention(inputs, inputs.prepared, self.layers, method=self.name)
        return MethodScores(doc=inputs.per_document(context), context=context)


def subsamples(n_docs: int, *, samples: int, keep: float, seed: int) -> list[tuple[int, ...]]:
    """``samples`` subsets of ``n_docs`` documents, each of ``max(1, round(keep * n_docs))`` documents (0-based,
    ascending), seeded: drawn in rounds, each round a random permutation of the documents cut into subsets of that
    size (the last one topped up with other documents), so that every document is in some subset once ``samples``
    covers a round."""
    size = min(n_docs, max(1, round(keep * n_docs)))
    rng = random.Random(seed)
    out: list[tuple[int, ...]] = []
    while len(out) < samples:
        order = list(range(n_docs))
        rng.shuffle(order)
        for start in range(0, n_docs, size):
            chunk = order[start:start + size]
            if len(chunk) < size:
                rest = [d for d in order if d not in chunk]
                chunk += rng.sample(rest, size - len(chunk))
            out.append(tuple(sorted(chunk)))
            if len(out) == samples:
                break
    return out


@dataclass(frozen=True)
class AttnTraceMethod(DocumentMethod):
    """AttnTrace (Wang, Geng, Chen and Jia, 2025, "AttnTrace: Attention-based Context Traceback for Long-Context
    LLMs"): attention with top-k token averaging and context subsampling.

    For each of ``samples`` seeded subsamples of the documents (:func:`subsamples`, ``keep`` of them each; a
    subsample's prompt numbers its documents from 1), one eager-attention pass gives each answer token's attention
    to each context token, averaged over every head of every layer (``layers``); a document's score in that
    subsample is the mean of its ``top_k`` largest weights (all of them when it has fewer tokens).
    ``doc_scores[t][d]`` is the mean of document d's scores over the subsamples that keep it (0 for one none keeps,
    only when ``samples`` covers no whole round). Per answer token, where the paper averages the attention over the
    answer's tokens before the top-k: summing these rows is close to, not the same as, the paper's score. No context
    scores (each subsample's prompt has its own context tokens). Cost: ``samples`` forward passes with eager
    attention; with ``keep=1`` every subsample is the full prompt (and the pass repeats)."""

    name: str = "attntrace"
    samples: int = 8
    keep: float = 0.5
    top_k: int = 5
    seed: int = 0
    layers: str = "all"

    def __post_init__(self) -> None:
        layer_indices(4, self.layers)
        if not isinstance(self.samples, int) or self.samples < 1:
            raise ValueError(f"samples={self.samples!r} is not valid; give at least 1 subsample.")
        if not isinstance(self.top_k, int) or self.top_k < 1:
            raise ValueError(f"top_k={self.top_k!r} is not valid; give at least 1 token per document.")
        if not 0 < self.keep <= 1:
            raise ValueError(f"keep={self.keep!r} is not valid; give the share of documents kept, in (0, 1].")

    def compute(self, inputs: DocumentInputs, meter: PassMeter) -> MethodScores:
        total = torch.zeros(inputs.n_answer, inputs.n_docs, dtype=torch.float64)
        seen = torch.zeros(inputs.n_docs, dtype=torch.float64)
        for kept in subsamples(inputs.n_docs, samples=self.samples, keep=self.keep, seed=self.seed):
            prepared = inputs.with_documents(kept)
            context = context_attention(inputs, prepared, self.layers, method=self.name)
            docs = torch.tensor(list(prepared.tokens.context_docs), dtype=torch.long)
            for local, doc in enumerate(kept):
                weights = context[:, docs == local]  # [n_answer, tokens of the document]
                if weights.shape[1]:
                    k = min(self.top_k, weights.shape[1])
                    total[:, doc] += weights.topk(k, dim=1).values.mean(dim=1)
                seen[doc] += 1
        return MethodScores(doc=total / seen.clamp_min(1.0),
                            notes={"subsamples": f"{self.samples} of "
                                                 f"{min(inputs.n_docs, max(1, round(self.keep * inputs.n_docs)))} "
                                                 f"document(s) each; documents never kept: "
                                                 f"{[d + 1 for d in range(inputs.n_docs) if not seen[d]] or 'none'}"})


register_document_method(AttentionMethod(name="attention_last", layers="last_quarter"))
register_document_method(AttentionMethod(name="attention_all", layers="all"))
register_document_method(AttnTraceMethod())


def rollout(attentions: list[torch.Tensor] | tuple[torch.Tensor, ...], *, residual: float = 0.5) -> torch.Tensor:
    """Attention rollout (Abnar and Zuidema, 2020, "Quantifying Attention Flow in Transformers") of one sequence:
    ``[seq, seq]`` (float64), the product over layers, last to first, of each layer's attention averaged over heads
    mixed with the identity for the residual stream, ``residual · I + (1 - residual) · A``, its rows renormalised.
    ``attentions``: per layer ``[1, heads, seq, seq]``."""
    out = None
    for layer in attentions:
        a = layer[0].double().mean(dim=0).cpu()
        a = residual * torch.eye(a.shape[0], dtype=a.dtype) + (1 - residual) * a
        a = a / a.sum(dim=-1, keepdim=True)
        out = a if out is None else a @ out
    if out is None:
        raise ValueError("rollout needs the attention weights of at least one layer.")
    return out


@dataclass(frozen=True)
class RolloutMethod(DocumentMethod):
    """Attention rollout (Abnar and Zuidema, 2020): ``context_scores[t][j]``, the rolled-out attention
    (:func:`rollout`, ``residual`` the identity's share at each layer) from the position predicting answer token t
    to context token j; ``doc_scores[t][d]``, its sum over document d's tokens. Cost: one forward pass with eager
    attention."""

    name: str = "rollout"
    residual: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.residual < 1.0:
            raise ValueError(f"residual={self.residual!r} is not valid; give the identity's share, in [0, 1).")

    def compute(self, inputs: DocumentInputs, meter: PassMeter) -> MethodScores:
        ids = list(inputs.prepared.tokens.ids)
        flow = rollout(attention_pass(inputs, ids, method=self.name), residual=self.residual)
        _seq, rows = model_inputs(inputs.lm, ids, inputs.answer_ids)
        columns = torch.tensor(list(inputs.prepared.tokens.context_positions), dtype=torch.long)
        context = flow.index_select(0, torch.tensor(rows, dtype=torch.long)).index_select(1, columns)
        return MethodScores(doc=inputs.per_document(context), context=context)


register_document_method(RolloutMethod())
