"""Where a result's documents lie in its prompt and the saliency over them, as the report shows it: each document's
entry, title and text (:func:`doc_regions`, :class:`DocRegion`; the rest is prompt scaffolding), a context cue's
share of its answer token's saliency (:func:`cue_share`), and the stretches of the prompt that carry saliency
(:func:`heat_of`, :class:`Heat`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mirage.attribution.prompts import PromptTemplate, load_template, mark_points, mark_sentences
from mirage.attribution.results import AnswerToken, AttributionResult, ContextCue, SaliencyMatrix
from mirage.config import ConfigError, PromptConfig

__all__ = [
    "DocRegion",
    "Heat",
    "context_mode",
    "cue_share",
    "doc_regions",
    "heat_of",
    "is_scaffolding",
    "stores_shares",
]


def stores_shares(res: AttributionResult) -> bool:
    """Whether the result stores each cue's share (``ContextCue.share``; results written before it do not)."""
    return any(getattr(c, "share", None) is not None for t in res.tokens for c in t.top_context)


def cue_share(token: AnswerToken, cue: ContextCue) -> float:
    """A context cue's saliency as a share of its answer token's total saliency: ``cue.share`` when the result
    stores it; otherwise, for older results, its score over the summed positive scores of the token's stored top
    context tokens (all that is left of the total)."""
    stored = getattr(cue, "share", None)
    if stored is not None:
        return float(stored)
    total = sum(max(0.0, c.score) for c in token.top_context)
    return max(0.0, cue.score) / total if total > 0 else 0.0


def context_mode(res: AttributionResult) -> str:
    """Which context tokens the result was attributed to: ``"content"`` (the documents' titles and texts only) or
    ``"all"`` (the whole documents block, scaffolding included; results older than the option)."""
    mode = (res.config.get("aggregation") or {}).get("context")
    return mode if isinstance(mode, str) else "all"


@dataclass(frozen=True)
class DocRegion:
    """Where 1-based document ``doc``'s entry lies in ``res.prompt`` (character offsets): ``start:end`` from its
    scaffolding (``Document [1](Title: ``) to the next entry, ``title`` and ``text`` the spans of its title (None
    when absent) and of its text as inserted (with the template's sentence marks, ``selfcitation_marked``; cut short
    when the document was truncated), ``kept`` how many characters of the stored text the prompt holds."""

    doc: int
    start: int
    end: int
    title: tuple[int, int] | None
    text: tuple[int, int]
    kept: int

    def is_content(self, start: int, end: int) -> bool:
        """Whether the characters ``start:end`` overlap the document's title or text (else: prompt scaffolding)."""
        return any(a < end and start < b for a, b in [self.text, *([self.title] if self.title else [])])


def _span_in_prompt(prompt: str, text: str, lo: int, hi: int) -> tuple[int, int] | None:
    """Where ``text``, or else its longest prefix (a document cut to fit the window), first lies in
    ``prompt[lo:hi]``."""
    at = prompt.find(text, lo, hi)
    if at >= 0:
        return at, at + len(text)
    if not text or prompt.find(text[:1], lo, hi) < 0:
        return None
    good, bad = 1, len(text)  # prompt holds text[:good] and not text[:bad]
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if prompt.find(text[:mid], lo, hi) >= 0 else (good, mid)
    at = prompt.find(text[:good], lo, hi)
    return at, at + good


def _inserted(prompt: str, text: str, mark: str | None, lo: int, hi: int) -> tuple[tuple[int, int], int] | None:
    """Where a document's ``text`` lies in ``prompt[lo:hi]`` as the prompt holds it, and how many of its characters
    that is: whole, or its kept prefix (a document cut to fit the window); with ``mark`` after each of its sentences
    when the template writes one (:func:`mark_sentences`: a kept prefix is marked again, its last sentence cut)."""
    if mark is None:
        found = _span_in_prompt(prompt, text, lo, hi)
        return None if found is None else (found, found[1] - found[0])
    marked = mark_sentences(text, mark)
    found = _span_in_prompt(prompt, marked, lo, hi)
    if found is None or found[1] - found[0] == len(marked):
        return None if found is None else (found, len(text))
    at, held = found[0], found[1] - found[0]
    kept = held - sum(min(len(mark), max(0, held - p - k * len(mark))) for k, p in enumerate(mark_points(text)))
    for n in range(min(len(text), kept + len(mark)), max(0, kept - len(mark)), -1):  # the cut, marked again
        cut = text[:n].rstrip()
        again = mark_sentences(cut, mark)
        if prompt.startswith(again, at, hi):
            return (at, at + len(again)), len(cut)
    return found, kept


