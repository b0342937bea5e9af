"""Context-sensitive token identification (CTI): how much each answer token's prediction depends on the documents.

All scores come from two teacher-forced passes (with and without documents) over the whole answer
(:mod:`mirage.attribution.forward`). A metric is a function registered by name in :data:`CTI_METRICS`
(:func:`register_cti_metric`); ``cti.metric`` names one. A selector, which keeps the context-sensitive tokens of an
answer from its scores, is registered in :data:`CTI_SELECTORS` (:func:`register_cti_selector`); ``cti.selector``
names one.
Shapes: ``logits_ctx``, ``logits_noctx``: ``[n_answer, vocab]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from mirage.attribution.forward import token_probabilities
from mirage.registry import CTI_METRICS, CTI_SELECTORS

if TYPE_CHECKING:
    from mirage.config import CTIConfig

__all__ = ["CTI_SELECTORS", "CTIMetricFn", "CTIScores", "CTISelectorFn", "compute_cti", "contrast_scores", "js",
           "register_cti_metric", "register_cti_selector", "select_tokens"]

#: ``metric(logp_ctx, logp_noctx, answer_ids) -> scores``: fp32 log-probabilities ``[n_answer, vocab]`` with and
#: without the documents, the answer ids ``[n_answer]`` (long), one score per answer token ``[n_answer]``.
CTIMetricFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
#: ``selector(scores, cfg) -> (selected, threshold)``: one answer's CTI scores ``[n_answer]`` (float64, never empty)
#: and the CTI config; the indices of the context-sensitive tokens (ascending) and the threshold they passed (NaN
#: where a selector has none).
CTISelectorFn = Callable[[torch.Tensor, "CTIConfig"], tuple[Sequence[int], float]]


@dataclass(frozen=True)
class CTIScores:
    """Per answer token: its score, whether it is context-sensitive, and the contextless model's top token."""

    scores: tuple[float, ...]
    selected: tuple[int, ...]
    threshold: float
    contextless_top: tuple[int, ...]
    probs: tuple[float, ...] = ()  # each answer token's probability with the documents in the prompt
    logprobs: tuple[float, ...] = ()  # its log-probability with the documents (log_softmax)
    contextless_logprobs: tuple[float, ...] = ()  # and without them


