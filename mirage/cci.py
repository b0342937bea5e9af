"""Contextual cues imputation (CCI): which context tokens drive each context-sensitive answer token.

For a selected answer token y_i the attributed target is the contrastive log-probability
``log p(y_i | ctx) - log p(y_i^nc | ctx)``, y_i^nc being the contextless model's top token at that step. When
y_i^nc == y_i the reference code (inseq's ``contrast_force_inputs``) scores the alternative under the contextless
input, so the target is ``log p(y_i | ctx) - log p(y_i | no ctx)``; the second term does not depend on the attributed
(with-documents) input, so its gradient is that of ``log p(y_i | ctx)``. We match that.

How the gradients are computed (gradient methods: ``saliency``, ``input_x_gradient``):

- one forward pass over the attributed input, cut after the furthest selected position (a causal model's later
  positions cannot affect earlier targets), with the model's parameters frozen so no weight gradient is computed;
- the gradients of all selected targets from that one graph, by vmapped backward passes
  (``torch.autograd.grad(..., is_grads_batched=True)``) in memory-bounded chunks; each chunk is reduced to
  ``[chunk, seq]`` at once.

The reference runs a forward and a backward pass per selected token. Models whose operations vmap cannot batch fall
back to repeating the input once per target (``[chunk, seq, hidden]`` rows that do not interact, one backward of the
summed targets), which is also how integrated gradients (captum) runs.
Shapes: result scores ``[n_selected, n_context]``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .config import CCIConfig
from .forward import answer_logits, embed, logits_from_embeds, model_inputs
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


@contextmanager
def frozen_parameters(model: torch.nn.Module) -> Iterator[None]:
    """Turn off ``requires_grad`` on every parameter for the block (no weight gradients), then restore it."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def _targets(logits: torch.Tensor, rows: Sequence[int], cols: Sequence[int], target_ids: Sequence[int],
             contrast: Sequence[int | None]) -> torch.Tensor:
    """Per target b: log p(target_b) - log p(contrast_b), read at ``logits[rows[b], cols[b]]``."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    out = []
    for row, col, y, y_nc in zip(rows, cols, target_ids, contrast):
        value = logp[row, col, y]
        if y_nc is not None:
            value = value - logp[row, col, y_nc]
        out.append(value)
    return torch.stack(out)


def _reduce(grad: torch.Tensor, base: torch.Tensor, method: str) -> torch.Tensor:
    """``[chunk, seq]`` L2 norms over the hidden dimension of the gradient (or gradient × input)."""
    if method == "input_x_gradient":
        grad = grad * base
    return grad.float().norm(dim=-1)


class _NoBatchedBackward(RuntimeError):
    """vmap cannot batch one of the model's backward operations."""


@dataclass
class AttributionGraph:
    """One differentiable forward pass over the attributed input, parameters frozen: the input-embedding leaf
    ``[1, seq, hidden]`` and the logits ``[1, n_answer, vocab]`` predicting every answer token.

    When the answer was not just generated, the pipeline builds this once and reads CTI's with-documents logits
    from it, so CCI's backward passes need no forward pass of their own.
    """

    inputs: torch.Tensor
    logits: torch.Tensor

    def answer_logits(self) -> torch.Tensor:
        """Detached fp32 logits ``[n_answer, vocab]`` (what :func:`mirage.forward.answer_logits` returns)."""
        return self.logits[0].detach().float()


def _graph(lm: LoadedModel, embeds: torch.Tensor, answer_ids: Sequence[int],
           positions: Sequence[int]) -> AttributionGraph:
    leaf = embeds.clone().requires_grad_(True)
    return AttributionGraph(inputs=leaf, logits=logits_from_embeds(lm, leaf, answer_ids, positions))


def attribution_graph(lm: LoadedModel, input_ids: Sequence[int], answer_ids: Sequence[int],
                      answer_positions: Sequence[int]) -> AttributionGraph:
    """Run the attributed input once with gradients to the input embeddings only (see :func:`compute_cci`)."""
    with frozen_parameters(lm.model):
        return _graph(lm, embed(lm, input_ids), answer_ids, answer_positions)


def _one_graph(lm: LoadedModel, cfg: CCIConfig) -> bool:
    """Whether CCI takes every gradient from one forward pass (gradient methods, on models vmap can batch)."""
    return cfg.method != "integrated_gradients" and type(lm.model) not in _NO_BATCHED_BACKWARD


def with_documents_logits(lm: LoadedModel, prompt_ids: Sequence[int], answer_ids: Sequence[int], cfg: CCIConfig,
                          *, for_cci: bool = True) -> tuple[torch.Tensor, AttributionGraph | None]:
    """CTI's with-documents logits ``[n_answer, vocab]`` (fp32) and, when CCI will take its gradients from one
    forward pass (and ``for_cci``), the graph of that pass to hand to :func:`compute_cci`; otherwise an inference
    pass and None."""
    if for_cci and _one_graph(lm, cfg):
        input_ids, positions = model_inputs(lm, prompt_ids, answer_ids)
        graph = attribution_graph(lm, input_ids, answer_ids, positions)
        return graph.answer_logits(), graph
    return answer_logits(lm, prompt_ids, answer_ids), None


