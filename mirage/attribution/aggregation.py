"""Aggregation: context tokens to documents, answer tokens to sentences, sentence citations and word-level spans."""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mirage.attribution.cci import CCIScores, select_context
from mirage.attribution.citations import ParsedAnswer
from mirage.attribution.cti import CTIScores
from mirage.attribution.results import (
    AnswerSpan,
    AnswerToken,
    ContextCue,
    ContextSpan,
    SaliencyMatrix,
    SentenceAttribution,
    summed_shares,
)
from mirage.attribution.sentences import sentence_index
from mirage.attribution.tokenization import TokenizedAnswer, TokenizedPrompt
from mirage.config import AggregationConfig, CCIConfig

__all__ = ["aggregate", "answer_spans", "cite_sentences", "cite_token", "content_mask", "doc_scores", "rank_documents",
           "saliency_matrix", "sentence_of_token", "tokens_by_sentence"]


@dataclass(frozen=True)
class TokenCitation:
    """For one context-sensitive answer token: the kept context tokens and each document's weight (share of the
    kept saliency), documents strongest first; ``doc_saliency``: each document's raw kept saliency (summed), in the
    same order."""

    kept: tuple[int, ...]
    doc_weights: tuple[tuple[int, float], ...]
    doc_saliency: tuple[tuple[int, float], ...] = ()


def cite_token(scores: Sequence[float], context_docs: Sequence[int], cfg: CCIConfig) -> TokenCitation:
    """Keep context tokens by the CCI selector and weigh documents (0-based) by their share of kept saliency."""
    kept = select_context(scores, cfg)
    total = sum(max(0.0, scores[j]) for j in kept) or 1.0
    raw: dict[int, float] = {}
    for j in kept:
        raw[context_docs[j]] = raw.get(context_docs[j], 0.0) + max(0.0, scores[j])
    ordered = sorted(raw.items(), key=lambda kv: (-kv[1], kv[0]))
    return TokenCitation(kept=tuple(kept), doc_weights=tuple((d, v / total) for d, v in ordered),
                         doc_saliency=tuple(ordered))


def doc_scores(scores: Sequence[float], context_docs: Sequence[int], n_docs: int) -> list[float]:
    """Per document, the largest saliency on one of its tokens over the largest on any context token."""
    top = max(scores, default=0.0) or 1.0
    out = [0.0] * n_docs
    for score, doc in zip(scores, context_docs):
        out[doc] = max(out[doc], score / top)
    return out


def rank_documents(citations: Sequence[TokenCitation], max_citations: int, ranking: str = "shares") -> list[int]:
    """Union of the documents (1-based) cited by tokens, strongest first, at most ``max_citations``. Strength
    (``aggregation.ranking``): ``shares``, the tokens' per-document shares summed; ``saliency``, their raw kept
    saliency summed (the authors' ELI5 script: a token with more saliency counts for more)."""
    strength: dict[int, float] = {}
    for cit in citations:
        for doc, weight in (cit.doc_saliency if ranking == "saliency" else cit.doc_weights):
            strength[doc] = strength.get(doc, 0.0) + weight
    ranked = sorted(strength.items(), key=lambda kv: (-kv[1], kv[0]))
    return [doc + 1 for doc, _ in ranked[:max_citations]]


def content_mask(tokenized: TokenizedPrompt, user_spans: Sequence[tuple[int, int]]) -> tuple[bool, ...]:
    """Per context token, whether it is document content: whether its characters overlap user text
    (``BuiltPrompt.user_spans``, which inside the documents block are the documents' titles and texts) rather than
    lying wholly in the prompt's scaffolding (``Document``, ``[1]``, ``](``, ``Title:``)."""
    merged: list[list[int]] = []  # sorted, overlaps merged: ends increase with starts
    for s, e in sorted(user_spans):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        elif e > s:
            merged.append([s, e])
    starts = [s for s, _ in merged]
    mask = []
    for start, end in tokenized.context_offsets:
        k = bisect.bisect_left(starts, end) - 1  # the last span starting before the token ends
        mask.append(end > start and k >= 0 and merged[k][1] > start)
    return tuple(mask)


def content_view(tokenized: TokenizedPrompt, cci: CCIScores, content: Sequence[bool]) -> tuple[TokenizedPrompt,
                                                                                                CCIScores]:
    """The prompt's context tokens and the CCI scores restricted to the content tokens (``content[j]`` true), for
    ``aggregation.context="content"``: ``[n_selected, n_content]``."""
    if len(content) != len(tokenized.context_positions):
        raise ValueError(f"content mask of {len(content)} entries for {len(tokenized.context_positions)} context "
                         "tokens.")
    keep = [j for j, c in enumerate(content) if c]
    restricted = dataclasses.replace(
        tokenized, context_positions=tuple(tokenized.context_positions[j] for j in keep),
        context_docs=tuple(tokenized.context_docs[j] for j in keep),
        context_offsets=tuple(tokenized.context_offsets[j] for j in keep))
    return restricted, dataclasses.replace(cci, scores=tuple(tuple(row[j] for j in keep) for row in cci.scores))


