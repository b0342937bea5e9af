"""Teacher-forced forward passes over an answer, for causal and encoder-decoder models alike: the attributed input
(:func:`model_inputs`), the one way to run a causal model when only some positions' logits are wanted
(:func:`causal_pass`), the no-grad pass (:func:`answer_logits`) and its padded batches
(:func:`batched_answer_logits`), the input embeddings and the logits from them (:func:`embed`,
:func:`logits_from_embeds`), and the answer tokens' (log-)probabilities. The differentiable passes built on these
are :mod:`mirage.attribution.graphs`', planned by :mod:`mirage.attribution.planner`.

Shapes: ``n_answer`` answer tokens, ``vocab`` vocabulary entries, ``seq`` input positions, ``hidden`` model width.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from mirage.attribution.models import LoadedModel

__all__ = [
    "CPU_BATCH_TOKENS",
    "answer_logits",
    "batch_token_budget",
    "batched_answer_logits",
    "causal_pass",
    "embed",
    "frozen_parameters",
    "left_padded",
    "logits_from_embeds",
    "model_inputs",
    "returned_cache",
    "token_budget",
    "token_groups",
    "token_probabilities",
]


def _decoder_ids(lm: LoadedModel, answer_ids: Sequence[int]) -> list[int]:
    start = lm.model.config.decoder_start_token_id
    if start is None:
        start = lm.model.config.pad_token_id
    return [int(start)] + list(answer_ids[:-1])


def model_inputs(lm: LoadedModel, prompt_ids: Sequence[int], answer_ids: Sequence[int]) -> tuple[list[int], list[int]]:
    """The attributed input ids and the positions whose logits predict each answer token.

    Causal: input = prompt + answer[:-1], positions len(prompt)-1 ... ; encoder-decoder: the encoder input is the
    prompt and the positions index the decoder.
    """
    if lm.is_encoder_decoder:
        return list(prompt_ids), list(range(len(answer_ids)))
    seq = list(prompt_ids) + list(answer_ids[:-1])
    first = len(prompt_ids) - 1
    return seq, list(range(first, first + len(answer_ids)))


def _run(
    lm: LoadedModel,
    *,
    input_ids: torch.Tensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
    answer_ids: Sequence[int],
    positions: Sequence[int],
) -> torch.Tensor:
    """Logits ``[batch, len(positions), vocab]`` at the given positions."""
    keep = torch.tensor(list(positions), device=lm.device)
    kwargs: dict = {"use_cache": False}
    given = input_ids if input_ids is not None else inputs_embeds
    if given is None:
        raise ValueError("give input_ids or inputs_embeds")
    kwargs["input_ids" if input_ids is not None else "inputs_embeds"] = given
    batch = given.shape[0]
    if lm.is_encoder_decoder:
        dec = torch.tensor([_decoder_ids(lm, answer_ids)], device=lm.device).expand(batch, -1)
        kwargs["decoder_input_ids"] = dec
        return lm.model(**kwargs).logits[:, keep]
    return causal_pass(lm, positions, **kwargs).logits


def _cache_keyword(model: Any) -> str:
    """The keyword the model's forward takes a key/value cache by: ``cache`` (transformers 5.2x on), else
    ``past_key_values`` (earlier releases; the new ones still take it, with a deprecation warning per call)."""
    try:
        return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    except (TypeError, ValueError):
        return "past_key_values"


def returned_cache(out: Any) -> Any:
    """The key/value cache a forward pass returned (``cache`` or, before transformers 5.2x, ``past_key_values``)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def causal_pass(lm: LoadedModel, positions: Sequence[int], *, past: Any = None, **kwargs: object) -> Any:
    """One pass of a causal model whose output's ``logits`` are ``[batch, len(positions), vocab]``, those at
    ``positions`` only: the output head runs on those rows alone where the model takes ``logits_to_keep`` (a
    large vocabulary's head over every prompt position costs more than the layers), else it is sliced. ``past``:
    a key/value cache to extend, passed under the keyword this transformers release takes. Other outputs (the
    cache: :func:`returned_cache`, ``attentions``) are the model's own. ``positions`` empty: the head runs on
    one row, whose logits the caller does not want."""
    if past is not None:
        kwargs[_cache_keyword(lm.model)] = past
    keep = torch.tensor(list(positions) or [0], device=lm.device)
    try:
        out = lm.model(**kwargs, logits_to_keep=keep)
        if out.logits.shape[1] == len(keep):
            return out
    except TypeError:
        pass  # models without logits_to_keep
    out = lm.model(**kwargs)
    out.logits = out.logits[:, keep]
    return out


@torch.inference_mode()
def answer_logits(lm: LoadedModel, prompt_ids: Sequence[int], answer_ids: Sequence[int]) -> torch.Tensor:
    """Logits ``[n_answer, vocab]`` (fp32) predicting each answer token after ``prompt_ids``."""
    seq, positions = model_inputs(lm, prompt_ids, answer_ids)
    ids = torch.tensor([seq], device=lm.device)
    return _run(lm, input_ids=ids, answer_ids=answer_ids, positions=positions)[0].float()


def embed(lm: LoadedModel, ids: Sequence[int]) -> torch.Tensor:
    """Input embeddings ``[1, seq, hidden]`` (detached) of the attributed input ids."""
    table = lm.model.get_input_embeddings()
    with torch.no_grad():
        return table(torch.tensor([list(ids)], device=lm.device)).detach()


