"""Teacher-forced forward passes that give the logits predicting each answer token, for causal and
encoder-decoder models alike.

Shapes: ``n_answer`` answer tokens, ``vocab`` vocabulary entries, ``seq`` input positions, ``hidden`` model width.
"""

from __future__ import annotations

from collections.abc import Sequence

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