def saliency_matrix(tokenized: TokenizedPrompt, cci: CCIScores, content: Sequence[bool] | None = None,
                    ) -> SaliencyMatrix:
    """The whole CCI saliency ``[n_selected, n_context]`` over every context token, stored compactly (what
    ``aggregation.keep_saliency`` puts in the result)."""
    return SaliencyMatrix.encode(cci.scores, answer_tokens=cci.selected, context_positions=tokenized.context_positions,
                                 context_docs=tokenized.context_docs, context_offsets=tokenized.context_offsets,
                                 content=content)


def _widen(text: str, start: int, end: int) -> tuple[int, int]:
    """Trim whitespace off a character span, then widen it to whole words."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end <= start:
        return start, start
    while start > 0 and text[start - 1].isalnum():
        start -= 1
    while end < len(text) and text[end].isalnum():
        end += 1
    return start, end


def answer_spans(answer: str, tokens: Sequence[AnswerToken]) -> list[AnswerSpan]:
    """Merge consecutive context-sensitive tokens citing the same documents into word-level spans."""
    spans: list[AnswerSpan] = []
    for tok in tokens:
        if not tok.cited_docs:
            continue
        start, end = _widen(answer, tok.start, tok.end)
        if end <= start:
            continue
        prev = spans[-1] if spans else None
        if prev and prev.docs == tok.cited_docs and (prev.tokens[-1] == tok.index - 1 or start <= prev.end):
            prev.end = max(prev.end, end)
            prev.tokens.append(tok.index)
            prev.text = answer[prev.start : prev.end]
        else:
            spans.append(AnswerSpan(start=start, end=end, text=answer[start:end], docs=list(tok.cited_docs),
                                    tokens=[tok.index]))
    return spans


def context_spans(
    prompt_text: str,
    tokenized: TokenizedPrompt,
    kept_by_token: dict[int, TokenCitation],
    cci: CCIScores,
) -> list[ContextSpan]:
    """Merge consecutive kept context tokens of the same document into word-level spans of the prompt."""
    owners: dict[int, set[int]] = {}
    best: dict[int, float] = {}
    for k, answer_index in enumerate(cci.selected):
        cit = kept_by_token.get(answer_index)
        if cit is None:
            continue
        for j in cit.kept:
            owners.setdefault(j, set()).add(answer_index)
            best[j] = max(best.get(j, 0.0), cci.scores[k][j])
    spans: list[ContextSpan] = []
    prev_j = -2
    for j in sorted(owners):
        doc = tokenized.context_docs[j] + 1
        start, end = _widen(prompt_text, *tokenized.context_offsets[j])
        prev = spans[-1] if spans else None
        if prev and prev.doc == doc and (start <= prev.end or prev_j == j - 1):
            prev.end = max(prev.end, end)
            prev.text = prompt_text[prev.start : prev.end]
            prev.score = max(prev.score, best[j])
            prev.answer_tokens = sorted(set(prev.answer_tokens) | owners[j])
        elif end > start:
            spans.append(ContextSpan(doc=doc, start=start, end=end, text=prompt_text[start:end], score=best[j],
                                     answer_tokens=sorted(owners[j])))
        prev_j = j
    return spans


def sentence_of_token(text: str, start: int, sentences: Sequence[tuple[int, int]]) -> int | None:
    """The sentence an answer token starting at character ``start`` belongs to (None when there are no sentences).

    The one rule every caller uses: the sentence holding the first non-space character of ``text`` at or after
    ``start`` (past the last sentence, the last one). A whitespace-only token goes with the text that follows it; a
    token straddling a sentence boundary goes with the sentence its first visible character is in.
    """
    if not sentences:
        return None
    while start < len(text) and text[start].isspace():
        start += 1
    return sentence_index(list(sentences), start)


def tokens_by_sentence(text: str, sentences: Sequence[tuple[int, int]], token_starts: Sequence[int],
                       indices: Sequence[int]) -> list[list[int]]:
    """Per sentence, the answer tokens among ``indices`` that :func:`sentence_of_token` puts in it
    (``token_starts[i]``: token i's first character in ``text``), in the order given."""
    per_sentence: list[list[int]] = [[] for _ in sentences]
    for i in indices:
        s = sentence_of_token(text, token_starts[i], sentences)
        if s is not None:
            per_sentence[s].append(i)
    return per_sentence


def cite_sentences(
    text: str,
    sentences: Sequence[tuple[int, int]],
    token_starts: Sequence[int],
    citations: Mapping[int, TokenCitation],
    max_citations: int,
    ranking: str = "shares",
) -> list[list[int]]:
    """Per sentence, the documents (1-based) it cites: :func:`rank_documents` over the citations of the
    context-sensitive tokens :func:`sentence_of_token` puts in it (``citations[i]`` is answer token i's citation,
    ``token_starts[i]`` its first character in ``text``), strongest first (by ``ranking``), at most
    ``max_citations``."""
    return [rank_documents([citations[i] for i in members], max_citations, ranking)
            for members in tokens_by_sentence(text, sentences, token_starts, list(citations))]


def _top_context(scores: Sequence[float], prompt_text: str, tokenized: TokenizedPrompt, n: int) -> list[ContextCue]:
    """The ``n`` most salient context tokens of one answer token, strongest first, each with its share of the
    token's total positive saliency over these context tokens."""
    top = sorted(range(len(scores)), key=lambda j: -scores[j])[:n]
    total = sum(max(0.0, float(v)) for v in scores)
    return [
        ContextCue(token=prompt_text[slice(*tokenized.context_offsets[j])], doc=tokenized.context_docs[j] + 1,
                   start=tokenized.context_offsets[j][0], end=tokenized.context_offsets[j][1], score=float(scores[j]),
                   share=max(0.0, float(scores[j])) / total if total > 0 else 0.0)
        for j in top
    ]


def _annotate_tokens(
    *,
    tokenizer,
    text: str,
    prompt_text: str,
    tokenized: TokenizedPrompt,
    answer: TokenizedAnswer,
    n_docs: int,
    cti: CTIScores,
    cci: CCIScores,
    cci_cfg: CCIConfig,
    top_context_tokens: int,
) -> tuple[list[AnswerToken], dict[int, TokenCitation]]:
    """One :class:`AnswerToken` per answer token with its CTI score; the CCI-scored ones also with their contrast
    token, cited documents, document scores and top context tokens. Returns the tokens and, per CCI-scored token
    index (in answer order), its :class:`TokenCitation`."""
    selected = set(cti.selected)
    cci_row = {i: k for k, i in enumerate(cci.selected)}
    by_token: dict[int, TokenCitation] = {}
    tokens: list[AnswerToken] = []
    for i, tok_id in enumerate(answer.ids):
        start, end = answer.offsets[i]
        tok = AnswerToken(index=i, text=text[start:end] or tokenizer.decode([tok_id]), start=start, end=end,
                          cti=float(cti.scores[i]), context_sensitive=i in selected,
                          prob=float(cti.probs[i]) if cti.probs else None)
        if i in cci_row:
            k = cci_row[i]
            scores = cci.scores[k]
            cit = cite_token(scores, tokenized.context_docs, cci_cfg)
            by_token[i] = cit
            contrast = cci.contrast_ids[k]
            tok.contrast_token = tokenizer.decode([contrast]) if contrast is not None else tokenizer.decode([tok_id])
            tok.cited_docs = [d + 1 for d, _ in cit.doc_weights]
            tok.doc_scores = doc_scores(scores, tokenized.context_docs, n_docs)
            tok.doc_shares = [0.0] * n_docs
            for d, weight in cit.doc_weights:
                tok.doc_shares[d] = weight
            tok.top_context = _top_context(scores, prompt_text, tokenized, top_context_tokens)
        tokens.append(tok)
    return tokens, by_token


def aggregate(
    *,
    tokenizer,
    prompt_text: str,
    tokenized: TokenizedPrompt,
    answer: TokenizedAnswer,
    parsed: ParsedAnswer,
    n_docs: int,
    cti: CTIScores,
    cci: CCIScores,
    cci_cfg: CCIConfig,
    cfg: AggregationConfig,
    content: Sequence[bool] | None = None,
) -> tuple[list[SentenceAttribution], list[AnswerToken], list[AnswerSpan], list[ContextSpan]]:
    """Turn token-level CTI/CCI scores into sentence citations, annotated tokens and display spans.

    ``content``: per context token, whether it is document content (:func:`content_mask`); with
    ``cfg.context="content"`` (which needs it) attribution considers those context tokens only.
    """
    text = parsed.text
    if cfg.context == "content":
        if content is None:
            raise ValueError("aggregation.context='content' needs the content mask of the context tokens "
                             "(aggregation.content_mask(tokenized, prompt.user_spans)).")
        tokenized, cci = content_view(tokenized, cci, content)
    tokens, by_token = _annotate_tokens(tokenizer=tokenizer, text=text, prompt_text=prompt_text, tokenized=tokenized,
                                        answer=answer, n_docs=n_docs, cti=cti, cci=cci, cci_cfg=cci_cfg,
                                        top_context_tokens=cfg.top_context_tokens)
    members = tokens_by_sentence(text, parsed.sentences, [start for start, _ in answer.offsets], list(by_token))
    sentences = [
        SentenceAttribution(
            index=s,
            text=text[a:b],
            start=a,
            end=b,
            mirage_citations=rank_documents([by_token[i] for i in members[s]], cfg.max_citations, cfg.ranking),
            self_citations=list(parsed.citations[s]),
            invalid_self_citations=list(parsed.invalid[s]),
            doc_scores=summed_shares([tokens[i] for i in members[s]], n_docs),
        )
        for s, (a, b) in enumerate(parsed.sentences)
    ]
    return sentences, tokens, answer_spans(text, tokens), context_spans(prompt_text, tokenized, by_token, cci)