def logits_from_embeds(
    lm: LoadedModel, inputs_embeds: torch.Tensor, answer_ids: Sequence[int], positions: Sequence[int]
) -> torch.Tensor:
    """Logits ``[batch, len(positions), vocab]`` from input embeddings ``[batch, seq, hidden]`` (differentiable).

    For causal models ``positions`` index the input sequence; for encoder-decoders they index the decoder.
    """
    return _run(lm, inputs_embeds=inputs_embeds, answer_ids=answer_ids, positions=positions)


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


def token_probabilities(logits: torch.Tensor, ids: Sequence[int], *, log: bool = False) -> list[float]:
    """Probability of each token ``ids[i]`` under ``softmax(logits[i])`` in fp32, or with ``log`` its
    log-probability (from ``log_softmax``, which is not bit-identical to the log of the probability);
    logits ``[n_tokens, vocab]``, ``n_tokens >= len(ids)``."""
    if not len(ids):
        return []
    rows = logits[: len(ids)].float()
    dist = torch.log_softmax(rows, dim=-1) if log else torch.softmax(rows, dim=-1)
    return dist.gather(1, torch.tensor(list(ids), device=dist.device).unsqueeze(1)).squeeze(1).tolist()


#: Padded tokens per batched inference pass when the caller gives no budget (CPU; on a GPU the budget follows
#: free memory, see :func:`batch_token_budget`).
CPU_BATCH_TOKENS = 8192


def token_budget(lm: LoadedModel, per_token: int, cpu: int) -> int:
    """A quarter of free GPU memory over ``per_token`` bytes, at least 512 tokens; ``cpu`` tokens on a CPU."""
    if lm.device.type != "cuda":
        return cpu
    free, _total = torch.cuda.mem_get_info(lm.device)
    return max(512, int(free // 4 // per_token))


def batch_token_budget(lm: LoadedModel) -> int:
    """Padded tokens per batched inference pass: a quarter of free GPU memory over the activations per token
    (hidden states of every layer, the attention scores are not kept in inference), at least one sequence."""
    sizes = lm.sizes
    return token_budget(lm, (16 * sizes.hidden + sizes.vocab) * max(4, torch.finfo(lm.dtype).bits // 8),
                         CPU_BATCH_TOKENS)


def token_groups(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices grouped (longest first) so that each group's rows × its longest row stay within ``budget``."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _pad_id(lm: LoadedModel) -> int:
    pad = lm.tokenizer.pad_token_id
    if pad is None:
        pad = lm.tokenizer.eos_token_id
    return int(pad) if pad is not None else 0


def left_padded(lm: LoadedModel, seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, dict]:
    """Causal batch of ``seqs``: the left-padded ids ``[batch, width]`` on the device, and the attention mask and
    position ids that let each row's real tokens see what they see alone, at the positions they have alone."""
    width = max(len(seq) for seq in seqs)
    ids = torch.full((len(seqs), width), _pad_id(lm), dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for r, seq in enumerate(seqs):
        ids[r, width - len(seq):], mask[r, width - len(seq):] = torch.tensor(list(seq)), 1
    position_ids = (mask.cumsum(-1) - 1).clamp_min(0)
    return ids.to(lm.device), {"attention_mask": mask.to(lm.device), "position_ids": position_ids.to(lm.device),
                               "use_cache": False}


@torch.inference_mode()
def batched_answer_logits(lm: LoadedModel, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *,
                          max_batch_tokens: int | None = None) -> list[torch.Tensor]:
    """:func:`answer_logits` of several ``(prompt_ids, answer_ids)`` pairs: a list of ``[n_answer, vocab]`` (fp32),
    from padded batches of at most ``max_batch_tokens`` padded positions (default :func:`batch_token_budget`).

    Causal models: left padding with an attention mask and explicit position ids (each row's real tokens see what
    they see alone, at the positions they have alone), and only the last ``max(n_answer)`` positions' logits are
    computed. Encoder-decoders: right padding of the encoder input and of the decoder input, both masked. The
    result equals per-pair :func:`answer_logits` up to float rounding of batched matrix products."""
    if not pairs:
        return []
    if any(not len(a) for _p, a in pairs):
        raise ValueError("every pair needs at least one answer token.")
    inputs = [model_inputs(lm, p, a)[0] for p, a in pairs]
    budget = max_batch_tokens or batch_token_budget(lm)
    out: list[torch.Tensor | None] = [None] * len(pairs)
    pad = _pad_id(lm)
    for group in token_groups([len(seq) for seq in inputs], budget):
        width = max(len(inputs[i]) for i in group)
        n_keep = max(len(pairs[i][1]) for i in group)
        if lm.is_encoder_decoder:
            mask = torch.zeros(len(group), width, dtype=torch.long)
            ids = torch.full((len(group), width), pad, dtype=torch.long)
            dec = torch.full((len(group), n_keep), pad, dtype=torch.long)
            dec_mask = torch.zeros(len(group), n_keep, dtype=torch.long)
            for r, i in enumerate(group):
                seq, answer = inputs[i], pairs[i][1]
                ids[r, :len(seq)], mask[r, :len(seq)] = torch.tensor(seq), 1
                dec[r, :len(answer)], dec_mask[r, :len(answer)] = torch.tensor(_decoder_ids(lm, answer)), 1
            logits = lm.model(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device),
                              decoder_input_ids=dec.to(lm.device), decoder_attention_mask=dec_mask.to(lm.device),
                              use_cache=False).logits
            for r, i in enumerate(group):
                out[i] = logits[r, :len(pairs[i][1])].float()
            continue
        ids, kwargs = left_padded(lm, [inputs[i] for i in group])
        logits = causal_pass(lm, range(width - n_keep, width), input_ids=ids, **kwargs).logits
        for r, i in enumerate(group):
            n = len(pairs[i][1])
            out[i] = logits[r, n_keep - n:].float()
    return out  # type: ignore[return-value]
