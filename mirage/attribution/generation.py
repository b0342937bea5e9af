"""Answer generation (greedy or sampling, seeded), keeping the with-documents logits for CTI to reuse."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mirage.attribution.models import LoadedModel
from mirage.config import GenerationConfig

__all__ = ["Generated", "generate_answer"]


@dataclass
class Generated:
    """Generated token ids (end-of-sequence removed), their text, and the raw logits ``[n_new, vocab]``."""

    ids: list[int]
    text: str
    logits: torch.Tensor


def _stop_ids(lm: LoadedModel) -> set[int]:
    ids: set[int] = set()
    for source in (lm.model.generation_config, lm.model.config, lm.tokenizer):
        eos = getattr(source, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, (list, tuple)):
            ids.update(int(e) for e in eos)
    return ids


@torch.inference_mode()
def generate_answer(lm: LoadedModel, prompt_ids: Sequence[int], *, cfg: GenerationConfig) -> Generated:
    """Generate an answer after ``prompt_ids`` with a private, seeded random state."""
    ids = torch.tensor([list(prompt_ids)], device=lm.device)
    stop = sorted(_stop_ids(lm))
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else (stop[0] if stop else 0)
    kwargs = {"do_sample": cfg.do_sample, "max_new_tokens": cfg.max_new_tokens, "eos_token_id": stop or None,
              "pad_token_id": pad, "return_dict_in_generate": True, "output_logits": True,
              "attention_mask": torch.ones_like(ids)}
    if cfg.do_sample:
        kwargs.update(temperature=cfg.temperature, top_p=cfg.top_p, top_k=0)
    else:
        kwargs.update(temperature=None, top_p=None, top_k=None)
    devices = [lm.device] if lm.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(cfg.seed)
        out = lm.model.generate(ids, **kwargs)
    new = out.sequences[0].tolist()
    if not lm.is_encoder_decoder:
        new = new[ids.shape[1] :]
    else:
        new = new[1:]  # decoder start token
    logits = torch.stack([step[0] for step in out.logits]).float()
    cut = next((i for i, t in enumerate(new) if t in stop), len(new))
    new = new[:cut]
    return Generated(ids=new, text=lm.tokenizer.decode(new, skip_special_tokens=True), logits=logits[:cut])