def _template_of(res: AttributionResult) -> PromptTemplate | None:
    """The prompt template ``res`` was built with (``config.prompt``); None when it cannot be loaded any more (a
    template file gone, a config edited by hand)."""
    prompt = res.config.get("prompt") if isinstance(res.config, dict) else None
    try:
        return load_template(PromptConfig(**prompt)) if isinstance(prompt, dict) else None
    except (ConfigError, TypeError):
        return None


def doc_regions(res: AttributionResult) -> list[DocRegion] | None:
    """Each document's entry in the prompt, found from the stored texts: the documents block ``res.context`` in the
    prompt, then each document's text as the prompt template inserted it (with its sentence marks), or its kept
    prefix, in order and its title before it. None when the prompt does not hold them (a result edited by hand)."""
    base = res.prompt.find(res.context) if res.context else -1
    if base < 0:
        return None
    template = _template_of(res)
    stop, cursor, found = base + len(res.context), base, []
    for i, d in enumerate(res.docs, start=1):
        inserted = _inserted(res.prompt, d.get("text", ""), template.mark_of(i) if template else None, cursor, stop)
        if inserted is None:
            return None
        text, kept = inserted
        start = cursor
        while start < text[0] and res.prompt[start].isspace():
            start += 1
        title = d.get("title") or ""
        at = res.prompt.find(title, start, text[0]) if title else -1
        found.append((start, (at, at + len(title)) if at >= 0 else None, text, kept))
        cursor = text[1]
    return [DocRegion(doc=k + 1, start=start, end=found[k + 1][0] if k + 1 < len(found) else stop, title=title,
                      text=text, kept=kept) for k, (start, title, text, kept) in enumerate(found)]


def is_scaffolding(regions: list[DocRegion] | None, doc: int, start: int, end: int) -> bool:
    """Whether prompt characters ``start:end`` of document ``doc`` are scaffolding, not its title or text."""
    if not regions or not 1 <= doc <= len(regions):
        return False
    return not regions[doc - 1].is_content(start, end)


@dataclass(frozen=True)
class Heat:
    """Saliency on a stretch of the prompt: the largest share of an answer token's saliency (0–1), the answer
    tokens it drove, and whether the CCI selector kept it (a stored ``ContextSpan``)."""

    start: int
    end: int
    share: float
    tokens: tuple[int, ...]
    kept: bool = False


def _shares_of_matrix(res: AttributionResult, sal: SaliencyMatrix) -> list[Heat]:
    """Per context token of the stored saliency matrix (``[n_selected, n_context]``), each answer token's share."""
    matrix = sal.to_numpy()
    considered = [bool(c) for c in sal.content] if (sal.content is not None and context_mode(res) == "content") \
        else [True] * len(sal.context_positions)
    out: list[Heat] = []
    for k, answer_index in enumerate(sal.answer_tokens):
        row = [max(0.0, float(v)) if ok else 0.0 for v, ok in zip(matrix[k], considered)]
        total = sum(row)
        if total <= 0:
            continue
        out.extend(Heat(start=a, end=b, share=v / total, tokens=(answer_index,))
                   for v, (a, b) in zip(row, sal.context_offsets) if v > 0 and b > a)
    return out


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """``start:end`` without the whitespace at either end (unchanged when it is all whitespace: a newline token)."""
    a, b = start, end
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return (a, b) if b > a else (start, end)


def heat_of(res: AttributionResult) -> list[Heat]:
    """Every stretch of the prompt that carries saliency: each context token of the stored saliency matrix when
    the result has one, otherwise each answer token's top context tokens; plus the context spans the selector kept."""
    tokens = {t.index: t for t in res.tokens}
    sal = getattr(res, "saliency", None)
    if sal is not None:
        found = _shares_of_matrix(res, sal)
    else:
        found = [Heat(start=c.start, end=c.end, share=cue_share(t, c), tokens=(t.index,))
                 for t in res.tokens for c in t.top_context if c.end > c.start]
    out = [replace(h, start=a, end=b) for h in found for a, b in [_trimmed(res.prompt, h.start, h.end)]]
    for s in res.context_spans:
        inside = [h.share for h in out if h.start < s.end and s.start < h.end]
        if inside:
            share = max(inside)
        else:  # kept, yet below every listed cue of its answer tokens: the weakest listed share bounds its own
            share = max((min(cue_share(tokens[i], c) for c in tokens[i].top_context) for i in s.answer_tokens
                         if i in tokens and tokens[i].top_context), default=0.0)
        out.append(Heat(start=s.start, end=s.end, share=share, tokens=tuple(s.answer_tokens), kept=True))
    return out
