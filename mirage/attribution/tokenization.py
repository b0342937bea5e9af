"""Token views of a prompt and an answer, with character offsets mapping tokens to documents and sentences."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["TokenizedAnswer", "TokenizedPrompt", "encode_chat", "encode_plain", "encode_prompt_text", "encode_text",
           "max_token_chars", "render_chat", "tokenize_answer"]


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


def encode_text(tokenizer: Any, text: str, *, add_special_tokens: bool,
                split_special_tokens: bool = False) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids and character offsets of ``text``; ``split_special_tokens=True`` reads special-token strings in it
    as ordinary text (for user text: answers, documents)."""
    if not getattr(tokenizer, "is_fast", False):
        raise TokenizerError(
            f"{type(tokenizer).__name__} is a slow tokenizer without offset mappings; load the fast one "
            "(AutoTokenizer.from_pretrained(..., use_fast=True))."
        )
    enc = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True,
                    split_special_tokens=split_special_tokens)
    return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]


#: The characters one token is taken to cover at most when a tokenizer does not list its vocabulary.
DEFAULT_MAX_TOKEN_CHARS = 256
_TOKEN_CHARS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def max_token_chars(tokenizer: Any) -> int:
    """The most characters of text one token of ``tokenizer`` covers: the length of its longest vocabulary string
    (a byte-level BPE string holds one character per byte, a SentencePiece one one per character, so no token covers
    more); :data:`DEFAULT_MAX_TOKEN_CHARS` when the tokenizer does not list its vocabulary. ``n`` tokens of text thus
    never span more than ``n * max_token_chars(tokenizer)`` characters: what lets a document be cut by characters,
    safely, before it is tokenized."""
    try:
        return _TOKEN_CHARS[tokenizer]
    except (KeyError, TypeError):
        pass
    try:
        vocab = tokenizer.get_vocab()
        longest = max(map(len, vocab), default=0) if isinstance(vocab, dict) else 0
    except (AttributeError, NotImplementedError, TypeError):
        longest = 0
    longest = max(longest, 1) if longest else DEFAULT_MAX_TOKEN_CHARS
    try:
        _TOKEN_CHARS[tokenizer] = longest
    except TypeError:  # not weakly referable: computed again next time
        pass
    return longest


def special_token_ids(tokenizer: Any) -> frozenset[int]:
    """Ids of the tokenizer's special tokens: those a special-token string in the text is read as (and that
    ``split_special_tokens=True`` reads as text instead)."""
    ids = set(getattr(tokenizer, "all_special_ids", ()) or ())
    ids.update(i for i, tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()
               if getattr(tok, "special", False))
    return frozenset(ids)


def encode_prompt_text(tokenizer: Any, text: str, add_special_tokens: bool,
                       user_spans: Sequence[tuple[int, int]] = ()) -> tuple[list[int], list[tuple[int, int]]]:
    """Ids and offsets of a prompt whose ``user_spans`` are user text: a special-token string there is text.

    The prompt is tokenized whole, as ever; only if a special token found in it overlaps a user span is it
    re-tokenized in segments: the template's own special tokens (those outside every user span) stay, and the text
    between them is tokenized with ``split_special_tokens=True``. The tokenizer itself splits its input at special
    tokens and tokenizes the pieces in between separately, so every token away from the offending strings is as
    in the whole-prompt tokenization. (Tokenizers that prepend a word marker to each separately encoded string,
    Metaspace ``prepend_scheme="first"``, would gain one at the start of each segment; this only ever happens to
    prompts whose user text spells a special token.) Offsets stay in ``text``'s coordinates.
    """
    ids, offsets = encode_text(tokenizer, text, add_special_tokens=add_special_tokens)
    if not user_spans:
        return ids, offsets
    special = special_token_ids(tokenizer)
    template_specials: list[int] = []
    injected = False
    for pos, (tid, (start, end)) in enumerate(zip(ids, offsets)):
        if tid not in special or end <= start:
            continue
        if any(start < u_end and u_start < end for u_start, u_end in user_spans):
            injected = True
        else:
            template_specials.append(pos)
    if not injected:
        return ids, offsets
    # Special tokens the post-processor adds (BOS, EOS) carry empty offsets at either end.
    head = 0
    while head < len(ids) and ids[head] in special and offsets[head][1] <= offsets[head][0]:
        head += 1
    tail = len(ids)
    while tail > head and ids[tail - 1] in special and offsets[tail - 1][1] <= offsets[tail - 1][0]:
        tail -= 1
    out_ids, out_offsets = ids[:head], offsets[:head]

    def segment(start: int, end: int) -> None:
        if end > start:
            seg_ids, seg_offsets = encode_text(tokenizer, text[start:end], add_special_tokens=False,
                                               split_special_tokens=True)
            out_ids.extend(seg_ids)
            out_offsets.extend((start + a, start + b) for a, b in seg_offsets)

    done = 0
    for pos in template_specials:
        start, end = offsets[pos]
        segment(done, start)
        out_ids.append(ids[pos])
        out_offsets.append((start, end))
        done = end
    segment(done, len(text))
    return out_ids + ids[tail:], out_offsets + offsets[tail:]


def tokenize_answer(tokenizer: Any, answer: str) -> TokenizedAnswer:
    """Tokenize an answer on its own (no special tokens added), as it follows the prompt. The answer is text: a
    special-token string in it (``<|im_end|>``) is read as text, never as the special token."""
    ids, offsets = encode_text(tokenizer, answer, add_special_tokens=False, split_special_tokens=True)
    return TokenizedAnswer(ids=tuple(ids), offsets=tuple(offsets))



def render_chat(tokenizer: Any, messages: Sequence[dict[str, str]]) -> tuple[str, list[tuple[int, int] | None]]:
    """The chat rendered as text by the tokenizer's template (generation prompt added), and where each message's
    content lies in it: its exact text, else its stripped text (a template may strip it), searched after the previous
    message; None where the template altered it. The one place mirage renders a chat."""
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    spans: list[tuple[int, int] | None] = []
    pos = 0
    for message in messages:
        span = None
        for content in dict.fromkeys((message["content"], message["content"].strip())):
            at = text.find(content, pos) if content else -1
            if at >= 0:
                span = (at, at + len(content))
                pos = span[1]
                break
        spans.append(span)
    return text, spans


def encode_chat(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """Ids of a chat rendered by the tokenizer's template (generation prompt added), each message's content read
    as text: a special-token string a user wrote never becomes a turn boundary."""
    text, spans = render_chat(tokenizer, messages)
    return encode_prompt_text(tokenizer, text, False, [span for span in spans if span is not None])[0]


def encode_plain(tokenizer: Any, text: str) -> list[int]:
    """Ids of a prompt without a chat template, all of it user text (the tokenizer's BOS/EOS still added)."""
    return encode_text(tokenizer, text, add_special_tokens=True, split_special_tokens=True)[0]
