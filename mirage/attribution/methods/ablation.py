"""Document methods that remove documents from the prompt and read the answer again: leave-one-out
(:class:`LeaveOneOutMethod`, ``leave_one_out``), ARC-JSD (:class:`ArcJSDMethod`, ``arc_jsd``) and Shapley values
(:class:`ShapleyMethod`, ``shapley``; the arithmetic in :func:`shapley_values`).

A prompt without some documents is the template's prompt with the others, renumbered from 1 (as the faithfulness
check and :func:`mirage.likelihood.signals.passage_signals` build it); without any, the contextless prompt. On a
decoder-only model each such pass reuses the full prompt's cached prefix: every token before the first document it
drops (:mod:`mirage.attribution.methods.passes`; on a sliding-window model whose cache cannot be cut back, one more
pass caches what the remaining prompts share); an encoder-decoder runs each prompt whole.

Shapes: ``n_answer`` answer tokens, ``n_docs`` documents, ``vocab`` vocabulary entries.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from mirage.attribution.cti import js
from mirage.attribution.forward import token_probabilities
from mirage.attribution.methods.base import DocumentMethod, MethodScores, register_document_method
from mirage.attribution.methods.passes import log_distributions, subset_readouts

if TYPE_CHECKING:
    from mirage.attribution.methods.base import DocumentInputs, PassMeter

__all__ = ["ArcJSDMethod", "LeaveOneOutMethod", "ShapleyMethod", "answer_logprobs", "permutation_orders",
           "shapley_values"]


def answer_logprobs(inputs: DocumentInputs, subsets: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Log p of each answer token with all documents ``[n_answer]`` and with each of ``subsets`` kept
    ``[len(subsets), n_answer]`` (float64), from :func:`~mirage.attribution.methods.passes.subset_readouts`."""
    def readout(logits: torch.Tensor) -> list[float]:
        return token_probabilities(logits.float(), inputs.answer_ids, log=True)

    full, rows = subset_readouts(inputs, subsets, readout)
    return (torch.tensor(full, dtype=torch.float64),
            torch.tensor(rows, dtype=torch.float64).reshape(len(subsets), inputs.n_answer))


def _without(inputs: DocumentInputs, d: int) -> tuple[int, ...]:
    return tuple(i for i in inputs.all_docs if i != d)


@dataclass(frozen=True)
class LeaveOneOutMethod(DocumentMethod):
    """Leave-one-out ablation (the leave-one-out baseline of ContextCite, Cohen-Wang et al., 2024; mirage's own
    ``passage_signals`` drop per token).

    ``doc_scores[t][d] = log p(y_t | all documents) - log p(y_t | all but d)`` (nats; positive: document d raises
    the answer token's probability). No context scores. Cost: n_docs + 1 forward passes, each after the first
    computing only the prompt from the removed document on (cached prefix; a whole pass on an encoder-decoder)."""

    name: str = "leave_one_out"

    def compute(self, inputs: DocumentInputs, meter: PassMeter) -> MethodScores:
        full, without = answer_logprobs(inputs, [_without(inputs, d) for d in inputs.all_docs])
        return MethodScores(doc=(full.unsqueeze(0) - without).T)


@dataclass(frozen=True)
class ArcJSDMethod(DocumentMethod):
    """ARC-JSD (Li et al., 2025, "Attributing Response to Context: A Jensen-Shannon Divergence Driven Mechanistic
    Study of Context Attribution in Retrieval-Augmented Generation").

    ``doc_scores[t][d]``: the Jensen-Shannon divergence (nats, in [0, ln 2]; :func:`mirage.attribution.cti.js`)
    between the next-token distributions at answer position t with all documents and with all but d. The paper
    sums it over the response's tokens (the citation rule's sum). No context scores. Cost: n_docs + 1 forward passes
    (|C| + 1), each after the first from the cached prefix."""

    name: str = "arc_jsd"

    def compute(self, inputs: DocumentInputs, meter: PassMeter) -> MethodScores:
        full, without = subset_readouts(inputs, [_without(inputs, d) for d in inputs.all_docs], log_distributions)
        ids = torch.tensor(list(inputs.answer_ids), device=full.device, dtype=torch.long)
        doc = torch.stack([js(full, logq, ids).double().cpu() for logq in without], dim=1)
        return MethodScores(doc=doc.clamp_min(0.0))


