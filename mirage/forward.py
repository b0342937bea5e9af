"""Teacher-forced forward passes over an answer, for causal and encoder-decoder models alike: the no-grad pass, the
optional differentiable pass (:class:`AttributionGraph`, gradients to the input embeddings only) and the answer
tokens' (log-)probabilities.

Shapes: ``n_answer`` answer tokens, ``vocab`` vocabulary entries, ``seq`` input positions, ``hidden`` model width.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .models import LoadedModel


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
    if input_ids is not None:
        kwargs["input_ids"] = input_ids
    else:
        kwargs["inputs_embeds"] = inputs_embeds
    batch = (input_ids if input_ids is not None else inputs_embeds).shape[0]
    if lm.is_encoder_decoder:
        dec = torch.tensor([_decoder_ids(lm, answer_ids)], device=lm.device).expand(batch, -1)
        kwargs["decoder_input_ids"] = dec
        return lm.model(**kwargs).logits[:, keep]
    try:
        out = lm.model(**kwargs, logits_to_keep=keep).logits
        if out.shape[1] == len(positions):
            return out
    except TypeError:
        pass  # models without logits_to_keep
    return lm.model(**kwargs).logits[:, keep]


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


@dataclass
class AttributionGraph:
    """One differentiable forward pass over the attributed input, parameters frozen: the input-embedding leaf
    ``[1, seq, hidden]`` and the logits ``[1, n_answer, vocab]`` predicting every answer token.

    When the answer was not just generated, the token-scoring stage builds this once and reads CTI's with-documents
    logits from it, so CCI's backward passes need no forward pass of their own.
    """

    inputs: torch.Tensor
    logits: torch.Tensor

    def answer_logits(self) -> torch.Tensor:
        """Detached fp32 logits ``[n_answer, vocab]`` (what :func:`answer_logits` returns)."""
        return self.logits[0].detach().float()


def graph_from_embeds(lm: LoadedModel, embeds: torch.Tensor, answer_ids: Sequence[int],
                      positions: Sequence[int]) -> AttributionGraph:
    """A differentiable pass from a copy of ``embeds`` ``[1, seq, hidden]`` made a gradient leaf (call it with the
    parameters frozen, see :func:`frozen_parameters`)."""
    leaf = embeds.clone().requires_grad_(True)
    return AttributionGraph(inputs=leaf, logits=logits_from_embeds(lm, leaf, answer_ids, positions))


def attribution_graph(lm: LoadedModel, input_ids: Sequence[int], answer_ids: Sequence[int],
                      answer_positions: Sequence[int]) -> AttributionGraph:
    """Run the attributed input once with gradients to the input embeddings only (see :func:`model_inputs`)."""
    with frozen_parameters(lm.model):
        return graph_from_embeds(lm, embed(lm, input_ids), answer_ids, answer_positions)


def with_documents_logits(lm: LoadedModel, prompt_ids: Sequence[int], answer_ids: Sequence[int], *,
                          graph: bool) -> tuple[torch.Tensor, AttributionGraph | None]:
    """The with-documents logits ``[n_answer, vocab]`` (fp32) and, with ``graph``, the differentiable pass they were
    read from (for CCI to take its gradients from); without it, an inference pass and None."""
    if graph:
        input_ids, positions = model_inputs(lm, prompt_ids, answer_ids)
        built = attribution_graph(lm, input_ids, answer_ids, positions)
        return built.answer_logits(), built
    return answer_logits(lm, prompt_ids, answer_ids), None


def token_probabilities(logits: torch.Tensor, ids: Sequence[int], *, log: bool = False) -> list[float]:
    """Probability of each token ``ids[i]`` under ``softmax(logits[i])`` in fp32, or with ``log`` its
    log-probability (from ``log_softmax``, which is not bit-identical to the log of the probability);
    logits ``[n_tokens, vocab]``, ``n_tokens >= len(ids)``."""
    if not len(ids):
        return []
    rows = logits[: len(ids)].float()
    dist = torch.log_softmax(rows, dim=-1) if log else torch.softmax(rows, dim=-1)
    return dist.gather(1, torch.tensor(list(ids), device=dist.device).unsqueeze(1)).squeeze(1).tolist()
