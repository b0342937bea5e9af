"""Per-document signals of one answer beyond CTI and CCI: how much the answer's likelihood drops when a document is
left out of the prompt, and how much attention the answer pays to each document.

    sig = passage_signals(m.lm, m.prepare(item), answer_ids, prepare=m.prepare)
    sig.drop[j]         # log p(answer | all documents) - log p(answer | all but document j+1), nats
    sig.only_logprob[j] # per answer token, log p with document j+1 alone (sufficiency)
    sig.attention[j]    # share of the answer's attention to the documents block that lands on document j+1

Leave-one-out and single-document prompts are the template's prompt with those documents, renumbered, as in the
faithfulness check (:mod:`mirage.scoring.faithfulness`); the no-document prompt is the contextless one. The
with-documents pass runs once with its key/value cache kept; every other pass reuses that cache for the tokens it shares
with the full prompt (everything before the first document that differs), so the n leave-one-out passes cost about n/2
full passes and the n single-document passes about one. Attention is read from that same pass (the model runs it with
eager attention, restored afterwards), averaged over layers and heads, from the positions that predict answer tokens.

Shapes: ``n_docs`` documents, ``n_answer`` answer tokens.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from mirage.attribution.forward import causal_pass, model_inputs, returned_cache, token_probabilities
from mirage.attribution.serialization import JSONRecord

if TYPE_CHECKING:
    from mirage.attribution.models import LoadedModel
    from mirage.attribution.prompts import PreparedItem

__all__ = ["PassageSignals", "Prepare", "Readout", "eager_attention_on", "passage_signals", "prompt_with_documents",
           "score_prompts"]

#: ``prepare(item, reserve_tokens=n) -> PreparedItem``: validates an item ``{"question", "docs"}`` and builds and
#: tokenizes its prompts, keeping ``n`` tokens of the window for the answer (``Mirage.prepare``, with the
#: configuration to use bound: ``functools.partial(m.prepare, config=cfg)``).
Prepare = Callable[..., "PreparedItem"]
#: ``readout(logits) -> value``: what a pass keeps of the answer's logits ``[n_answer, vocab]`` (see
#: :func:`score_prompts`; by default each answer token's log-probability).
Readout = Callable[[torch.Tensor], Any]


@dataclass
class PassageSignals(JSONRecord):
    """``logprob[t]``: log p of answer token t with all documents; ``loo_logprob[j][t]``: the same without document
    j (0-based; empty when not computed); ``drop[j]``: the summed difference (larger: the answer leans more on document
    j); ``attention[j]``: document j's share of the answer's attention to the documents (empty when the model cannot
    return attention); ``only_logprob[j][t]``: log p of answer token t with document j alone; ``none_logprob[t]``: with
    no document (the contextless prompt). Empty lists in signals stored before they were computed."""

    logprob: list[float]
    loo_logprob: list[list[float]]
    drop: list[float]
    attention: list[float]
    only_logprob: list[list[float]] = field(default_factory=list)
    none_logprob: list[float] = field(default_factory=list)


@contextmanager
def eager_attention_on(model: Any) -> Iterator[bool]:
    """Eager attention for the block, so the pass can return attention weights (the model's own restored after);
    yields whether attention weights will come back."""
    current = getattr(model.config, "_attn_implementation", None)
    setter = getattr(model, "set_attn_implementation", None)
    if current == "eager" or setter is None:
        yield current == "eager"
        return
    try:
        setter("eager")
    except (ValueError, ImportError, NotImplementedError):
        yield False
        return
    try:
        yield True
    finally:
        setter(current)


class _CannotRollBack(Exception):
    """The cache cannot be cut back: a sliding-window layer has dropped the states before its window."""


def _crop(cache: Any, length: int) -> None:
    """Cut a key/value cache back to its first ``length`` positions (a negative count works across versions).
    Raises :class:`_CannotRollBack` when the cut is impossible: a sliding-window layer went past its window and its
    earlier states are gone (checked before cutting: the cache is left whole), or another layer refused (the cache
    may then be partly cut, and is not to be used again)."""
    excess = cache.get_seq_length() - length
    if excess <= 0:
        return
    if not _window_holds(cache, cache.get_seq_length()):  # checked first: a refused cut leaves the cache whole
        raise _CannotRollBack
    try:
        cache.crop(-excess)
    except RuntimeError as err:  # another layer kind that cannot roll back
        raise _CannotRollBack from err


def _window_holds(cache: Any, length: int) -> bool:
    """Whether every sliding-window layer of ``cache`` keeps all states of a ``length``-token sequence (so it can be
    cut back after a pass to that length)."""
    for layer in getattr(cache, "layers", ()):
        window = getattr(layer, "sliding_window", None)
        if window and not getattr(layer, "record_past", False) and length >= window:
            return False
    return True


def _score_after(lm: Any, cache: Any, ids: Sequence[int], shared: int, answer_ids: Sequence[int],
                 readout: Readout | None = None) -> Any:
    """Log p of each answer token after prompt ``ids``, whose first ``shared`` tokens ``cache`` holds (it is
    extended by the pass); with ``readout``, what it reads from the answer's logits ``[n_answer, vocab]``."""
    suffix = torch.tensor([list(ids[shared:]) + list(answer_ids[:-1])], device=lm.device)
    first = len(ids) - shared - 1  # suffix position predicting the first answer token
    logits = causal_pass(lm, range(first, first + len(answer_ids)), input_ids=suffix, past=cache,
                         use_cache=True).logits[0]
    if readout is not None:
        return readout(logits)
    return token_probabilities(logits.float(), answer_ids, log=True)


def _prefix_cache(lm: Any, full_ids: Sequence[int], prompts: Sequence[Sequence[int]]) -> Any:
    """The key/value cache of what ``full_ids`` shares with every prompt (at least its first token)."""
    shared = min(min(_common_prefix(full_ids, ids_j), len(ids_j) - 1) for ids_j in prompts)
    return returned_cache(causal_pass(lm, [], input_ids=torch.tensor([list(full_ids[:max(shared, 1)])],
                                                                   device=lm.device), use_cache=True))


def _score_prompts(lm: Any, cache: Any, full_ids: Sequence[int], prompts: Sequence[Sequence[int]],
                   answer_ids: Sequence[int], readout: Readout | None = None) -> Iterator[Any]:
    """:func:`_score_after` for each prompt, from ``cache`` (of a prefix of ``full_ids``): the cache is only ever
    cut, since each prompt shares no more with it than the one before. A pass that would take a sliding-window
    layer past its window extends a copy instead. Raises :class:`_CannotRollBack` when ``cache`` itself is past a
    window and longer than a prompt's shared part (the prompts yielded before are right)."""
    for ids_j in prompts:
        shared = min(_common_prefix(full_ids, ids_j), len(ids_j) - 1, cache.get_seq_length())
        _crop(cache, shared)
        if _window_holds(cache, len(ids_j) + len(answer_ids) - 1):  # the pass can be cut back afterwards
            yield _score_after(lm, cache, ids_j, shared, answer_ids, readout)
            _crop(cache, shared)
        else:  # a sliding window would drop states the next prompts need: the pass extends a copy
            yield _score_after(lm, copy.deepcopy(cache), ids_j, shared, answer_ids, readout)


def score_prompts(lm: Any, cache: Any, full_ids: Sequence[int], prompts: Sequence[Sequence[int]],
                  answer_ids: Sequence[int], *, readout: Readout | None = None) -> list[Any]:
    """Per prompt of ``prompts``, the log p of each answer token after it (or, with ``readout``, what that reads from
    the answer's logits ``[n_answer, vocab]``), each pass reusing ``cache``: the key/value cache of a prefix of
    ``full_ids`` (a causal model's pass over the full prompt, or its start), for the tokens the prompt shares with
    ``full_ids``. Prompts in the order their shared prefixes shrink reuse the most (the cache is only ever cut); a
    cache past a sliding window, that cannot be cut back, is replaced by one of what the remaining prompts share.
    ``cache`` is consumed. Decoder-only models only."""
    scored: list[Any] = []
    try:
        scored.extend(_score_prompts(lm, cache, full_ids, prompts, answer_ids, readout))
    except _CannotRollBack:  # the full prompt's cache went past a sliding window (Gemma 2/3, Mistral)
        rest = prompts[len(scored):]  # from a cache of what they share, which never needs cutting back
        scored.extend(_score_prompts(lm, _prefix_cache(lm, full_ids, rest), full_ids, rest, answer_ids, readout))
    return scored


def prompt_with_documents(prepared: PreparedItem, kept: Sequence[int], *, prepare: Prepare,
                          reserve_tokens: int) -> PreparedItem:
    """``prepared``'s item prepared again with only the documents ``kept`` (0-based indices into its documents, in
    the order given; the prompt numbers them from 1), ``reserve_tokens`` of the window kept for the answer."""
    docs = prepared.item.docs
    return prepare({"question": prepared.item.question,
                    "docs": [{"title": docs[i].title, "text": docs[i].text} for i in kept]},
                   reserve_tokens=reserve_tokens)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _doc_attention(attentions: Sequence[torch.Tensor], rows: Sequence[int], context_positions: Sequence[int],
                   context_docs: Sequence[int], n_docs: int) -> list[float]:
    """Per document, its share of the attention from ``rows`` to the context tokens, mean over layers and heads."""
    if not attentions or not context_positions:
        return []
    rows_t = torch.tensor(list(rows))
    cols = torch.tensor(list(context_positions))
    # [layers, heads, n_rows, n_context] -> mean over layers, heads, rows
    mass = torch.stack([a[0][:, rows_t][:, :, cols].float() for a in attentions]).mean(dim=(0, 1, 2))
    per_doc = torch.zeros(n_docs).index_add_(0, torch.tensor(list(context_docs)), mass)
    total = float(per_doc.sum())
    return (per_doc / total).tolist() if total > 0 else [0.0] * n_docs


@torch.inference_mode()
def passage_signals(lm: LoadedModel, prepared: PreparedItem, answer_ids: Sequence[int], *, prepare: Prepare,
                    attention: bool = True,
                    leave_one_out: bool = True, logprob: Sequence[float] | None = None,
                    none_logprob: Sequence[float] | None = None) -> PassageSignals:
    """Log-probabilities of ``answer_ids`` after ``prepared``'s prompt, with each document alone and with none,
    (with ``leave_one_out``) without each document, and (with ``attention``, causal models) the answer's attention
    share per document. Decoder-only models reuse the shared-prefix cache; encoder-decoders run each prompt
    whole. ``logprob`` / ``none_logprob``: the answer's log-probabilities with all documents / with none, when a
    caller has them already (CTI's two passes). The no-document pass is then not run again, nor, on a causal model
    without ``attention`` or ``leave_one_out``, the with-documents pass (only the prompt's part before the first
    document runs, for the cache); attention and leave-one-out need that pass's own cache and weights.
    ``prepare`` builds the prompts with fewer documents (:data:`Prepare`); ``lm``: the model ``prepared`` was
    tokenized for."""
    n_docs = len(prepared.item.docs)
    full_ids = list(prepared.tokens.ids)
    reserve = len(answer_ids) + 1

    def with_docs(kept: list[int]) -> list[int]:
        if not kept:
            return list(prepared.tokens.contextless_ids)
        return list(prompt_with_documents(prepared, kept, prepare=prepare, reserve_tokens=reserve).tokens.ids)

    # prompts in the order their shared prefixes with the full prompt shrink: each leave-one-out prompt from the
    # last document down, then each document alone and no document (all share only what precedes document 1)
    n_loo = n_docs if leave_one_out else 0
    prompts = [with_docs([i for i in range(n_docs) if i != j]) for j in reversed(range(n_loo))]
    prompts += [with_docs([j]) for j in range(n_docs)]
    if none_logprob is None:
        prompts.append(with_docs([]))
    for name, given in (("logprob", logprob), ("none_logprob", none_logprob)):
        if given is not None and len(given) != len(answer_ids):
            raise ValueError(f"{name} has {len(given)} values for {len(answer_ids)} answer tokens.")
    seq, positions = model_inputs(lm, full_ids, answer_ids)
    attn: list[float] = []
    if lm.is_encoder_decoder:
        from mirage.attribution.forward import answer_logits

        full = (list(logprob) if logprob is not None
                else token_probabilities(answer_logits(lm, full_ids, answer_ids), answer_ids, log=True))
        scored = [token_probabilities(answer_logits(lm, ids, answer_ids), answer_ids, log=True) for ids in prompts]
    else:
        if logprob is not None and not attention and not leave_one_out:  # only the cache of the shared prefix
            cache = _prefix_cache(lm, full_ids, prompts)
            full = list(logprob)
        else:
            with eager_attention_on(lm.model) as eager:
                out = causal_pass(lm, positions, input_ids=torch.tensor([seq], device=lm.device), use_cache=True,
                                  output_attentions=bool(attention and eager))
            full = token_probabilities(out.logits[0].float(), answer_ids, log=True)
            if attention and getattr(out, "attentions", None):
                docs_of = list(prepared.tokens.context_docs)
                attn = _doc_attention(out.attentions, positions, prepared.tokens.context_positions, docs_of, n_docs)
            cache = returned_cache(out)
            del out
        scored = score_prompts(lm, cache, full_ids, prompts, answer_ids)
    loo = scored[:n_loo][::-1]
    only = scored[n_loo: n_loo + n_docs]
    none = list(none_logprob) if none_logprob is not None else scored[n_loo + n_docs]
    drop = [sum(full) - sum(row) for row in loo]
    return PassageSignals(logprob=full, loo_logprob=loo, drop=drop, attention=attn, only_logprob=only,
                          none_logprob=none)
