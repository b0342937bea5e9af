"""The token-scoring stage: an answer's two teacher-forced passes, CTI for every answer token, CCI for the targets.

    scores = m.score_tokens(m.prepare(item), "It was formed in 1913.")      # Mirage.score_tokens
    scores.cti.selected, scores.cci.scores

``targets`` picks the answer tokens CCI attributes: ``"selected"`` (those CTI selects, as the pipeline does),
``"all"`` (every answer token, so that any selection can be derived afterwards, as the XOR-AttriQA scorer does) or
``"none"`` (CTI only), or explicit answer indices, or a function of the :class:`CTIScores` returning them (the
XOR-AttriQA scorer asks for the tokens some setting selects). When the answer was just generated, generation's logits
are the with-documents pass; otherwise that pass is differentiable when CCI can take its gradients from it (see
:func:`mirage.attribution.cci.shares_cti_graph`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from mirage.attribution.cci import CCIRequest, CCIScores, compute_cci, compute_cci_batch, shares_cti_graph
from mirage.attribution.cti import CTIScores, compute_cti
from mirage.attribution.forward import answer_logits, batched_answer_logits, model_inputs, token_groups
from mirage.attribution.generation import Generated
from mirage.attribution.graphs import AttributionGraph, batched_attribution_graph, with_documents_logits
from mirage.attribution.models import LoadedModel
from mirage.attribution.planner import graph_token_budget
from mirage.attribution.tokenization import TokenizedAnswer, TokenizedPrompt
from mirage.config import MirageConfig

__all__ = ["TargetSpec", "TokenScores", "cci_targets", "score_batch", "score_tokens"]

Targets = Literal["selected", "all", "none"]
#: What ``targets`` accepts: a named choice, answer indices, or a function of the CTI scores giving the indices.
TargetSpec = Targets | Sequence[int] | Callable[[CTIScores], Iterable[int]]


@dataclass(frozen=True)
class TokenScores:
    """One answer's token scores: CTI for every answer token (scores, selection, threshold, the contextless top
    token, the with-documents probabilities), CCI for the targets, and the seconds each took (``cti``, ``cci``)."""

    cti: CTIScores
    cci: CCIScores
    timings: dict[str, float] = field(default_factory=dict)


def cci_targets(cti: CTIScores, n_answer: int, targets: TargetSpec) -> tuple[int, ...]:
    """The answer indices CCI attributes, ascending."""
    if isinstance(targets, str):
        return {"selected": cti.selected, "all": tuple(range(n_answer)), "none": ()}[targets]
    chosen = targets(cti) if callable(targets) else targets
    picked = tuple(sorted({int(t) for t in chosen}))
    if any(not 0 <= t < n_answer for t in picked):
        raise ValueError(f"CCI targets {list(picked)} must be answer indices in [0, {n_answer}).")
    return picked


def score_tokens(lm: LoadedModel, prompt: TokenizedPrompt, answer: TokenizedAnswer, cfg: MirageConfig, *,
                 targets: TargetSpec = "selected", generated: Generated | None = None) -> TokenScores:
    """CTI of every token of ``answer`` after ``prompt`` and CCI of the ``targets`` over its context tokens.

    ``generated``: the generation that produced ``answer``, whose logits then serve as the with-documents pass.
    """
    if isinstance(targets, str) and targets not in get_args(Targets):
        raise ValueError(f"targets={targets!r} is not valid; choose one of {', '.join(map(repr, get_args(Targets)))}.")
    if not answer.ids:
        raise ValueError("the answer has no tokens; nothing to score.")
    t = time.perf_counter()
    if generated is not None and tuple(generated.ids) == tuple(answer.ids):
        logits_ctx, graph = generated.logits, None  # generation already computed the with-documents pass
    else:  # CCI reuses the graph of this pass when it can
        want_graph = _may_need_cci(targets) and shares_cti_graph(lm, cfg.cci)
        logits_ctx, graph = with_documents_logits(lm, prompt.ids, answer.ids, graph=want_graph)
    logits_noctx = answer_logits(lm, prompt.contextless_ids, answer.ids)
    cti = compute_cti(logits_ctx, logits_noctx, answer.ids, cfg=cfg.cti)
    return _with_cci(lm, prompt, answer, cti, targets, cfg, cti_seconds=time.perf_counter() - t, graph=graph)


def _with_cci(lm: LoadedModel, prompt: TokenizedPrompt, answer: TokenizedAnswer, cti: CTIScores,
              targets: TargetSpec, cfg: MirageConfig, *, cti_seconds: float,
              graph: AttributionGraph | None = None) -> TokenScores:
    """The answer's CCI for ``targets`` beside its CTI (``graph``: the with-documents pass, when it was run with
    gradients), with the seconds each took."""
    t = time.perf_counter()
    input_ids, positions = model_inputs(lm, prompt.ids, answer.ids)
    cci = compute_cci(lm, input_ids, answer.ids, positions, cci_targets(cti, len(answer.ids), targets),
                      cti.contextless_top, prompt.context_positions, cfg=cfg.cci, graph=graph)
    return TokenScores(cti=cti, cci=cci, timings={"cti": cti_seconds, "cci": time.perf_counter() - t})


def _may_need_cci(spec: TargetSpec) -> bool:
    """Whether a target spec can ask for any CCI row before CTI is known."""
    if isinstance(spec, str):
        return spec != "none"
    return callable(spec) or bool(len(spec))


def score_batch(lm: LoadedModel, prompts: Sequence[TokenizedPrompt], answers: Sequence[TokenizedAnswer],
                cfg: MirageConfig, *, targets: TargetSpec = "selected",
                item_targets: Sequence[TargetSpec] | None = None,
                max_batch_tokens: int | None = None) -> list[TokenScores]:
    """:func:`score_tokens` of several answers (each after its own prompt), in padded batches: every contextless
    input in batched inference passes (:func:`mirage.attribution.forward.batched_answer_logits`); the with-documents
    inputs of items that may need CCI in batched differentiable passes
    (:func:`mirage.attribution.graphs.batched_attribution_graph`, causal models whose CCI shares CTI's graph), from
    which CTI reads its logits and CCI takes every row's gradients at once
    (:func:`mirage.attribution.cci.compute_cci_batch`); the other items' with-documents inputs in batched inference
    passes, with CCI item by item. ``targets``: the spec for every item, or ``item_targets``: one per item. The scores
    equal per-item :func:`score_tokens` up to float rounding; batches pay off where one sequence leaves the device idle
    (a GPU, many short answers). ``timings``: each item's share of its batch's seconds."""
    if len(prompts) != len(answers):
        raise ValueError(f"{len(prompts)} prompts for {len(answers)} answers.")
    per_item = list(item_targets) if item_targets is not None else [targets] * len(prompts)
    for spec in per_item:
        if isinstance(spec, str) and spec not in get_args(Targets):
            raise ValueError(f"targets={spec!r} is not valid; choose one of {', '.join(map(repr, get_args(Targets)))}.")
    if len(per_item) != len(prompts):
        raise ValueError(f"{len(per_item)} target specs for {len(prompts)} answers.")
    for answer in answers:
        if not answer.ids:
            raise ValueError("an answer has no tokens; nothing to score.")
    n = len(prompts)
    t = time.perf_counter()
    without = batched_answer_logits(lm, [(p.contextless_ids, a.ids) for p, a in zip(prompts, answers)],
                                    max_batch_tokens=max_batch_tokens)
    graphed = [k for k in range(n) if _may_need_cci(per_item[k])] \
        if not lm.is_encoder_decoder and shares_cti_graph(lm, cfg.cci) else []
    plain = sorted(set(range(n)) - set(graphed))
    with_docs = dict(zip(plain, batched_answer_logits(lm, [(prompts[k].ids, answers[k].ids) for k in plain],
                                                       max_batch_tokens=max_batch_tokens)))
    share = (time.perf_counter() - t) / n
    out: list[TokenScores | None] = [None] * n
    for k in plain:
        cti = compute_cti(with_docs.pop(k), without[k], answers[k].ids, cfg=cfg.cti)
        out[k] = _with_cci(lm, prompts[k], answers[k], cti, per_item[k], cfg, cti_seconds=share)
    budget = max_batch_tokens or graph_token_budget(lm)
    lengths = [len(prompts[k].ids) + len(answers[k].ids) - 1 for k in graphed]
    for group in token_groups(lengths, budget):
        ks = [graphed[g] for g in group]
        t = time.perf_counter()
        graph = batched_attribution_graph(lm, [(prompts[k].ids, answers[k].ids) for k in ks])
        ctis = [compute_cti(graph.answer_logits(r), without[k], answers[k].ids, cfg=cfg.cti) for r, k in enumerate(ks)]
        cti_s = time.perf_counter() - t
        t = time.perf_counter()
        requests = [CCIRequest(answer_ids=answers[k].ids, selected=cci_targets(cti, len(answers[k].ids), per_item[k]),
                               contextless_top=cti.contextless_top, context_positions=prompts[k].context_positions)
                    for cti, k in zip(ctis, ks)]
        ccis = compute_cci_batch(lm, graph, requests, cfg=cfg.cci)
        del graph
        cci_s = time.perf_counter() - t
        for r, k in enumerate(ks):
            if ccis is None:  # vmap cannot batch this model's backward passes: item by item
                out[k] = _with_cci(lm, prompts[k], answers[k], ctis[r], per_item[k], cfg,
                                   cti_seconds=share + cti_s / len(ks))
            else:
                out[k] = TokenScores(cti=ctis[r], cci=ccis[r],
                                     timings={"cti": share + cti_s / len(ks), "cci": cci_s / len(ks)})
    return out  # type: ignore[return-value]
