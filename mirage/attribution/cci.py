"""Contextual cues imputation (CCI): which context tokens drive each context-sensitive answer token.

For a selected answer token y_i the attributed target is the contrastive log-probability
``log p(y_i | ctx) - log p(y_i^nc | ctx)``, y_i^nc being the contextless model's top token at that step
(``cci.target: prob``: the probabilities ``p(y_i | ctx) - p(y_i^nc | ctx)``, the paper's Eq. 2). When
y_i^nc == y_i the reference code (inseq's ``contrast_force_inputs``) scores the alternative under the contextless
input, so the target is ``log p(y_i | ctx) - log p(y_i | no ctx)``; the second term does not depend on the attributed
(with-documents) input, so its gradient is that of ``log p(y_i | ctx)``. We match that.

A method is registered by name in :data:`CCI_METHODS` (:func:`register_cci_method`); ``cci.method`` names one. Each
gives an attribution ``[.., seq, hidden]`` per target, and a context token's score is its L2 norm over ``hidden``.
How the gradients are computed for gradient methods (``saliency``, ``input_x_gradient``: a ``from_gradient``):

- one forward pass over the attributed input, cut after the furthest selected position (a causal model's later
  positions cannot affect earlier targets), with the model's parameters frozen so no weight gradient is computed
  (or the caller's :class:`~mirage.attribution.graphs.AttributionGraph`, whose logits CTI already read);
- the gradients of all selected targets from that one graph, by vmapped backward passes
  (``torch.autograd.grad(..., is_grads_batched=True)``) in memory-bounded chunks; each chunk is reduced to
  ``[chunk, seq]`` at once;
- for several items at once (:func:`compute_cci_batch`), one left-padded pass over all of them
  (:class:`~mirage.attribution.graphs.BatchGraph`): rows of a padded batch do not interact, so the k-th target of every
  item shares one vmapped backward pass (as many passes as the largest item has targets).

The reference runs a forward and a backward pass per selected token. Models whose operations vmap cannot batch
(remembered on the model: ``LoadedModel.batched_backward``) fall back to repeating the input once per target
(``[chunk, seq, hidden]`` rows that do not interact, one backward of the summed targets), which is also how methods
without ``from_gradient`` (integrated gradients, captum) run.
``cci.precision`` other than ``model`` runs these passes under ``torch.autocast`` to bfloat16/float16 (the scores
are reduced in float32); the pass is then CCI's own, never CTI's (:func:`shares_cti_graph`).
Shapes: result scores ``[n_selected, n_context]``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.utils.checkpoint

from mirage.attribution.forward import embed, frozen_parameters, logits_from_embeds
from mirage.attribution.graphs import AttributionGraph, BatchGraph, graph_from_embeds
from mirage.attribution.models import LoadedModel, cpu_flags
from mirage.attribution.planner import (
    backward_row_bytes,
    budget_room,
    default_budget_room,
    free_memory,
    graph_bytes,
    graph_fits,
    out_of_memory_error,
)
from mirage.registry import CCI_METHODS

if TYPE_CHECKING:
    from mirage.config import CCIConfig

__all__ = ["CONTEXT_DOCUMENT_METHODS", "CCIMethodSpec", "CCIRequest", "CCIScores", "auto_batch_size", "autocast_dtype",
           "compute_cci", "compute_cci_batch", "document_method", "register_cci_method", "select_context",
           "shares_cti_graph"]

#: ``forward(embeds) -> values``: each row's target value ``[n]`` from input embeddings ``[n, seq, hidden]``.
TargetForward = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class CCIMethodSpec:
    """One CCI method.

    ``attribute(forward, inputs, cfg)``: the attribution ``[n, seq, hidden]`` of each row's target on ``inputs``
    ``[n, seq, hidden]`` (the input repeated once per target; captum style), or None for a method backed by a
    document method (``document_method``). ``from_gradient(grad, inputs)``, for
    gradient methods only: the attribution ``[n, seq, hidden]`` from the targets' input gradients ``[n, seq, hidden]``
    and the input ``[seq, hidden]``, so all targets' gradients can come from one shared forward pass.
    """

    attribute: Callable[[TargetForward, torch.Tensor, CCIConfig], torch.Tensor] | None
    from_gradient: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    #: A registered document method (:data:`mirage.registry.DOCUMENT_METHODS`) whose per-context-token scores are
    #: the CCI rows (``attribute`` None): run on the prepared item by :meth:`mirage.Mirage.score_tokens`
    #: (:func:`mirage.attribution.methods.as_cci.context_cci`), never by :func:`compute_cci`.
    document_method: str | None = None


def _saliency(forward: TargetForward, inputs: torch.Tensor, cfg: CCIConfig) -> torch.Tensor:
    from captum.attr import Saliency

    return Saliency(forward).attribute(inputs, abs=True)


def _input_x_gradient(forward: TargetForward, inputs: torch.Tensor, cfg: CCIConfig) -> torch.Tensor:
    from captum.attr import InputXGradient

    return InputXGradient(forward).attribute(inputs)


def _integrated_gradients(forward: TargetForward, inputs: torch.Tensor, cfg: CCIConfig) -> torch.Tensor:
    from captum.attr import IntegratedGradients

    # captum calls ``forward`` with n * steps rows, n at a time: row r belongs to target r % n.
    return IntegratedGradients(forward).attribute(inputs, n_steps=cfg.ig_steps, internal_batch_size=inputs.shape[0])


def _gradient(grad: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    return grad


def _gradient_x_input(grad: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    return grad * inputs


# The built-in CCI methods (:data:`mirage.registry.CCI_METHODS`; see :class:`CCIMethodSpec`).
CCI_METHODS.register("saliency", CCIMethodSpec(_saliency, from_gradient=_gradient))
CCI_METHODS.register("input_x_gradient", CCIMethodSpec(_input_x_gradient, from_gradient=_gradient_x_input))
CCI_METHODS.register("integrated_gradients", CCIMethodSpec(_integrated_gradients))
#: The document methods that score every context token (:mod:`mirage.attribution.methods`), each also a CCI method of
#: the same name: their rows of the selected tokens are the CCI scores (attention, rollout, AttnLRP).
CONTEXT_DOCUMENT_METHODS = ("attention_last", "attention_all", "rollout", "attnlrp")
for _name in CONTEXT_DOCUMENT_METHODS:
    CCI_METHODS.register(_name, CCIMethodSpec(None, document_method=_name))


def document_method(cfg: CCIConfig) -> str | None:
    """The document method ``cfg.method`` takes its CCI rows from (:attr:`CCIMethodSpec.document_method`), or None
    for a method of this module's own passes."""
    return CCI_METHODS.lookup(cfg.method).document_method