def _batched_gradients(values: torch.Tensor, inputs: torch.Tensor, method: str, chunk: int) -> torch.Tensor:
    """``[n_targets, seq]``: vmapped backward passes of ``chunk`` targets at a time through one graph."""
    n = values.shape[0]
    base = inputs.detach()[0]
    rows = []
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        picks = torch.zeros(size, n, device=values.device, dtype=values.dtype)
        picks[torch.arange(size), torch.arange(start, start + size)] = 1.0
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*performance drop.*")
                (grad,) = torch.autograd.grad(values, inputs, grad_outputs=picks, is_grads_batched=True,
                                              retain_graph=True)
        except torch.OutOfMemoryError:
            raise
        except RuntimeError as err:  # vmap has no batching rule for an op of this model
            raise _NoBatchedBackward(str(err)) from err
        rows.append(_reduce(grad[:, 0], base, method))
    return torch.cat(rows)


def _repeated_rows(lm: LoadedModel, base: torch.Tensor, answer_ids: Sequence[int], positions: Sequence[int],
                   targets: Sequence[int], contrast: Sequence[int | None], cfg: CCIConfig) -> torch.Tensor:
    """``[chunk, seq]``: the input repeated once per target, one backward of the summed targets (captum)."""
    from captum.attr import InputXGradient, IntegratedGradients, Saliency

    chunk = len(targets)

    def forward(embeds: torch.Tensor) -> torch.Tensor:
        # IG calls this with chunk * steps rows: row r belongs to target r % chunk.
        n = embeds.shape[0]
        logits = logits_from_embeds(lm, embeds, answer_ids, positions)
        rows = list(range(n))
        cols = [r % chunk for r in range(n)]
        return _targets(logits, rows, cols, [targets[r % chunk] for r in range(n)],
                        [contrast[r % chunk] for r in range(n)])

    inputs = base.expand(chunk, -1, -1).clone().requires_grad_(True)
    if cfg.method == "saliency":
        attr = Saliency(forward).attribute(inputs, abs=True)
    elif cfg.method == "input_x_gradient":
        attr = InputXGradient(forward).attribute(inputs)
    else:
        attr = IntegratedGradients(forward).attribute(inputs, n_steps=cfg.ig_steps, internal_batch_size=chunk)
    return attr.detach().float().norm(dim=-1)


_NO_BATCHED_BACKWARD: set[type] = set()


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
    graph: AttributionGraph | None = None,
) -> CCIScores:
    """Saliency of each context token for each selected answer token, batched in memory-bounded chunks.

    ``input_ids`` is the attributed input (see :func:`mirage.forward.model_inputs`) and ``answer_positions[i]`` the
    position whose logits predict answer token i. ``graph``: the forward pass of :func:`attribution_graph` over the
    same input, when the caller already ran it (otherwise one is run, cut after the furthest selected position).
    """
    contrast_ids = [None if contextless_top[i] == answer_ids[i] else int(contextless_top[i]) for i in selected]
    if not selected:
        return CCIScores(selected=(), contrast_ids=(), scores=())
    base = embed(lm, input_ids)
    ctx_index = torch.tensor(list(context_positions), device=lm.device, dtype=torch.long)
    order = sorted(range(len(selected)), key=lambda k: selected[k])
    results: dict[int, list[float]] = {}
    with frozen_parameters(lm.model):
        shared = _one_graph(lm, cfg)
        if shared:
            idx = [selected[k] for k in order]
            contrast = [contrast_ids[k] for k in order]
            targets = [answer_ids[i] for i in idx]
            if graph is None:
                graph = _graph(lm, *_slice(lm, base, answer_ids, answer_positions, idx))
                cols = list(range(len(idx)))  # logits of the selected positions only
            else:
                cols = idx
            values = _targets(graph.logits, [0] * len(idx), cols, targets, contrast)
            chunk = cfg.batch_size or auto_batch_size(lm, graph.inputs.shape[1], len(order))
            try:
                attr = _batched_gradients(values, graph.inputs, cfg.method, chunk)
            except _NoBatchedBackward:
                _NO_BATCHED_BACKWARD.add(type(lm.model))
                shared = False
            else:
                picked = attr.index_select(1, ctx_index)
                for row, k in enumerate(order):
                    results[k] = picked[row].tolist()
        start = 0
        while not shared and start < len(order):
            size = cfg.batch_size or auto_batch_size(lm, len(input_ids), len(order) - start)
            ks = order[start : start + size]
            idx = [selected[k] for k in ks]
            attr = _repeated_rows(lm, *_slice(lm, base, answer_ids, answer_positions, idx),
                                  [answer_ids[i] for i in idx], [contrast_ids[k] for k in ks], cfg)
            picked = attr.index_select(1, ctx_index)
            for row, k in enumerate(ks):
                results[k] = picked[row].tolist()
            start += size
    return CCIScores(
        selected=tuple(selected),
        contrast_ids=tuple(contrast_ids),
        scores=tuple(tuple(results[k]) for k in range(len(selected))),
    )


def _slice(lm: LoadedModel, base: torch.Tensor, answer_ids: Sequence[int], answer_positions: Sequence[int],
           idx: Sequence[int]) -> tuple[torch.Tensor, list[int], list[int]]:
    """The input, answer ids and logit positions needed for targets ``idx`` (ascending answer indices)."""
    if lm.is_encoder_decoder:
        # Keep the decoder up to the furthest target; the encoder input stays whole.
        return base, list(answer_ids[: max(idx) + 1]), list(idx)
    end = answer_positions[max(idx)] + 1  # causal: later positions cannot affect these targets
    return base[:, :end], list(answer_ids), [answer_positions[i] for i in idx]


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
