"""The passes the document methods share: the answer read after the prompt with a subset of the documents
(:func:`subset_readouts`, every subset after the first reusing the full prompt's cached prefix), and the answer's
raw attention to the context tokens (:func:`attention_pass`, :func:`attention_rows`).

Cache reuse (decoder-only models): the full prompt runs once with its key/value cache kept; the prompt of a subset
shares with it every token before the first document it drops (the template's text, the question where the template
puts it first, and the documents before that one), and its pass computes only what follows
(:func:`mirage.likelihood.signals.score_prompts`, which falls back to a cache of what the remaining prompts share on
a sliding-window model whose cache cannot be cut back). Prompts run in the order their shared prefixes shrink, so
the cache is only ever cut. Encoder-decoders run each prompt whole (the encoder reads it both ways, nothing is
shared). The prompt with no document is the template's contextless prompt.

Shapes: ``n_answer`` answer tokens, ``vocab`` vocabulary entries, ``n_rows`` attention rows, ``n_columns`` columns.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from mirage.attribution.forward import answer_logits, causal_pass, model_inputs, returned_cache
from mirage.likelihood.signals import Readout, eager_attention_on, score_prompts

if TYPE_CHECKING:
    from mirage.attribution.methods.base import DocumentInputs

__all__ = ["attention_pass", "attention_rows", "layer_indices", "log_distributions", "subset_readouts"]


def log_distributions(logits: torch.Tensor) -> torch.Tensor:
    """``[n_answer, vocab]`` fp32 log-probabilities of the next token at each answer position."""
    return torch.log_softmax(logits.float(), dim=-1)


@torch.inference_mode()
def subset_readouts(inputs: DocumentInputs, subsets: Sequence[Sequence[int]], readout: Readout
                    ) -> tuple[Any, list[Any]]:
    """``readout`` of the answer's logits ``[n_answer, vocab]`` after the full prompt, and after the prompt with
    each of ``subsets`` (0-based documents kept, in prompt order; empty: the contextless prompt; all of them: the
    full prompt, not run again), in the order given. One pass per distinct prompt, each after the first reusing
    the full prompt's cached prefix on a decoder-only model (see the module's docstring)."""
    lm, answer = inputs.lm, inputs.answer_ids
    full_ids = list(inputs.prepared.tokens.ids)
    keys = [tuple(s) for s in subsets]
    distinct = list(dict.fromkeys(k for k in keys if k != inputs.all_docs))
    prompts = {k: inputs.prompt_ids(k) for k in distinct}
    if lm.is_encoder_decoder:
        full = readout(answer_logits(lm, full_ids, answer))
        done = {k: readout(answer_logits(lm, prompts[k], answer)) for k in distinct}
    else:
        seq, positions = model_inputs(lm, full_ids, answer)
        out = causal_pass(lm, positions, input_ids=torch.tensor([seq], device=lm.device), use_cache=True)
        full = readout(out.logits[0])
        cache = returned_cache(out)
        del out
        order = sorted(distinct, key=lambda k: -len(os.path.commonprefix([full_ids, prompts[k]])))
        done = dict(zip(order, score_prompts(lm, cache, full_ids, [prompts[k] for k in order], answer,
                                             readout=readout)))
    return full, [full if k == inputs.all_docs else done[k] for k in keys]


def layer_indices(n_layers: int, layers: str) -> list[int]:
    """The layers an attention score averages: ``"all"``, or ``"last_quarter"``: the last ⌈n_layers / 4⌉."""
    if layers == "all":
        return list(range(n_layers))
    if layers == "last_quarter":
        return list(range(n_layers - -(-n_layers // 4), n_layers))
    raise ValueError(f"layers={layers!r} is not valid; choose 'all' or 'last_quarter'.")


@torch.inference_mode()
def attention_pass(inputs: DocumentInputs, prompt_ids: Sequence[int], *, method: str) -> tuple[torch.Tensor, ...]:
    """The attention weights of one pass over ``prompt_ids`` and the answer: per layer ``[1, heads, seq, seq]``,
    with eager attention for the pass (the model's own kernel restored after). A ValueError naming ``method`` on an
    encoder-decoder, or a model whose attention cannot return its weights."""
    lm = inputs.lm
    if lm.is_encoder_decoder:
        raise ValueError(f"{method} reads a decoder-only model's self-attention; {lm.name} is an encoder-decoder.")
    seq, positions = model_inputs(lm, prompt_ids, inputs.answer_ids)
    with eager_attention_on(lm.model) as eager:
        if not eager:
            raise ValueError(f"{method} needs attention weights, and {lm.name}'s attention cannot switch to eager.")
        out = causal_pass(lm, positions, input_ids=torch.tensor([seq], device=lm.device), use_cache=False,
                          output_attentions=True)
    attentions = getattr(out, "attentions", None)
    if not attentions:
        raise ValueError(f"{method} needs attention weights, and {lm.name} returned none.")
    return tuple(attentions)


def attention_rows(attentions: Sequence[torch.Tensor], rows: Sequence[int], columns: Sequence[int],
                   layers: Sequence[int]) -> torch.Tensor:
    """``[n_rows, n_columns]`` (float64): the attention from each of ``rows`` to each of ``columns`` (positions),
    averaged over every head of the ``layers`` given."""
    rows_t = torch.tensor(list(rows))
    cols = torch.tensor(list(columns), dtype=torch.long)
    picked = [attentions[i][0].index_select(1, rows_t.to(attentions[i].device)).index_select(
        2, cols.to(attentions[i].device)).double().cpu() for i in layers]  # each [heads, n_rows, n_columns]
    return torch.stack(picked).mean(dim=(0, 1))
