"""Context-sensitive token identification (CTI): how much each answer token's prediction depends on the documents.

All scores come from two teacher-forced passes (with and without documents) over the whole answer.
Shapes: ``logits_ctx``, ``logits_noctx``: ``[n_answer, vocab]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .config import CTIConfig


@dataclass(frozen=True)
class CTIScores:
    """Per answer token: its score, whether it is context-sensitive, and the contextless model's top token."""

    scores: tuple[float, ...]
    selected: tuple[int, ...]
    threshold: float
    contextless_top: tuple[int, ...]
    probs: tuple[float, ...] = ()  # each answer token's probability with the documents in the prompt


def _kl(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """KL(P || Q) per row, with 0·log 0 = 0 and no inf/NaN."""
    p = logp.exp()
    diff = torch.where(p > 0, logp - logq.clamp_min(torch.finfo(logq.dtype).min / 2), torch.zeros_like(logp))
    return (p * diff).sum(-1).clamp_min(0.0)


def contrast_scores(
    logits_ctx: torch.Tensor, logits_noctx: torch.Tensor, answer_ids: Sequence[int], metric: str
) -> torch.Tensor:
    """Score ``[n_answer]`` of each answer token under ``metric`` (see :class:`CTIConfig`), in fp32."""
    logp_c = torch.log_softmax(logits_ctx.float(), dim=-1)
    logp_n = torch.log_softmax(logits_noctx.float(), dim=-1)
    if metric == "kl_noctx_ctx":
        out = _kl(logp_n, logp_c)
    elif metric == "kl_ctx_noctx":
        out = _kl(logp_c, logp_n)
    elif metric == "js":
        logm = torch.logaddexp(logp_c, logp_n) - torch.log(torch.tensor(2.0))
        out = 0.5 * _kl(logp_c, logm) + 0.5 * _kl(logp_n, logm)
    elif metric == "prob_diff":
        idx = torch.tensor(list(answer_ids), device=logits_ctx.device).unsqueeze(-1)
        out = (logp_c.gather(-1, idx).exp() - logp_n.gather(-1, idx).exp()).squeeze(-1)
    else:
        raise ValueError(f"unknown CTI metric {metric!r}")
    return torch.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)


def select_tokens(scores: Sequence[float], cfg: CTIConfig) -> tuple[tuple[int, ...], float]:
    """Indices of context-sensitive tokens (ascending) and the threshold used.

    ``std``: |score| >= mean + k·std (sample std; a one-token answer is compared with its own score, as the
    reference does); ``threshold``: |score| >= the calibrated threshold.
    """
    values = torch.tensor(list(scores), dtype=torch.float64)
    if len(values) == 0:
        return (), float("nan")
    if cfg.selector == "threshold":
        threshold = float(cfg.threshold)
    elif len(values) == 1 or cfg.std_k == 0:
        threshold = float(values.mean())
    else:
        threshold = float(values.mean() + cfg.std_k * values.std())
    # A small tolerance keeps ties (e.g. a one-token answer) selected despite float rounding.
    keep = [i for i, v in enumerate(values.tolist()) if abs(v) >= threshold - 1e-9 * max(1.0, abs(threshold))]
    return tuple(keep), threshold


def compute_cti(
    logits_ctx: torch.Tensor, logits_noctx: torch.Tensor, answer_ids: Sequence[int], *, cfg: CTIConfig
) -> CTIScores:
    """CTI from the two passes' logits: scores, selection and the contextless top token at each step."""
    scores = contrast_scores(logits_ctx, logits_noctx, answer_ids, cfg.metric)
    selected, threshold = select_tokens(scores.tolist(), cfg)
    return CTIScores(
        scores=tuple(scores.tolist()),
        selected=selected,
        threshold=threshold,
        contextless_top=tuple(int(i) for i in logits_noctx.argmax(-1).tolist()),
        probs=tuple(token_probabilities(logits_ctx, answer_ids)),
    )


def token_probabilities(logits: torch.Tensor, ids: Sequence[int]) -> list[float]:
    """Probability of each token ``ids[i]`` under ``softmax(logits[i])`` (fp32); logits ``[n_tokens, vocab]``."""
    if not len(ids):
        return []
    probs = torch.softmax(logits[: len(ids)].float(), dim=-1)
    return probs.gather(1, torch.tensor(list(ids), device=probs.device).unsqueeze(1)).squeeze(1).tolist()
