"""Contextual cues imputation (CCI): which context tokens drive each context-sensitive answer token.

For a selected answer token y_i the attributed target is the contrastive log-probability
``log p(y_i | ctx) - log p(y_i^nc | ctx)``, y_i^nc being the contextless model's top token at that step. When
y_i^nc == y_i the reference code (inseq's ``contrast_force_inputs``) scores the alternative under the contextless
input, so the target is ``log p(y_i | ctx) - log p(y_i | no ctx)``; the second term does not depend on the attributed
(with-documents) input, so its gradient is that of ``log p(y_i | ctx)``. We match that.

Gradients of many targets are computed per backward pass: the input embeddings are repeated once per selected token
(``[chunk, seq, hidden]``), each row's target sits at its own position, and rows do not interact, so one backward of
the summed targets gives every row's own gradient. Chunks bound memory.
Shapes: result scores ``[n_selected, n_context]``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .config import CCIConfig
from .forward import embed, logits_from_embeds
from .models import LoadedModel


@dataclass(frozen=True)
class CCIScores:
    """Saliency of every context token for every selected answer token (``scores[k][j]``: selected k, context j)."""

    selected: tuple[int, ...]
    contrast_ids: tuple[int | None, ...]
    scores: tuple[tuple[float, ...], ...]


def _free_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 4 * 2**30


def auto_batch_size(lm: LoadedModel, seq_len: int, n_targets: int) -> int:
    """Targets per backward pass that fit in about half the free memory (estimate of activations per row)."""
    cfg = lm.model.config
    text_cfg = getattr(cfg, "text_config", None) or cfg
    hidden = getattr(text_cfg, "hidden_size", None) or getattr(text_cfg, "d_model", 1024)
    layers = getattr(text_cfg, "num_hidden_layers", None) or getattr(text_cfg, "num_layers", 24)
    heads = getattr(text_cfg, "num_attention_heads", None) or getattr(text_cfg, "num_heads", 16)
    width = torch.finfo(lm.dtype).bits // 8
    per_row = layers * seq_len * (24 * hidden * width + heads * seq_len * 4)
    budget = _free_memory_bytes(lm.device) // 2
    return max(1, min(n_targets, 64, budget // max(1, per_row)))


def _targets(logits: torch.Tensor, rows: Sequence[int], target_ids: Sequence[int], contrast: Sequence[int | None]):
    """Per row b: log p(target_b) - log p(contrast_b) at the row's own position column ``rows[b]``."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    out = []
    for b, (col, y, y_nc) in enumerate(zip(rows, target_ids, contrast)):
        value = logp[b, col, y]
        if y_nc is not None:
            value = value - logp[b, col, y_nc]
        out.append(value)
    return torch.stack(out)


def _attribute_chunk(
    lm: LoadedModel,
    base: torch.Tensor,
    answer_ids: Sequence[int],
    positions: Sequence[int],
    targets: Sequence[int],
    contrast: Sequence[int | None],
    cfg: CCIConfig,
) -> torch.Tensor:
    """Attribution ``[chunk, seq]`` (L2 norm over the hidden dimension) of each row's target."""
    from captum.attr import InputXGradient, IntegratedGradients, Saliency

    chunk = len(targets)
    cols = list(range(chunk))

    def forward(embeds: torch.Tensor) -> torch.Tensor:
        # IG calls this with chunk * steps rows: row r belongs to target r % chunk.
        n = embeds.shape[0]
        logits = logits_from_embeds(lm, embeds, answer_ids, positions)
        rows = [cols[r % chunk] for r in range(n)]
        return _targets(logits, rows, [targets[r % chunk] for r in range(n)], [contrast[r % chunk] for r in range(n)])

    inputs = base.expand(chunk, -1, -1).clone().requires_grad_(True)
    if cfg.method == "saliency":
        attr = Saliency(forward).attribute(inputs, abs=True)
    elif cfg.method == "input_x_gradient":
        attr = InputXGradient(forward).attribute(inputs)
    else:
        attr = IntegratedGradients(forward).attribute(inputs, n_steps=cfg.ig_steps, internal_batch_size=chunk)
    return attr.detach().float().norm(dim=-1)


def compute_cci(
    lm: LoadedModel,
    input_ids: Sequence[int],
    answer_ids: Sequence[int],
    answer_positions: Sequence[int],
    selected: Sequence[int],
    contextless_top: Sequence[int],
    context_positions: Sequence[int],
    *,
    cfg: CCIConfig,
) -> CCIScores:
    """Saliency of each context token for each selected answer token, batched in memory-bounded chunks.

    ``input_ids`` is the attributed input (see :func:`mirage.forward.model_inputs`) and ``answer_positions[i]`` the
    position whose logits predict answer token i.
    """
    contrast_ids = [None if contextless_top[i] == answer_ids[i] else int(contextless_top[i]) for i in selected]
    if not selected:
        return CCIScores(selected=(), contrast_ids=(), scores=())
    base = embed(lm, input_ids)
    ctx_index = torch.tensor(list(context_positions), device=lm.device, dtype=torch.long)
    order = sorted(range(len(selected)), key=lambda k: selected[k])
    results: dict[int, list[float]] = {}
    start = 0
    while start < len(order):
        size = cfg.batch_size or auto_batch_size(lm, len(input_ids), len(order) - start)
        ks = order[start : start + size]
        idx = [selected[k] for k in ks]
        if lm.is_encoder_decoder:
            # Keep the decoder up to the furthest target; the encoder input stays whole.
            chunk_answer = list(answer_ids[: max(idx) + 1])
            positions, inputs = idx, base
        else:
            end = answer_positions[max(idx)] + 1  # causal: later positions cannot affect these targets
            chunk_answer = list(answer_ids)
            positions, inputs = [answer_positions[i] for i in idx], base[:, :end]
        attr = _attribute_chunk(
            lm, inputs, chunk_answer, positions, [answer_ids[i] for i in idx], [contrast_ids[k] for k in ks], cfg
        )
        picked = attr.index_select(1, ctx_index)
        for row, k in enumerate(ks):
            results[k] = picked[row].tolist()
        start += size
    return CCIScores(
        selected=tuple(selected),
        contrast_ids=tuple(contrast_ids),
        scores=tuple(tuple(results[k]) for k in range(len(selected))),
    )


def select_context(scores: Sequence[float], cfg: CCIConfig) -> list[int]:
    """Indices of the context tokens kept for one answer token (top-k, or top-% by ``cfg.percent_rule``)."""
    values = torch.tensor(list(scores), dtype=torch.float64)
    n = len(values)
    if n == 0:
        return []
    if cfg.top_k is not None:
        k = min(cfg.top_k, n)
        return sorted(torch.topk(values, k).indices.tolist())
    p = cfg.top_percent / 100.0
    if cfg.percent_rule == "range":
        vmax, vmin = float(values.max()), float(values.min())
        cut = vmax - p * (vmax - vmin)
    else:
        cut = float(torch.quantile(values, 1.0 - p))
    return [j for j, v in enumerate(values.tolist()) if v >= cut]
