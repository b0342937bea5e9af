"""Document methods that remove documents from the prompt and read the answer again: leave-one-out
(:class:`LeaveOneOutMethod`, ``leave_one_out``), ARC-JSD (:class:`ArcJSDMethod`, ``arc_jsd``), Shapley values
(:class:`ShapleyMethod`, ``shapley``; the arithmetic in :func:`shapley_values`) and ContextCite's sparse linear
surrogate (:class:`ContextCiteMethod`, ``contextcite``; its masks in :func:`contextcite_masks`, its fit in
:func:`lasso_surrogate`).

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
from typing import TYPE_CHECKING, ClassVar

import torch

from mirage.attribution.cti import js
from mirage.attribution.forward import token_probabilities
from mirage.attribution.methods.base import DocumentMethod, MethodScores, register_document_method
from mirage.attribution.methods.passes import log_distributions, subset_readouts

if TYPE_CHECKING:
    from mirage.attribution.methods.base import DocumentInputs, PassMeter

__all__ = ["ArcJSDMethod", "ContextCiteMethod", "LeaveOneOutMethod", "ShapleyMethod", "answer_logprobs",
           "contextcite_masks", "lasso_surrogate", "logit_of_logprob", "permutation_orders", "shapley_values"]


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


def contextcite_masks(n_docs: int, count: int, keep_prob: float, seed: int = 0) -> list[tuple[bool, ...]]:
    """ContextCite's ablation masks (keep = True): mask ``j`` is drawn from numpy's ``RandomState(seed * count + j)``
    as a choice of False / True per document with probabilities ``1 - keep_prob`` / ``keep_prob``, so seed 0 gives
    ContextCite's own masks and two seeds never share a draw (as :mod:`mirage.peers.contextcite` runs it)."""
    import numpy as np

    masks = []
    for j in range(count):
        rng = np.random.RandomState(seed * count + j)
        masks.append(tuple(bool(v) for v in rng.choice([False, True], size=n_docs, p=[1 - keep_prob, keep_prob])))
    return masks


def logit_of_logprob(logprob: torch.Tensor) -> torch.Tensor:
    """``log p - log(1 - p)`` of a log-probability (ContextCite's ``logit_prob`` output), in float64."""
    logprob = logprob.double()
    return logprob - torch.log1p(-torch.exp(logprob))


def lasso_surrogate(masks: Sequence[Sequence[bool]], targets: Sequence[float], alpha: float
                    ) -> tuple[list[float], float]:
    """ContextCite's surrogate: a LASSO (scikit-learn's, ``alpha``, intercept fitted, ``random_state=0``) of
    ``targets`` on the keep masks standardized per document (a document kept in every mask or in none has scale 1),
    its weights and intercept brought back to the masks' own scale: ``target ≈ weights · mask + intercept``."""
    import numpy as np
    from sklearn.linear_model import Lasso

    x = np.asarray(masks, dtype=np.float32)
    y = np.asarray(targets, dtype=np.float64)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale = np.where(scale == 0, 1.0, scale)
    lasso = Lasso(alpha=alpha, random_state=0, fit_intercept=True).fit((x - mean) / scale, y)
    weights = lasso.coef_ / scale
    return [float(w) for w in weights], float(lasso.intercept_ - (mean / scale) @ lasso.coef_)


@dataclass(frozen=True)
class ContextCiteMethod(DocumentMethod):
    """ContextCite (Cohen-Wang, Shah, Georgiev and Mądry, 2024, "ContextCite: Attributing Model Generation to
    Context"), one source per document: the answer is read again under ``num_ablations`` random keep/drop masks of
    the documents (:func:`contextcite_masks`: ContextCite's draws, each document kept with ``keep_prob``), and a
    sparse linear surrogate of the answer's score on the masks (:func:`lasso_surrogate`, LASSO ``lasso_alpha``) gives
    each document its weight.

    ``span="answer"`` (ContextCite's use: the whole response): the score is the logit of the answer's probability
    (ContextCite's ``logit_prob``: ``log p - log(1 - p)``, ``log p`` the sum of the answer's token log-probabilities),
    fitted per answer token as ContextCite fits it (divided by the number of tokens, the weights multiplied back),
    and ``doc_scores[t][d]`` is document d's weight for every token t: the rows are the answer's, not per token, so
    their mean (XOR-AttriQA's passage score) is ContextCite's weight. ``span="token"``: one surrogate per answer
    token, of that token's logit probability. Defaults are ContextCite's (context-cite 0.0.4: 64 ablations, keep
    probability 0.5, alpha 0.01). A document left out is dropped from the prompt and the others renumbered from 1
    (mirage's ablated prompt; :mod:`mirage.peers.contextcite` keeps the numbers, as its sources are spans of one
    text). No context scores. Cost: one pass per distinct mask (at most ``num_ablations``), each from the full
    prompt's cached prefix."""

    sparse: ClassVar[bool] = True
    name: str = "contextcite"
    num_ablations: int = 64
    keep_prob: float = 0.5
    lasso_alpha: float = 0.01
    span: str = "answer"
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.num_ablations, int) or self.num_ablations < 2:
            raise ValueError(f"num_ablations={self.num_ablations!r} is not valid; give at least 2 masks to fit on.")
        if not 0 < self.keep_prob < 1:
            raise ValueError(f"keep_prob={self.keep_prob!r} is not valid; give a probability strictly between 0 and 1.")
        if not self.lasso_alpha >= 0:
            raise ValueError(f"lasso_alpha={self.lasso_alpha!r} is not valid; give a number >= 0.")
        if self.span not in ("answer", "token"):
            raise ValueError(f"span={self.span!r} is not valid; choose 'answer' (the whole answer, ContextCite's use) "
                             "or 'token' (a surrogate per answer token).")

    def compute(self, inputs: DocumentInputs, meter: PassMeter) -> MethodScores:
        n = inputs.n_docs
        masks = contextcite_masks(n, self.num_ablations, self.keep_prob, self.seed)
        _full, rows = answer_logprobs(inputs, [tuple(d for d in range(n) if m[d]) for m in masks])  # [masks, n_answer]
        if self.span == "answer":
            n_answer = inputs.n_answer
            targets = logit_of_logprob(rows.sum(dim=1)) / n_answer
            weights, _bias = lasso_surrogate(masks, targets.tolist(), self.lasso_alpha)
            doc = torch.tensor([w * n_answer for w in weights], dtype=torch.float64).expand(n_answer, n).clone()
        else:
            logits = logit_of_logprob(rows)
            doc = torch.tensor([lasso_surrogate(masks, logits[:, t].tolist(), self.lasso_alpha)[0]
                                for t in range(inputs.n_answer)], dtype=torch.float64)
        distinct = len(set(masks))
        return MethodScores(doc=doc,
                            notes={"contextcite": f"{len(masks)} masks, {distinct} distinct, span {self.span}"})


register_document_method(LeaveOneOutMethod())
register_document_method(ArcJSDMethod())
register_document_method(ShapleyMethod())
register_document_method(ContextCiteMethod())
