"""Token views of a prompt and an answer, with character offsets mapping tokens to documents and sentences."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .prompts import BuiltPrompt


class TokenizerError(ValueError):
    """The tokenizer cannot give what attribution needs (offsets)."""


@dataclass(frozen=True)
class TokenizedPrompt:
    """Token ids of both prompts, and which prompt tokens are context tokens of which document.

    ``context_positions[j]`` is the position in ``ids`` of context token j, ``context_docs[j]`` its 0-based document,
    ``context_offsets[j]`` its character span in the prompt text.
    """

    ids: tuple[int, ...]
    contextless_ids: tuple[int, ...]
    offsets: tuple[tuple[int, int], ...]
    context_positions: tuple[int, ...]
    context_docs: tuple[int, ...]
    context_offsets: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class TokenizedAnswer:
    """Answer token ids and each token's character span in the answer text."""

    ids: tuple[int, ...]
    offsets: tuple[tuple[int, int], ...]


def _encode(tokenizer: Any, text: str, add_special_tokens: bool) -> tuple[list[int], list[tuple[int, int]]]:
    if not getattr(tokenizer, "is_fast", False):
        raise TokenizerError(
            f"{type(tokenizer).__name__} is a slow tokenizer without offset mappings; load the fast one "
            "(AutoTokenizer.from_pretrained(..., use_fast=True))."
        )
    enc = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]


def tokenize_prompt(tokenizer: Any, prompt: BuiltPrompt) -> TokenizedPrompt:
    """Tokenize both prompts and map each token inside the documents block to the document it overlaps most.

    A token that reaches across the block's edge is not a context token: it is part template text (Gemma's tokenizer
    merges the last document's closing newline with the template's next one into a single ``"\n\n"``), and such a
    separator position can carry the largest saliency of the whole prompt, which would all go to the last document.
    """
    ids, offsets = _encode(tokenizer, prompt.text, prompt.add_special_tokens)
    contextless_ids, _ = _encode(tokenizer, prompt.contextless_text, prompt.add_special_tokens)
    block_start, block_end = prompt.context_span
    positions, docs, spans = [], [], []
    for pos, (start, end) in enumerate(offsets):
        if end <= start:
            continue  # special tokens carry empty offsets
        if start < block_start or end > block_end:
            continue  # outside the documents block, or straddling its edge
        best, best_overlap = -1, 0
        for doc, (d_start, d_end) in enumerate(prompt.doc_spans):
            overlap = min(end, d_end) - max(start, d_start)
            if overlap > best_overlap:
                best, best_overlap = doc, overlap
        if best >= 0:
            positions.append(pos)
            docs.append(best)
            spans.append((start, end))
    return TokenizedPrompt(
        ids=tuple(ids),
        contextless_ids=tuple(contextless_ids),
        offsets=tuple(offsets),
        context_positions=tuple(positions),
        context_docs=tuple(docs),
        context_offsets=tuple(spans),
    )


def tokenize_answer(tokenizer: Any, answer: str) -> TokenizedAnswer:
    """Tokenize an answer on its own (no special tokens), as it follows the prompt."""
    ids, offsets = _encode(tokenizer, answer, add_special_tokens=False)
    return TokenizedAnswer(ids=tuple(ids), offsets=tuple(offsets))