def shapley_values(n: int, value: Mapping[int, torch.Tensor]) -> torch.Tensor:
    """Exact Shapley values ``[n, *value_shape]`` (float64) of ``n`` players, ``value[mask]`` the value of the
    coalition whose bit i is set for each player i in it (every one of the 2**n masks):
    ``phi_i = sum_{S without i} |S|! (n - |S| - 1)! / n! * (v(S + i) - v(S))``. Their sum is
    ``v(all) - v(none)`` (efficiency)."""
    weights = [math.factorial(s) * math.factorial(n - s - 1) / math.factorial(n) for s in range(n)]
    rows = []
    for i in range(n):
        bit = 1 << i
        total = torch.zeros_like(value[0], dtype=torch.float64)
        for mask in range(1 << n):
            if not mask & bit:
                total += weights[mask.bit_count()] * (value[mask | bit].double() - value[mask].double())
        rows.append(total)
    return torch.stack(rows)


def permutation_orders(n: int, permutations: int, seed: int) -> list[list[int]]:
    """``permutations`` seeded random orders of ``n`` players (each a list of 0-based players)."""
    rng = random.Random(seed)
    orders = []
    for _ in range(permutations):
        order = list(range(n))
        rng.shuffle(order)
        orders.append(order)
    return orders


def _sampled_shapley(n: int, orders: Sequence[Sequence[int]], value: Mapping[int, torch.Tensor]) -> torch.Tensor:
    """Shapley values estimated from ``orders``: per player, its mean marginal contribution when it joins the
    players before it (every order sums to ``v(all) - v(none)``, so the estimate is efficient too)."""
    total = torch.zeros((n, *value[0].shape), dtype=torch.float64)
    for order in orders:
        mask = 0
        for player in order:
            total[player] += value[mask | (1 << player)].double() - value[mask].double()
            mask |= 1 << player
    return total / len(orders)


def _subset(mask: int, n: int) -> tuple[int, ...]:
    return tuple(i for i in range(n) if mask >> i & 1)


@dataclass(frozen=True)
class ShapleyMethod(DocumentMethod):
    """Shapley values of the documents (Shapley, 1953, "A Value for n-Person Games"; permutation sampling as in
    Castro, Gómez and Tejada, 2009, "Polynomial calculation of the Shapley value based on sampling").

    The value of a set S of documents is ``v(S)[t] = log p(y_t | the prompt with S)`` (the contextless prompt for
    S empty); ``doc_scores[t][d]`` is document d's Shapley value of ``v(.)[t]``, so that a token's scores sum to
    ``log p(y_t | all) - log p(y_t | none)``. Exact over the 2**n subsets for n_docs <= ``max_exact``; above, the
    mean marginal contribution over ``permutations`` seeded random orders (efficient as well). No context scores.
    Cost: 2**n forward passes exact (each after the first from the cached prefix); sampled, one per distinct
    subset the orders visit (at most ``permutations * (n - 1) + 2``)."""

    name: str = "shapley"
    max_exact: int = 10
    permutations: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.max_exact, int) or not 0 <= self.max_exact <= 16:
            raise ValueError(f"max_exact={self.max_exact!r} is not valid; give at most 16 documents (2**16 passes).")
        if not isinstance(self.permutations, int) or self.permutations < 1:
            raise ValueError(f"permutations={self.permutations!r} is not valid; give at least 1.")

    def compute(self, inputs: DocumentInputs, meter: PassMeter) -> MethodScores:
        n = inputs.n_docs
        if n <= self.max_exact:
            masks = list(range(1 << n))
            orders = None
        else:
            orders = permutation_orders(n, self.permutations, self.seed)
            masks = sorted({sum(1 << p for p in order[:k]) for order in orders for k in range(n + 1)})
        _full, rows = answer_logprobs(inputs, [_subset(mask, n) for mask in masks])
        value = dict(zip(masks, rows))
        if orders is None:
            phi, how = shapley_values(n, value), f"exact, over the 2**{n} = {len(masks)} subsets"
        else:
            phi = _sampled_shapley(n, orders, value)
            how = f"sampled: {len(orders)} permutations, {len(masks)} distinct subsets"
        return MethodScores(doc=phi.T, notes={"shapley": how})


register_document_method(LeaveOneOutMethod())
register_document_method(ArcJSDMethod())
register_document_method(ShapleyMethod())