def register_cci_method(
    name: str,
    attribute: Callable[[TargetForward, torch.Tensor, CCIConfig], torch.Tensor] | None = None,
    *,
    from_gradient: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    document_method: str | None = None,
    overwrite: bool = False,
) -> None:
    """Make a method selectable as ``cci.method=name`` (see :class:`CCIMethodSpec`; an existing name is replaced
    only with ``overwrite``): ``attribute`` (and ``from_gradient``), or ``document_method``, a registered document
    method that scores every context token."""
    if (attribute is None) == (document_method is None):
        raise ValueError(f"register_cci_method({name!r}): give attribute or document_method, exactly one.")
    CCI_METHODS.register(name, CCIMethodSpec(attribute, from_gradient=from_gradient, document_method=document_method),
                         overwrite=overwrite)


@dataclass(frozen=True)
class CCIScores:
    """Saliency of every context token for every selected answer token (``scores[k][j]``: selected k, context j)."""

    selected: tuple[int, ...]
    contrast_ids: tuple[int | None, ...]
    scores: tuple[tuple[float, ...], ...]


def auto_batch_size(lm: LoadedModel, seq_len: int, n_targets: int, rows: int = 1, *, checkpointed: bool = False,
                    whole_graph: bool = False) -> int:
    """Targets per backward pass (at most 64, at least one): as many as fit beside what the process holds now (the
    graph included), within the memory budget (``lm.memory_budget``) or else half the free memory (on a CPU, and
    within the default budget, :func:`~mirage.attribution.planner.default_memory_budget`). Each target
    costs the gradients flowing through one block (:func:`~mirage.attribution.planner.backward_row_bytes`), or with
    ``whole_graph`` (the input repeated per target) a whole differentiable pass besides; ``rows``: the sequences of
    ``seq_len`` positions in the graph; ``checkpointed``: whether the graph's layers were checkpointed (the graph's
    own ``checkpointed``, as :func:`~mirage.attribution.planner.plan_graph` chose). On a CPU one input's graph that
    is not checkpointed takes one target per pass: there a wider vmapped pass takes about the time of the narrow
    ones it replaces (``benchmarks/cci_batch_width.py``) and holds each more target's gradients
    (``benchmarks/memory_estimates.py``), whereas under checkpointing each pass recomputes the blocks, so fewer
    passes save time. A batched graph of several inputs (``rows`` > 1: short prompts scored together) keeps its
    wide passes."""
    if lm.device.type == "cpu" and rows == 1 and not checkpointed:
        return 1
    if lm.memory_budget is not None:
        room = budget_room(lm)
    else:
        room, default = free_memory(lm.device) // 2, default_budget_room(lm)
        if default is not None:  # a CPU
            room = min(room, default)
    per = backward_row_bytes(lm, seq_len, rows)
    if whole_graph:
        per += graph_bytes(lm, seq_len, checkpoint=False, rows=rows)
    return max(1, min(n_targets, 64, room // max(1, per)))


def autocast_dtype(lm: LoadedModel, cfg: CCIConfig) -> torch.dtype | None:
    """The dtype CCI's passes are autocast to (``cfg.precision``), or None where they run in the model's own."""
    if cfg.precision == "model":
        return None
    dtype = getattr(torch, cfg.precision)
    return None if dtype == lm.dtype else dtype


def _native_16bit(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``device`` computes in ``dtype`` natively (a CPU without AMX/AVX512 bf16 or fp16 emulates it, slower
    than float32)."""
    flags = cpu_flags() if device.type == "cpu" else None
    if not flags:
        return True  # a GPU, or no way to tell: no warning
    wanted = ("amx_bf16", "avx512_bf16") if dtype == torch.bfloat16 else ("amx_fp16", "avx512_fp16")
    return any(flag in flags for flag in wanted)


@contextmanager
def _precision(lm: LoadedModel, cfg: CCIConfig) -> Iterator[None]:
    """Autocast for the block when ``cfg.precision`` asks for it (a warning, once, where the CPU emulates it)."""
    dtype = autocast_dtype(lm, cfg)
    if dtype is None:
        yield
        return
    if not _native_16bit(lm.device, dtype):
        warnings.warn(f"cci.precision={cfg.precision}: this CPU has no native {cfg.precision} arithmetic, so CCI "
                      "runs emulated and slower than in float32; leave cci.precision at 'model' here.", stacklevel=3)
    with torch.autocast(device_type=lm.device.type, dtype=dtype):
        yield


def shares_graph(lm: LoadedModel, cfg: CCIConfig) -> bool:
    """Whether CCI takes every gradient from one forward pass: a gradient method (``from_gradient``) on a model
    whose backward passes vmap can batch (not known to fail). With an autocast ``cfg.precision`` that pass is CCI's
    own (CTI's with-documents logits stay in the model's dtype), so it is never shared with CTI; see
    :func:`shares_cti_graph`."""
    return CCI_METHODS.lookup(cfg.method).from_gradient is not None and lm.batched_backward is not False


def shares_cti_graph(lm: LoadedModel, cfg: CCIConfig) -> bool:
    """Whether CTI's with-documents pass can be the differentiable one CCI takes its gradients from."""
    return shares_graph(lm, cfg) and autocast_dtype(lm, cfg) is None


@dataclass(frozen=True)
class _Targets:
    """The selected answer tokens in answer order, with what their targets need.

    ``base``: the attributed input's embeddings ``[1, seq, hidden]``; ``positions[i]``: the position whose logits
    predict answer token i; ``idx``: the selected answer indices, ascending; ``contrast``: their contrast tokens;
    ``context``: the context positions whose scores are kept.
    """

    base: torch.Tensor
    answer_ids: Sequence[int]
    positions: Sequence[int]
    idx: list[int]
    contrast: list[int | None]
    context: torch.Tensor


def _target_values(logits: torch.Tensor, rows: Sequence[int], cols: Sequence[int], target_ids: Sequence[int],
                   contrast: Sequence[int | None], target: str = "logprob") -> torch.Tensor:
    """Per target b: log p(target_b) - log p(contrast_b) (``target="prob"``: p(target_b) - p(contrast_b), the paper's
    Eq. 2), read at ``logits[rows[b], cols[b]]`` (the softmax is taken over those steps only, not every position of
    ``logits``)."""
    logp = torch.log_softmax(logits[list(rows), list(cols)].float(), dim=-1)  # [n_targets, vocab]
    if target == "prob":
        logp = logp.exp()
    out = []
    for b, (y, y_nc) in enumerate(zip(target_ids, contrast)):
        value = logp[b, y]
        if y_nc is not None:
            value = value - logp[b, y_nc]
        out.append(value)
    return torch.stack(out)


def _contrast_ids(answer_ids: Sequence[int], selected: Sequence[int], contextless_top: Sequence[int]
                  ) -> list[int | None]:
    """Per selected answer token, the contextless model's top token, or None where it is the answer token itself
    (the target is then log p(y_i | ctx) alone; see the module docstring)."""
    return [None if contextless_top[i] == answer_ids[i] else int(contextless_top[i]) for i in selected]


class _NoBatchedBackward(RuntimeError):
    """vmap cannot batch one of the model's backward operations."""


def _batched_gradients(values: torch.Tensor, inputs: torch.Tensor,
                       from_gradient: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                       chunk: int) -> torch.Tensor:
    """``[n_targets, batch, seq]``: vmapped backward passes of ``chunk`` targets at a time through one graph whose
    input leaf is ``[batch, seq, hidden]``, each row's attribution reduced to its L2 norm over ``hidden``."""
    n = values.shape[0]
    base = inputs.detach()
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
        except (torch.OutOfMemoryError, torch.utils.checkpoint.CheckpointError):
            raise  # not vmap's: eager attention would not mend either (and needs far more memory)
        except RuntimeError as err:  # vmap has no batching rule for an op of this model
            raise _NoBatchedBackward(str(err)) from err
        rows.append(torch.stack([from_gradient(grad[:, b], base[b]).float().norm(dim=-1)
                                 for b in range(base.shape[0])], dim=1))
    return torch.cat(rows)


def _from_one_graph(lm: LoadedModel, t: _Targets, cfg: CCIConfig,
                    graph: AttributionGraph | None) -> list[list[float]] | None:
    """Scores ``[n_selected, n_context]`` from one forward pass (``graph`` over the whole answer, or one cut after
    the furthest target); None, and the model remembered, when vmap cannot batch its backward passes."""
    targets = [t.answer_ids[i] for i in t.idx]
    if graph is None:
        graph = graph_from_embeds(lm, *_slice(lm, t.base, t.answer_ids, t.positions, t.idx))
        cols = list(range(len(t.idx)))  # logits of the selected positions only
    else:
        cols = t.idx
    values = _target_values(graph.logits, [0] * len(t.idx), cols, targets, t.contrast, cfg.target)
    chunk = cfg.batch_size or auto_batch_size(lm, graph.inputs.shape[1], len(t.idx),
                                                 checkpointed=graph.checkpointed)
    try:
        attr = _batched_gradients(values, graph.inputs, CCI_METHODS.lookup(cfg.method).from_gradient, chunk)
    except _NoBatchedBackward as err:
        seq = graph.inputs.shape[1]
        del graph, values
        previous = _eager_fallback(lm, err, seq)  # the attention kernel's backward may have no batching rule: eager's
        if previous is not None:
            rows = _from_one_graph(lm, t, cfg, None)
            if rows is None:  # not the kernel's fault: the model keeps its kernel, CCI repeats the input instead
                lm.model.set_attn_implementation(previous)
                lm.passes["attention"] = previous
            return rows
        lm.batched_backward = False
        return None
    lm.batched_backward = True
    lm.passes["cci_backward"] = f"one graph, vmapped backward, {chunk} target(s) per pass"
    return attr[:, 0].index_select(1, t.context).tolist()


def _eager_fallback(lm: LoadedModel, err: BaseException, seq: int) -> str | None:
    """Switch the model to eager attention when vmap could not batch the backward pass of its attention kernel
    (SDPA's fused or FlashAttention's backward), naming the fallback in ``lm.passes["attention"]``, and return the
    kernel it replaced; None where attention already is eager, cannot be switched, or where eager attention's
    square of the ``seq``-token length would not fit (:func:`~mirage.attribution.planner.graph_fits`; the kernel is
    kept): the caller then repeats the input per target."""
    kernel = str(getattr(lm.model.config, "_attn_implementation", "eager") or "eager")
    switch = getattr(lm.model, "set_attn_implementation", None)
    if kernel == "eager" or switch is None:
        return None
    try:
        switch("eager")
    except (ValueError, ImportError, NotImplementedError):
        return None
    cause = str(err).strip().splitlines()[0][:120] if str(err).strip() else type(err).__name__
    if not graph_fits(lm, seq):
        switch(kernel)
        lm.passes["attention"] = (f"{kernel} (vmap cannot batch its backward: {cause}; eager attention would not "
                                  f"fit {seq} tokens, so one backward pass per target)")
        return None
    lm.passes["attention"] = f"eager (fallback: vmap cannot batch {kernel}'s backward: {cause})"
    return kernel


def _repeated_rows(lm: LoadedModel, base: torch.Tensor, answer_ids: Sequence[int], positions: Sequence[int],
                   targets: Sequence[int], contrast: Sequence[int | None], cfg: CCIConfig) -> torch.Tensor:
    """``[chunk, seq]``: the input repeated once per target, attributed by the method (one backward of the summed
    targets for gradient methods)."""
    chunk = len(targets)

    def forward(embeds: torch.Tensor) -> torch.Tensor:
        # Called with a multiple of chunk rows (IG: chunk * steps): row r belongs to target r % chunk.
        n = embeds.shape[0]
        logits = logits_from_embeds(lm, embeds, answer_ids, positions)
        rows = list(range(n))
        cols = [r % chunk for r in range(n)]
        return _target_values(logits, rows, cols, [targets[r % chunk] for r in range(n)],
                              [contrast[r % chunk] for r in range(n)], cfg.target)

    inputs = base.expand(chunk, -1, -1).clone().requires_grad_(True)
    attr = CCI_METHODS.lookup(cfg.method).attribute(forward, inputs, cfg)
    return attr.detach().float().norm(dim=-1)


def _from_repeated_inputs(lm: LoadedModel, t: _Targets, cfg: CCIConfig) -> list[list[float]]:
    """Scores ``[n_selected, n_context]`` with the input repeated once per target, in memory-bounded chunks."""
    out: list[list[float]] = []
    start = 0
    while start < len(t.idx):
        size = cfg.batch_size or auto_batch_size(lm, t.base.shape[1], len(t.idx) - start, whole_graph=True)
        lm.passes["cci_backward"] = f"input repeated per target, {size} per pass"
        idx = t.idx[start : start + size]
        attr = _repeated_rows(lm, *_slice(lm, t.base, t.answer_ids, t.positions, idx),
                              [t.answer_ids[i] for i in idx], t.contrast[start : start + size], cfg)
        out.extend(attr.index_select(1, t.context).tolist())
        start += size
    return out


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

    ``input_ids`` is the attributed input (see :func:`mirage.attribution.forward.model_inputs`) and
    ``answer_positions[i]`` the position whose logits predict answer token i. ``graph``: the pass of
    :func:`mirage.attribution.graphs.attribution_graph` over the same input, when the caller already ran it (otherwise
    one is run, cut after the furthest selected position).
    """
    contrast_ids = _contrast_ids(answer_ids, selected, contextless_top)
    if not selected:
        return CCIScores(selected=(), contrast_ids=(), scores=())
    backing = document_method(cfg)
    if backing is not None:
        raise ValueError(f"cci.method={cfg.method!r} takes its rows from the document method {backing!r}, "
                         "which needs the prepared item: score through Mirage.score_tokens (or "
                         "mirage.attribution.methods.as_cci.context_cci), not compute_cci.")
    order = sorted(range(len(selected)), key=lambda k: selected[k])
    targets = _Targets(base=embed(lm, input_ids), answer_ids=answer_ids, positions=answer_positions,
                       idx=[selected[k] for k in order], contrast=[contrast_ids[k] for k in order],
                       context=torch.tensor(list(context_positions), device=lm.device, dtype=torch.long))
    if graph is not None and autocast_dtype(lm, cfg) is not None:
        raise ValueError("compute_cci: a graph in the model's dtype was given with cci.precision="
                         f"{cfg.precision!r}; build no graph (see shares_cti_graph).")
    try:
        with frozen_parameters(lm.model), _precision(lm, cfg):
            rows = _from_one_graph(lm, targets, cfg, graph) if shares_graph(lm, cfg) else None
            if rows is None:
                rows = _from_repeated_inputs(lm, targets, cfg)
    except torch.OutOfMemoryError as err:
        raise out_of_memory_error(lm, len(input_ids), err) from None
    by_selected = dict(zip(order, rows))
    return CCIScores(
        selected=tuple(selected),
        contrast_ids=tuple(contrast_ids),
        scores=tuple(tuple(by_selected[k]) for k in range(len(selected))),
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
    if cfg.top_percent is None:
        raise ValueError("CCIConfig sets top_k or top_percent; this one has neither.")
    p = cfg.top_percent / 100.0
    if cfg.percent_rule == "range":
        vmax, vmin = float(values.max()), float(values.min())
        cut = vmax - p * (vmax - vmin)
    else:
        cut = float(torch.quantile(values, 1.0 - p))
    return [j for j, v in enumerate(values.tolist()) if v >= cut]


@dataclass(frozen=True)
class CCIRequest:
    """What one row of a :class:`~mirage.attribution.graphs.BatchGraph` needs for :func:`compute_cci_batch`: its answer
    ids, the answer indices to attribute, the contextless model's top token at each answer step, and the context
    positions (in the row's unpadded input) whose scores are kept."""

    answer_ids: Sequence[int]
    selected: Sequence[int]
    contextless_top: Sequence[int]
    context_positions: Sequence[int]


def compute_cci_batch(lm: LoadedModel, graph: BatchGraph, requests: Sequence[CCIRequest], *,
                      cfg: CCIConfig) -> list[CCIScores] | None:
    """:func:`compute_cci` of every row of ``graph`` at once (``requests[b]`` for row b). The k-th target of every
    row shares one vmapped backward pass: rows do not interact, so the gradient of their sum on row b's inputs is
    row b's own. Backward passes: the most targets of one row, not their total. The scores equal per-item
    :func:`compute_cci` up to float rounding of batched matrix products. None (and the model remembered) when vmap
    cannot batch the model's backward passes, or when the method has no ``from_gradient`` or ``cfg.precision``
    autocasts (the caller then attributes item by item)."""
    if len(requests) != graph.inputs.shape[0]:
        raise ValueError(f"{len(requests)} requests for a graph of {graph.inputs.shape[0]} rows.")
    if not shares_cti_graph(lm, cfg):
        return None
    plans = [(sorted(range(len(req.selected)), key=req.selected.__getitem__),
              _contrast_ids(req.answer_ids, req.selected, req.contextless_top)) for req in requests]
    n_rows = max((len(req.selected) for req in requests), default=0)
    out_rows: list[list[list[float]]] = [[] for _ in requests]
    if n_rows:
        # every attributed step, the k-th target (ascending) of row b; the values are summed by k
        cells = [(b, k, req.selected[order[k]]) for b, (req, (order, _c)) in enumerate(zip(requests, plans))
                 for k in range(len(order))]
        cell_values = _target_values(graph.logits, [b for b, _k, _i in cells],
                                     [graph.column(b, i) for b, _k, i in cells],
                                     [requests[b].answer_ids[i] for b, _k, i in cells],
                                     [plans[b][1][plans[b][0][k]] for b, k, _i in cells], cfg.target)
        ranks = torch.tensor([k for _b, k, _i in cells], device=cell_values.device)
        values = torch.zeros(n_rows, device=cell_values.device, dtype=cell_values.dtype).index_add(0, ranks,
                                                                                                  cell_values)
        width = graph.inputs.shape[1]
        chunk = cfg.batch_size or auto_batch_size(lm, width, n_rows, rows=graph.inputs.shape[0],
                                                     checkpointed=graph.checkpointed)
        try:
            with frozen_parameters(lm.model):
                attr = _batched_gradients(values, graph.inputs, CCI_METHODS.lookup(cfg.method).from_gradient, chunk)
        except _NoBatchedBackward:
            lm.batched_backward = False
            return None
        except torch.OutOfMemoryError as err:
            raise out_of_memory_error(lm, width * graph.inputs.shape[0], err) from None
        lm.batched_backward = True
        for b, req in enumerate(requests):
            cols = torch.tensor([graph.pads[b] + j for j in req.context_positions], device=attr.device,
                                dtype=torch.long)
            out_rows[b] = attr[: len(req.selected), b].index_select(1, cols).tolist()
    results = []
    for req, (order, contrast), rows in zip(requests, plans, out_rows):
        by_selected = dict(zip(order, rows))
        results.append(CCIScores(selected=tuple(req.selected), contrast_ids=tuple(contrast),
                                 scores=tuple(tuple(by_selected[k]) for k in range(len(req.selected)))))
    return results
