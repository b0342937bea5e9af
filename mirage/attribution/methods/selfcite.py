"""SelfCite's self-supervised citation reward (Chuang et al., "SelfCite: Self-Supervised Alignment for Context
Attribution in Large Language Models", ICML 2025), from the model itself: for an answer and a candidate citation set,
the answer's mean token log-probability with only the cited documents kept minus with the cited documents removed
(:func:`citation_rewards`; the sum of the paper's sufficiency and necessity terms, in which the full prompt's
likelihood cancels). Two passes per candidate, every pass after the first reusing the full prompt's cached prefix.

- :func:`best_citation`: every citation set of at most ``max_size`` documents scored, the best-rewarded first
  (best-of-N reranking; with five documents, the 15 one- and two-document sets), over the whole answer or one
  statement's tokens (:func:`citation_reward_rows` gives every token's, so one set of passes serves every sentence;
  the ``selfcite`` citation rule of :mod:`mirage.pipeline` cites each sentence so);
- :class:`SelfCiteMethod` (``selfcite``): the reward of each document cited alone, per answer token, as a document
  method: ``doc_scores[t][d] = log p(y_t | d alone) - log p(y_t | all but d)``.

Citations are numbered from 1, as the prompt numbers the documents.

Shapes: ``n_answer`` answer tokens, ``n_docs`` documents.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from mirage.attribution.methods.ablation import answer_logprobs
from mirage.attribution.methods.base import DocumentMethod, MethodScores, register_document_method

if TYPE_CHECKING:
    from mirage.attribution.methods.base import DocumentInputs, PassMeter

__all__ = ["RankedCitations", "SelfCiteMethod", "best_citation", "candidate_sets", "citation_reward_rows",
           "citation_rewards", "ranked", "token_means"]


def _kept_and_removed(inputs: DocumentInputs, cited: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    chosen = sorted({int(c) for c in cited})
    bad = [c for c in chosen if not 1 <= c <= inputs.n_docs]
    if not chosen or bad:
        raise ValueError(f"citation set {list(cited)} is not valid: give documents numbered 1..{inputs.n_docs}, at "
                         "least one.")
    kept = tuple(c - 1 for c in chosen)
    return kept, tuple(d for d in inputs.all_docs if d not in kept)


def citation_reward_rows(inputs: DocumentInputs, candidates: Sequence[Sequence[int]]) -> torch.Tensor:
    """Per candidate citation set (1-based documents) and answer token, ``log p(y_t | only those documents) -
    log p(y_t | without them)`` (nats; every document cited: against the contextless prompt): ``[n_candidates,
    n_answer]``, whose mean over a statement's tokens is the statement's SelfCite reward. One pass per distinct
    prompt."""
    pairs = [_kept_and_removed(inputs, c) for c in candidates]
    _full, rows = answer_logprobs(inputs, [s for pair in pairs for s in pair])
    return rows[0::2] - rows[1::2]


def token_means(rows: torch.Tensor, tokens: Sequence[int] | None = None) -> list[float]:
    """Each row of :func:`citation_reward_rows` averaged over ``tokens`` (0-based answer token indices, a
    statement's; default every token): each candidate's reward for that statement."""
    if tokens is not None:
        picked = sorted({int(t) for t in tokens})
        bad = [t for t in picked if not 0 <= t < rows.shape[1]]
        if not picked or bad:
            raise ValueError(f"tokens {list(tokens)} is not valid; give 0-based indices of the answer's "
                             f"{rows.shape[1]} tokens, at least one.")
        rows = rows[:, picked]
    return rows.mean(dim=1).tolist()


def citation_rewards(inputs: DocumentInputs, candidates: Sequence[Sequence[int]], *,
                     tokens: Sequence[int] | None = None) -> list[float]:
    """The SelfCite reward of each candidate citation set (1-based documents): the answer's (or, given ``tokens``,
    those answer tokens') mean token log-probability with only those documents minus without them (nats; every
    document cited: against the contextless prompt). One pass per distinct prompt."""
    return token_means(citation_reward_rows(inputs, candidates), tokens)


def candidate_sets(n_docs: int, max_size: int = 2) -> list[tuple[int, ...]]:
    """Every non-empty set of at most ``max_size`` of ``n_docs`` documents (1-based, ascending), smallest first."""
    if max_size < 1:
        raise ValueError(f"max_size={max_size!r} is not valid; give at least 1 (documents per citation set).")
    return [s for size in range(1, min(max_size, n_docs) + 1)
            for s in itertools.combinations(range(1, n_docs + 1), size)]


@dataclass(frozen=True)
class RankedCitations:
    """Candidate citation sets by reward, best first (``sets[k]`` with ``rewards[k]``); ties keep the smaller set
    and then the lower numbers."""

    sets: tuple[tuple[int, ...], ...]
    rewards: tuple[float, ...]

    @property
    def best(self) -> tuple[int, ...]:
        return self.sets[0]


def ranked(sets: Sequence[tuple[int, ...]], rewards: Sequence[float]) -> RankedCitations:
    """Citation sets by reward, best first (ties: the smaller set, then the lower numbers)."""
    order = sorted(range(len(sets)), key=lambda k: (-rewards[k], len(sets[k]), sets[k]))
    return RankedCitations(sets=tuple(sets[k] for k in order), rewards=tuple(float(rewards[k]) for k in order))


def best_citation(inputs: DocumentInputs, *, max_size: int = 2, candidates: Sequence[Sequence[int]] | None = None,
                  tokens: Sequence[int] | None = None) -> RankedCitations:
    """Every candidate citation set (default: :func:`candidate_sets` up to ``max_size``) ranked by its SelfCite
    reward over the answer's tokens (or ``tokens``: a statement's)."""
    sets = [tuple(sorted({int(c) for c in s})) for s in (candidates or candidate_sets(inputs.n_docs, max_size))]
    return ranked(sets, citation_rewards(inputs, sets, tokens=tokens))


@dataclass(frozen=True)
class SelfCiteMethod(DocumentMethod):
    """SelfCite's reward of each document cited alone, per answer token: ``doc_scores[t][d] = log p(y_t | d alone)
    - log p(y_t | all but d)`` (nats; averaged over the tokens it is :func:`citation_rewards` of ``[d + 1]``). No
    context scores. Cost: 2n forward passes (n with one document, n without one), from the full prompt's cache; one
    with a single document: against the contextless prompt."""

    name: str = "selfcite"

    def compute(self, inputs: DocumentInputs, meter: PassMeter) -> MethodScores:
        subsets = [s for d in inputs.all_docs for s in _kept_and_removed(inputs, [d + 1])]
        _full, rows = answer_logprobs(inputs, subsets)  # [2 n_docs, n_answer]
        doc = (rows[0::2] - rows[1::2]).T.to(torch.float64)  # [n_answer, n_docs]
        return MethodScores(doc=doc)


register_document_method(SelfCiteMethod())
