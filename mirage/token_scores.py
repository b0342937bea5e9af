"""The token-scoring stage: an answer's two teacher-forced passes, CTI for every answer token, CCI for the targets.

    scores = m.score_tokens(m.prepare(item), "It was formed in 1913.")      # Mirage.score_tokens
    scores.cti.selected, scores.cci.scores

``targets`` picks the answer tokens CCI attributes: ``"selected"`` (those CTI selects, as the pipeline does),
``"all"`` (every answer token, so that any selection can be derived afterwards, as the XOR-AttriQA scorer does) or
``"none"`` (CTI only), or explicit answer indices, or a function of the :class:`CTIScores` returning them (the
XOR-AttriQA scorer asks for the tokens some setting selects). When the answer was just generated, generation's logits are the with-documents pass; otherwise
that pass is differentiable when CCI can take its gradients from it (see :func:`mirage.cci.shares_cti_graph`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from .cci import CCIScores, compute_cci, shares_cti_graph
from .config import MirageConfig
from .cti import CTIScores, compute_cti
from .forward import AttributionGraph, answer_logits, batched_answer_logits, model_inputs, with_documents_logits
from .generation import Generated
from .models import LoadedModel
from .tokenization import TokenizedAnswer, TokenizedPrompt

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


def _cci_targets(cti: CTIScores, n_answer: int, targets: TargetSpec) -> tuple[int, ...]:
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
        want_graph = (targets != "none" and not (isinstance(targets, Sequence) and not isinstance(targets, str)
                                                 and not targets)) and shares_cti_graph(lm, cfg.cci)
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
    cci = compute_cci(lm, input_ids, answer.ids, positions, _cci_targets(cti, len(answer.ids), targets),
                      cti.contextless_top, prompt.context_positions, cfg=cfg.cci, graph=graph)
    return TokenScores(cti=cti, cci=cci, timings={"cti": cti_seconds, "cci": time.perf_counter() - t})


def score_batch(lm: LoadedModel, prompts: Sequence[TokenizedPrompt], answers: Sequence[TokenizedAnswer],
                cfg: MirageConfig, *, targets: TargetSpec = "selected",
                item_targets: Sequence[TargetSpec] | None = None,
                max_batch_tokens: int | None = None) -> list[TokenScores]:
    """:func:`score_tokens` of several answers (each after its own prompt): the CTI passes of all of them run in
    padded batches (:func:`mirage.forward.batched_answer_logits`: every with-documents input, then every
    contextless one), then CCI item by item over its own differentiable pass. ``targets``: the spec for every
    item, or ``item_targets``: one per item. The scores equal per-item :func:`score_tokens` up to float rounding; the batched passes pay off where
    one sequence leaves the device idle (a GPU, many short answers). ``timings["cti"]`` is each item's share of the
    batched passes."""
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
    t = time.perf_counter()
    with_docs = batched_answer_logits(lm, [(p.ids, a.ids) for p, a in zip(prompts, answers)],
                                      max_batch_tokens=max_batch_tokens)
    without = batched_answer_logits(lm, [(p.contextless_ids, a.ids) for p, a in zip(prompts, answers)],
                                    max_batch_tokens=max_batch_tokens)
    ctis = [compute_cti(c, n, a.ids, cfg=cfg.cti) for c, n, a in zip(with_docs, without, answers)]
    del with_docs, without
    cti_share = (time.perf_counter() - t) / len(prompts)
    return [_with_cci(lm, prompt, answer, cti, spec, cfg, cti_seconds=cti_share)
            for prompt, answer, cti, spec in zip(prompts, answers, ctis, per_item)]