def _kl(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """KL(P || Q) per row, with 0·log 0 = 0 and no inf/NaN."""
    p = logp.exp()
    diff = torch.where(p > 0, logp - logq.clamp_min(torch.finfo(logq.dtype).min / 2), torch.zeros_like(logp))
    return (p * diff).sum(-1).clamp_min(0.0)


def kl_noctx_ctx(logp_ctx: torch.Tensor, logp_noctx: torch.Tensor, answer_ids: torch.Tensor) -> torch.Tensor:
    """KL(P_no-ctx || P_ctx): the authors' released code (inseq's ``kl_divergence``, contextless input original)."""
    return _kl(logp_noctx, logp_ctx)


def kl_ctx_noctx(logp_ctx: torch.Tensor, logp_noctx: torch.Tensor, answer_ids: torch.Tensor) -> torch.Tensor:
    """KL(P_ctx || P_no-ctx): the direction written in the paper."""
    return _kl(logp_ctx, logp_noctx)


def js(logp_ctx: torch.Tensor, logp_noctx: torch.Tensor, answer_ids: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence of the two distributions."""
    logm = torch.logaddexp(logp_ctx, logp_noctx) - torch.log(torch.tensor(2.0))
    return 0.5 * _kl(logp_ctx, logm) + 0.5 * _kl(logp_noctx, logm)


def prob_diff(logp_ctx: torch.Tensor, logp_noctx: torch.Tensor, answer_ids: torch.Tensor) -> torch.Tensor:
    """p_ctx(y) - p_no-ctx(y) of the answer token y."""
    idx = answer_ids.unsqueeze(-1)
    return (logp_ctx.gather(-1, idx).exp() - logp_noctx.gather(-1, idx).exp()).squeeze(-1)


# The built-in CTI metrics, in the registry (:data:`mirage.registry.CTI_METRICS`; see :data:`CTIMetricFn`).
CTI_METRICS.register("kl_noctx_ctx", kl_noctx_ctx)
CTI_METRICS.register("kl_ctx_noctx", kl_ctx_noctx)
CTI_METRICS.register("js", js)
CTI_METRICS.register("prob_diff", prob_diff)


def register_cti_metric(name: str, fn: CTIMetricFn, *, overwrite: bool = False) -> None:
    """Make ``fn`` selectable as ``cti.metric=name`` (an existing name is replaced only with ``overwrite``)."""
    CTI_METRICS.register(name, fn, overwrite=overwrite)


def contrast_scores(
    logits_ctx: torch.Tensor, logits_noctx: torch.Tensor, answer_ids: Sequence[int], metric: str
) -> torch.Tensor:
    """Score ``[n_answer]`` of each answer token under the registered ``metric``, in fp32, inf/NaN set to 0."""
    return _contrast(*_log_probs(logits_ctx, logits_noctx, answer_ids), metric)


def _log_probs(logits_ctx: torch.Tensor, logits_noctx: torch.Tensor, answer_ids: Sequence[int]
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Both passes' log-distributions ``[n_answer, vocab]`` in fp32 and the answer ids as a tensor."""
    logp_c = torch.log_softmax(logits_ctx.float(), dim=-1)
    logp_n = torch.log_softmax(logits_noctx.float(), dim=-1)
    return logp_c, logp_n, torch.tensor(list(answer_ids), device=logits_ctx.device, dtype=torch.long)


def _contrast(logp_c: torch.Tensor, logp_n: torch.Tensor, ids: torch.Tensor, metric: str) -> torch.Tensor:
    fn = CTI_METRICS.lookup(metric)
    return torch.nan_to_num(fn(logp_c, logp_n, ids), nan=0.0, posinf=0.0, neginf=0.0)


def _at_least(values: torch.Tensor, threshold: float) -> tuple[int, ...]:
    """Indices of |values| >= ``threshold``; a small tolerance keeps ties (e.g. a one-token answer) selected despite
    float rounding."""
    return tuple(i for i, v in enumerate(values.tolist()) if abs(v) >= threshold - 1e-9 * max(1.0, abs(threshold)))


def _floored(values: torch.Tensor, threshold: float, cfg: CTIConfig) -> float:
    """``threshold``, raised to the answer's mean score under ``cfg.threshold_floor="mean"`` (the authors' scripts)."""
    return max(threshold, float(values.mean())) if cfg.threshold_floor == "mean" else threshold


def select_std(values: torch.Tensor, cfg: CTIConfig) -> tuple[tuple[int, ...], float]:
    """``std``: |score| >= mean + k·std (``cfg.std_kind``: the sample std, n - 1, as inseq; or the population std,
    n, as the authors' scripts' ``np.std``, under which the larger token of a two-token answer sits exactly on the
    threshold and is kept; a one-token answer is compared with its own score, as the reference does)."""
    if len(values) == 1 or cfg.std_k == 0:
        threshold = float(values.mean())
    else:
        threshold = float(values.mean() + cfg.std_k * values.std(correction=0 if cfg.std_kind == "population" else 1))
    threshold = _floored(values, threshold, cfg)
    return _at_least(values, threshold), threshold


def select_threshold(values: torch.Tensor, cfg: CTIConfig) -> tuple[tuple[int, ...], float]:
    """``threshold``: |score| >= the calibrated ``cfg.threshold``."""
    if cfg.threshold is None:
        raise ValueError("the threshold selector needs cti.threshold (a calibrated value).")
    threshold = _floored(values, float(cfg.threshold), cfg)
    return _at_least(values, threshold), threshold


# The built-in CTI selectors (:data:`mirage.registry.CTI_SELECTORS`; see :data:`CTISelectorFn`).
CTI_SELECTORS.register("std", select_std)
CTI_SELECTORS.register("threshold", select_threshold)


def register_cti_selector(name: str, fn: CTISelectorFn, *, overwrite: bool = False) -> None:
    """Make ``fn`` selectable as ``cti.selector=name`` (an existing name is replaced only with ``overwrite``)."""
    CTI_SELECTORS.register(name, fn, overwrite=overwrite)


def select_tokens(scores: Sequence[float], cfg: CTIConfig) -> tuple[tuple[int, ...], float]:
    """Indices of context-sensitive tokens (ascending) and the threshold used, by the selector ``cfg.selector``
    names (:data:`CTI_SELECTORS`: :func:`select_std`, :func:`select_threshold`, or a registered one). An empty
    answer selects nothing, at a NaN threshold."""
    values = torch.tensor(list(scores), dtype=torch.float64)
    if len(values) == 0:
        return (), float("nan")
    selected, threshold = CTI_SELECTORS.lookup(str(cfg.selector))(values, cfg)  # CTIConfig always sets it
    return tuple(sorted({int(i) for i in selected})), float(threshold)


def compute_cti(
    logits_ctx: torch.Tensor, logits_noctx: torch.Tensor, answer_ids: Sequence[int], *, cfg: CTIConfig
) -> CTIScores:
    """CTI from the two passes' logits: scores, selection and the contextless top token at each step."""
    logp_c, logp_n, ids = _log_probs(logits_ctx, logits_noctx, answer_ids)  # once, for the scores and log-probs
    scores = _contrast(logp_c, logp_n, ids, cfg.metric)
    selected, threshold = select_tokens(scores.tolist(), cfg)
    return CTIScores(
        scores=tuple(scores.tolist()),
        selected=selected,
        threshold=threshold,
        contextless_top=tuple(int(i) for i in logits_noctx.argmax(-1).tolist()),
        probs=tuple(token_probabilities(logits_ctx, answer_ids)),
        logprobs=tuple(logp_c.gather(1, ids.unsqueeze(1)).squeeze(1).tolist()),
        contextless_logprobs=tuple(logp_n.gather(1, ids.unsqueeze(1)).squeeze(1).tolist()),
    )

