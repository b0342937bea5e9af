"""The differentiable passes attribution takes its gradients from: one attributed input
(:class:`AttributionGraph`, :func:`attribution_graph`) or several in one left-padded batch (:class:`BatchGraph`,
:func:`batched_attribution_graph`), parameters frozen and gradients to the input embeddings only, each planned to
fit the memory budget (:func:`mirage.attribution.planner.plan_graph`: its layers checkpointed where the whole graph
would not fit).

Shapes: ``n_answer`` answer tokens, ``vocab`` vocabulary entries, ``seq`` input positions, ``hidden`` model width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mirage.attribution.forward import (
    answer_logits,
    causal_pass,
    embed,
    frozen_parameters,
    left_padded,
    logits_from_embeds,
    model_inputs,
)
from mirage.attribution.models import LoadedModel
from mirage.attribution.planner import checkpointed_layers, out_of_memory_error, plan_graph

__all__ = [
    "AttributionGraph",
    "BatchGraph",
    "attribution_graph",
    "batched_attribution_graph",
    "graph_from_embeds",
    "with_documents_logits",
]


@dataclass
class AttributionGraph:
    """One differentiable forward pass over the attributed input, parameters frozen: the input-embedding leaf
    ``[1, seq, hidden]`` and the logits ``[1, n_answer, vocab]`` predicting every answer token.

    When the answer was not just generated, the token-scoring stage builds this once and reads CTI's with-documents
    logits from it, so CCI's backward passes need no forward pass of their own.
    """

    inputs: torch.Tensor
    logits: torch.Tensor
    #: Whether the pass ran with its layers checkpointed (:func:`plan_graph`): each backward pass recomputes them.
    checkpointed: bool = False

    def answer_logits(self) -> torch.Tensor:
        """Detached fp32 logits ``[n_answer, vocab]`` (what :func:`answer_logits` returns)."""
        return self.logits[0].detach().float()


def graph_from_embeds(lm: LoadedModel, embeds: torch.Tensor, answer_ids: Sequence[int],
                      positions: Sequence[int]) -> AttributionGraph:
    """A differentiable pass from a copy of ``embeds`` ``[1, seq, hidden]`` made a gradient leaf (call it with the
    parameters frozen, see :func:`frozen_parameters`); its layers checkpointed where :func:`plan_graph` says the
    whole graph would not fit."""
    leaf = embeds.clone().requires_grad_(True)
    plan = plan_graph(lm, embeds.shape[1])
    try:
        with checkpointed_layers(lm.model, plan.checkpoint):
            logits = logits_from_embeds(lm, leaf, answer_ids, positions)
    except torch.OutOfMemoryError as err:
        raise out_of_memory_error(lm, embeds.shape[1], err) from None
    return AttributionGraph(inputs=leaf, logits=logits, checkpointed=plan.checkpoint)


def attribution_graph(lm: LoadedModel, input_ids: Sequence[int], answer_ids: Sequence[int],
                      answer_positions: Sequence[int]) -> AttributionGraph:
    """Run the attributed input once with gradients to the input embeddings only (see :func:`model_inputs`)."""
    with frozen_parameters(lm.model):
        return graph_from_embeds(lm, embed(lm, input_ids), answer_ids, answer_positions)


def with_documents_logits(lm: LoadedModel, prompt_ids: Sequence[int], answer_ids: Sequence[int], *,
                          graph: bool) -> tuple[torch.Tensor, AttributionGraph | None]:
    """The with-documents logits ``[n_answer, vocab]`` (fp32) and, with ``graph``, the differentiable pass they were
    read from (for CCI to take its gradients from); without it, an inference pass and None."""
    if graph:
        input_ids, positions = model_inputs(lm, prompt_ids, answer_ids)
        built = attribution_graph(lm, input_ids, answer_ids, positions)
        return built.answer_logits(), built
    return answer_logits(lm, prompt_ids, answer_ids), None


@dataclass
class BatchGraph:
    """One differentiable pass over several attributed inputs of a causal model, left-padded (parameters frozen):
    the input-embedding leaf ``[batch, width, hidden]``, the logits ``[batch, n_keep, vocab]`` of the last
    ``n_keep`` positions (``n_keep``: the longest answer), each row's padding ``pads[b]`` and answer length
    ``n_answer[b]``. Rows do not interact, so a sum of targets over rows has, on each row's inputs, the gradient of
    that row's target alone."""

    inputs: torch.Tensor
    logits: torch.Tensor
    pads: list[int]
    n_answer: list[int]
    #: Whether the pass ran with its layers checkpointed (:func:`plan_graph`).
    checkpointed: bool = False

    def column(self, row: int, i: int) -> int:
        """Where ``logits[row]`` holds the logits predicting answer token ``i`` of that row."""
        return self.logits.shape[1] - self.n_answer[row] + i

    def answer_logits(self, row: int) -> torch.Tensor:
        """Detached fp32 logits ``[n_answer, vocab]`` of one row (what :func:`answer_logits` returns)."""
        return self.logits[row, self.column(row, 0):].detach().float()


def batched_attribution_graph(lm: LoadedModel, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> BatchGraph:
    """:func:`attribution_graph` of several ``(prompt_ids, answer_ids)`` pairs in one left-padded pass (causal
    models only; the rows equal their single passes up to float rounding of batched matrix products)."""
    if lm.is_encoder_decoder:
        raise ValueError("batched_attribution_graph: causal models only.")
    if not pairs or any(not len(a) for _p, a in pairs):
        raise ValueError("every pair needs at least one answer token.")
    inputs = [model_inputs(lm, p, a)[0] for p, a in pairs]
    ids, kwargs = left_padded(lm, inputs)
    width, n_keep = ids.shape[1], max(len(a) for _p, a in pairs)
    plan = plan_graph(lm, width, rows=len(inputs))
    with frozen_parameters(lm.model):
        with torch.no_grad():
            leaf = lm.model.get_input_embeddings()(ids).detach()
        leaf.requires_grad_(True)
        try:
            with checkpointed_layers(lm.model, plan.checkpoint):
                logits = causal_pass(lm, range(width - n_keep, width), inputs_embeds=leaf, **kwargs).logits
        except torch.OutOfMemoryError as err:
            raise out_of_memory_error(lm, width * len(inputs), err) from None
    return BatchGraph(inputs=leaf, logits=logits, pads=[width - len(seq) for seq in inputs],
                      n_answer=[len(a) for _p, a in pairs], checkpointed=plan.checkpoint)
