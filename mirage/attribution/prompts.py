"""RAG prompts built from YAML templates, recording each document's character span as the prompt is built."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from mirage.attribution.sentences import split_sentences
from mirage.attribution.tokenization import (
    TokenizedPrompt,
    encode_prompt_text,
    encode_text,
    max_token_chars,
    render_chat,
)
from mirage.config import ConfigError, PromptConfig, read_yaml
from mirage.data.inputs import Document, InputError, RAGItem, short_repr

__all__ = ["BuiltPrompt", "PreparedItem", "PromptTemplate", "Reservation", "Span", "available_prompts", "build_prompt",
           "count_tokens", "format_prompt", "load_template", "mark_points", "mark_sentences", "tokenize_prompt"]

PROMPTS_DIR = Path(__file__).parents[1] / "configs" / "prompts"


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt template: ``template`` uses {INST}, {Q}, {D}; ``doc_template`` uses {ID}, {T}, {P};
    ``untitled_doc_template`` (optional, {ID}, {P}) renders a document whose title is empty, so that it does not
    read ``Document [1](Title: ): …``; ``sentence_mark`` (optional, {ID}) is written after each sentence of a
    document's text (`` [{ID}]``: its number beside every sentence, so that a model citing what it copied
    has the number at hand)."""

    name: str
    instruction: str
    template: str
    contextless_template: str
    doc_template: str
    untitled_doc_template: str | None = None
    sentence_mark: str | None = None

    def __post_init__(self) -> None:
        for field, needed in (("template", ("{Q}", "{D}")), ("contextless_template", ("{Q}",)),
                              ("doc_template", ("{P}",)), ("untitled_doc_template", ("{P}",)),
                              ("sentence_mark", ("{ID}",))):
            for placeholder in needed:
                if getattr(self, field) is not None and placeholder not in getattr(self, field):
                    raise ConfigError(f"prompt template {short_repr(self.name)}: {field} must contain {placeholder}.")
        if "{D}" in self.contextless_template:
            raise ConfigError(f"prompt template {short_repr(self.name)}: contextless_template must not contain {{D}}.")

    def mark_of(self, doc_id: int) -> str | None:
        """Document ``doc_id``'s sentence mark (``sentence_mark`` filled in), or None when the template has none."""
        return None if self.sentence_mark is None else _fill(self.sentence_mark, {"ID": str(doc_id)})[0]

    def identity(self) -> dict[str, Any]:
        """The template's fields as a run's fingerprint records them: a field added after runs were stored
        (``sentence_mark``) is left out while unset, so those runs' fingerprints still match."""
        data = dataclasses.asdict(self)
        return {k: v for k, v in data.items() if not (k in _ADDED_FIELDS and v is None)}


#: Template fields added after runs were fingerprinted with the others (:meth:`PromptTemplate.identity`).
_ADDED_FIELDS = frozenset({"sentence_mark"})


@dataclass(frozen=True)
class BuiltPrompt:
    """A prompt with and without documents, and where each document sits in ``text``.

    ``doc_spans[i]`` is the ``(start, end)`` character span of document i (its whole rendered entry) in ``text``;
    ``context_span`` is the span of the documents block ``context``. ``user_spans`` (in ``text``) and
    ``contextless_user_spans`` (in ``contextless_text``) are the spans of user-supplied text (question, each
    document's title and text, system message), which is tokenized as text even where it spells a special token.
    """

    text: str
    contextless_text: str
    context: str
    context_span: tuple[int, int]
    doc_spans: tuple[tuple[int, int], ...]
    add_special_tokens: bool
    truncated_docs: tuple[int, ...] = ()
    user_spans: tuple[tuple[int, int], ...] = ()
    contextless_user_spans: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Reservation:
    """The part of the model's ``window`` kept from the prompt: ``tokens`` for the given answer (``field``
    ``"output"``) or for generation (``"generation.max_new_tokens"``). It names what to blame when the prompt
    cannot fit in what is left."""

    window: int
    tokens: int
    field: str = "output"

    @property
    def max_prompt_tokens(self) -> int:
        return self.window - self.tokens

    def error(self, needed: int, item: int | str | None) -> InputError:
        if self.field == "output":
            return InputError(
                f"the given answer takes {self.tokens} tokens, leaving {max(0, self.max_prompt_tokens)} of the "
                f"model's {self.window}-token window for the prompt, which needs at least {needed} even with "
                "documents truncated; shorten the answer.", item=item, field="output")
        return InputError(
            f"{self.field}={self.tokens} leaves no room in the model's {self.window}-token window for the prompt "
            f"(at least {needed} tokens even with documents truncated); lower --max-new-tokens.",
            item=item, field=self.field)


@cache
def _load_template_file(path: str) -> PromptTemplate:
    if not Path(path).exists():
        raise ConfigError(f"prompt template file {path} does not exist.")
    data = read_yaml(path, name=f"prompt template file {path}")
    keys = {"name", "instruction", "template", "contextless_template", "doc_template"}
    if not isinstance(data, dict):
        raise ConfigError(f"prompt template file {path} must be a mapping with {', '.join(sorted(keys))}.")
    missing = keys - set(data)
    if missing:
        raise ConfigError(f"prompt template file {path} lacks {sorted(missing)}.")
    optional_keys = ("untitled_doc_template", "sentence_mark")
    wrong = sorted(k for k in (*keys, *optional_keys) if data.get(k) is not None and not isinstance(data[k], str))
    if wrong:
        raise ConfigError(f"prompt template file {path}: {', '.join(wrong)} must be text.")
    optional = {k: data[k] for k in optional_keys if data.get(k) is not None}
    return PromptTemplate(**{k: data[k] for k in keys}, **optional)


def available_prompts() -> list[str]:
    """Names of the prompt templates in ``configs/prompts``."""
    return sorted(p.stem for p in PROMPTS_DIR.glob("*.yaml"))


def load_template(cfg: PromptConfig, *, name_field: str = "prompt.name") -> PromptTemplate:
    """The template named by ``cfg.name`` (or the file ``cfg.path``). A ConfigError names the field at fault
    (``prompt.path``, or ``name_field``: how the name was given, e.g. ``--prompt``) and the known prompts."""
    known = available_prompts()
    if cfg.path:
        try:
            return _load_template_file(str(Path(cfg.path).resolve()))
        except ConfigError as err:
            raise ConfigError(f"prompt.path={short_repr(cfg.path)}: {err} Fix the file, or leave prompt.path out "
                              f"and choose a prompt by name: {', '.join(known)}.") from None
    if cfg.name not in known:  # a name, never a path: configs/prompts holds the named ones
        given = f"{name_field} {short_repr(cfg.name)}" if name_field.startswith("-") else \
            f"{name_field}={short_repr(cfg.name)}"
        raise ConfigError(f"{given} is unknown; choose one of {', '.join(known)}, or give a template file as "
                          "prompt.path.")
    return _load_template_file(str(PROMPTS_DIR / f"{cfg.name}.yaml"))


#: A character range ``(start, end)`` of a text, end exclusive.
Span = tuple[int, int]


def _fill_spans(template: str, values: dict[str, str]) -> tuple[str, list[tuple[str, int, int]]]:
    """Replace {KEY} placeholders (no other brace handling) and return each replacement's key and span."""
    out: list[str] = []
    found: list[tuple[str, int, int]] = []
    i = pos = 0
    while i < len(template):
        if template[i] == "{":
            close = template.find("}", i)
            key = template[i + 1 : close] if close != -1 else ""
            if key in values:
                found.append((key, pos, pos + len(values[key])))
                out.append(values[key])
                pos += len(values[key])
                i = close + 1
                continue
        out.append(template[i])
        pos += 1
        i += 1
    return "".join(out), found


def _fill(template: str, values: dict[str, str]) -> tuple[str, dict[str, int]]:
    """Replace {KEY} placeholders (no other brace handling) and return where each value starts."""
    text, found = _fill_spans(template, values)
    return text, {key: start for key, start, _ in found}


def _render_documents(template: PromptTemplate,
                      docs: tuple[Document, ...]) -> tuple[str, list[Span], list[Span]]:
    """The documents block, each document's span inside it, and the spans of the titles and texts."""
    parts: list[str] = []
    spans: list[Span] = []
    user: list[Span] = []
    pos = 0
    for i, doc in enumerate(docs, start=1):
        form = template.untitled_doc_template if not doc.title and template.untitled_doc_template else \
            template.doc_template
        mark = template.mark_of(i)
        text = doc.text if mark is None else mark_sentences(doc.text, mark)
        entry, found = _fill_spans(form, {"ID": str(i), "T": doc.title, "P": text})
        parts.append(entry)
        spans.append((pos, pos + len(entry)))
        user.extend((pos + s, pos + e) for key, s, e in found if key in ("T", "P"))
        pos += len(entry)
    return "".join(parts), spans, user


def mark_sentences(text: str, mark: str) -> str:
    """``text`` with ``mark`` written at the end of each of its sentences (:func:`split_sentences`), before the
    sentence's closing punctuation where it has one, as a cited answer places it (``… in 1986 [4].``)."""
    out, last = [], 0
    for close in mark_points(text):
        out += [text[last:close], mark]
        last = close
    return "".join(out) + text[last:]


def mark_points(text: str) -> list[int]:
    """Where :func:`mark_sentences` writes its marks: per sentence of ``text``, the offset its mark goes before."""
    points = []
    for start, end in split_sentences(text):
        close = end
        while close > start and text[close - 1] in _CLOSING:
            close -= 1
        if close == start or not any(c in _TERMINAL for c in text[close:end]):  # no closing stop: the mark at the end
            close = end
        points.append(close)
    return points


#: A sentence's closing stops, and the quotes that may follow them: a sentence mark goes before them.
_TERMINAL = frozenset(".!?…。！？")
_CLOSING = _TERMINAL | frozenset("\"'»”’")


def render_documents(template: PromptTemplate, docs: tuple[Document, ...]) -> tuple[str, list[tuple[int, int]]]:
    """The documents block and each document's span inside it (1-based ids in the text)."""
    block, spans, _ = _render_documents(template, docs)
    return block, spans


def _apply_chat(tokenizer: Any, content: str, system: str | None) -> tuple[str, int, Span | None]:
    """The chat-wrapped prompt, where ``content`` starts in it, and the system message's span (if it is found)."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
    rendered, spans = render_chat(tokenizer, messages)
    system_span = spans[0] if system else None
    found = spans[-1]
    offset = found[0] if found is not None and found[1] - found[0] == len(content) else -1
    if offset < 0:  # the content's exact text, before the system message if the template puts it there
        offset, system_span = rendered.find(content), None
    if offset < 0:
        raise ConfigError("the tokenizer's chat template alters the message text; set prompt.chat_template=false.")
    return rendered, offset, system_span


def _normal_spans(spans: Any) -> tuple[Span, ...]:
    """Non-empty spans, sorted, overlapping ones merged."""
    out: list[list[int]] = []
    for s, e in sorted(sp for sp in spans if sp[1] > sp[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return tuple((s, e) for s, e in out)


def format_prompt(
    template: PromptTemplate,
    question: str,
    docs: tuple[Document, ...],
    *,
    tokenizer: Any = None,
    use_chat_template: bool = False,
    system: str | None = None,
) -> BuiltPrompt:
    """Build the with- and without-documents prompts, recording document spans and user-text spans."""
    block, spans, doc_user = _render_documents(template, docs)
    values = {"INST": template.instruction, "Q": question}
    content, found = _fill_spans(template.template, {**values, "D": block})
    contextless, found_nc = _fill_spans(template.contextless_template, values)
    d_start = [s for key, s, _ in found if key == "D"][-1]
    user = [(s, e) for key, s, e in found if key == "Q"]
    user += [(d + s, d + e) for key, d, _ in found if key == "D" for s, e in doc_user]
    user_nc = [(s, e) for key, s, e in found_nc if key == "Q"]
    offset = offset_nc = 0
    if use_chat_template:
        content, offset, system_span = _apply_chat(tokenizer, content, system)
        contextless, offset_nc, system_span_nc = _apply_chat(tokenizer, contextless, system)
    base = offset + d_start
    user = [(offset + s, offset + e) for s, e in user]
    user_nc = [(offset_nc + s, offset_nc + e) for s, e in user_nc]
    if use_chat_template:
        user += [system_span] if system_span else []
        user_nc += [system_span_nc] if system_span_nc else []
    return BuiltPrompt(
        text=content,
        contextless_text=contextless,
        context=block,
        context_span=(base, base + len(block)),
        doc_spans=tuple((base + s, base + e) for s, e in spans),
        add_special_tokens=not use_chat_template,
        user_spans=_normal_spans(user),
        contextless_user_spans=_normal_spans(user_nc),
    )


def count_tokens(tokenizer: Any, text: str, add_special_tokens: bool, user_spans: tuple[Span, ...] = ()) -> int:
    """Tokens of ``text`` as :func:`tokenize_prompt` counts them (``user_spans`` as text)."""
    if not getattr(tokenizer, "is_fast", False):
        return len(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])
    return len(encode_prompt_text(tokenizer, text, add_special_tokens, user_spans)[0])


#: A cut is moved back to a whitespace found within this many tokens before it.
_BACKOFF_TOKENS = 6


def _cut_point(text: str, offsets: list[Span], keep: int) -> int:
    """Where to cut ``text`` to keep about its first ``keep`` tokens (at least one character): at the start of the
    first dropped token, moved back to a whitespace within the last few kept tokens when there is one."""
    if keep >= len(offsets):
        return len(text)
    first_end = max(1, offsets[0][1])
    cut = max(first_end, offsets[keep][0])
    if cut >= len(text):
        return len(text)
    if text[cut].isspace() or text[cut - 1].isspace():
        return cut
    lo = max(first_end, offsets[max(1, keep - _BACKOFF_TOKENS)][0])
    for at in range(cut - 1, lo - 1, -1):
        if text[at].isspace():
            return at
    return cut


def _shorten(text: str, offsets: list[Span], keep: int) -> str:
    cut = _cut_point(text, offsets, keep)
    return text[:cut].rstrip() or text[:cut]


def _caps(lengths: list[int], excess: int) -> list[int]:
    """Per-document token caps that cut at least ``excess`` tokens from the longest documents only, as few as
    possible (never below one token): lower the longest to a common level, the last ones at that level one more."""
    def cut(cap: int) -> int:
        return sum(max(0, n - cap) for n in lengths)

    if cut(1) <= excess:
        return [min(n, 1) for n in lengths]
    lo, hi = 1, max(lengths)  # cut(lo) > excess >= cut(hi): find the highest cap still cutting enough
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if cut(mid) >= excess else (lo, mid)
    level = lo + 1
    caps = [min(n, level) for n in lengths]  # cuts fewer than excess ...
    short = excess - sum(n - c for n, c in zip(lengths, caps))
    for i in sorted((i for i, n in enumerate(lengths) if n >= level), key=lambda i: (-lengths[i], -i)):
        if short <= 0:
            break
        caps[i], short = level - 1, short - 1  # ... and these one more each
    return caps


def build_prompt(
    template: PromptTemplate,
    question: str,
    docs: tuple[Document, ...],
    *,
    tokenizer: Any,
    use_chat_template: bool,
    system: str | None = None,
    max_tokens: int | None = None,
    item: int | str | None = None,
    reservation: Reservation | None = None,
) -> BuiltPrompt:
    """Build the prompt; if it exceeds ``max_tokens``, shorten the longest documents (in tokens) with a warning.

    ``max_tokens`` defaults to what ``reservation`` leaves of the model's window. The truncation keeps every
    document (so document ids stay as given) and cuts whole tokens from the end of the longest ones, only as many
    as must go, at a nearby whitespace where there is one; ``truncated_docs`` lists the documents it shortened. If
    even one token per document does not fit, raises InputError naming the question (the question and template
    alone fill the window) or the reservation's field (the answer or ``max_new_tokens`` takes the room).
    """
    if max_tokens is None and reservation is not None:
        max_tokens = reservation.max_prompt_tokens
    precut: tuple[int, ...] = ()
    if max_tokens is not None:
        docs, precut = _cut_by_characters(docs, max_tokens, tokenizer)
        if len(question) > _character_bound(max_tokens, tokenizer):  # it cannot fit: refused before tokenizing it
            raise InputError(f"is {len(question)} characters long, more than {max_tokens} tokens of the model's window "
                             "can hold (a question is never truncated); shorten the question.", item=item,
                             field="question")
    built = format_prompt(template, question, docs, tokenizer=tokenizer, use_chat_template=use_chat_template,
                          system=system)
    if max_tokens is None:
        return built
    n_tokens = count_tokens(tokenizer, built.text, built.add_special_tokens, built.user_spans)
    if n_tokens <= max_tokens and not precut:
        return built
    built = _fit_documents(template, question, docs, n_tokens, max_tokens, tokenizer=tokenizer,
                           use_chat_template=use_chat_template, system=system, item=item, reservation=reservation)
    if precut:
        built = BuiltPrompt(**{**built.__dict__, "truncated_docs": tuple(sorted({*built.truncated_docs, *precut}))})
    warnings.warn(
        f"item {item}: prompt exceeded the model's window; truncated document(s) "
        f"{list(built.truncated_docs)} to fit {max_tokens} tokens.", stacklevel=2)
    return built


#: Tokens kept beyond the budget when a document is first cut by characters: the cut in tokens that follows never
#: looks past them (it keeps at most the budget and backs off by at most ``_BACKOFF_TOKENS``), so it lands where it
#: would in the whole document.
_CHARACTER_CUT_MARGIN = 64


def _character_bound(max_tokens: int, tokenizer: Any) -> int:
    """Characters that surely hold more than ``max_tokens`` tokens (and the cut's margin) of any text."""
    return (max(max_tokens, 0) + _CHARACTER_CUT_MARGIN) * max_token_chars(tokenizer)


def _cut_by_characters(docs: tuple[Document, ...], max_tokens: int, tokenizer: Any
                       ) -> tuple[tuple[Document, ...], tuple[int, ...]]:
    """``docs`` with each text longer than the budget can ever hold cut, by characters, before anything tokenizes
    it (a 50 MB document tokenized whole takes gigabytes): ``max_tokens`` tokens never span more than
    ``max_tokens * max_token_chars`` characters, so what is cut could never have been kept, and the cut in tokens
    that follows keeps what it would have kept from the whole text. Returns the documents and the 1-based ids of
    those cut."""
    limit = _character_bound(max_tokens, tokenizer)
    cut = tuple(i for i, d in enumerate(docs, start=1) if len(d.text) > limit)
    if not cut:
        return docs, ()
    return tuple(Document(title=d.title, text=d.text[:limit]) if len(d.text) > limit else d for d in docs), cut


def _fit_documents(template: PromptTemplate, question: str, docs: tuple[Document, ...], n_tokens: int,
                   max_tokens: int, *, tokenizer: Any, use_chat_template: bool, system: str | None,
                   item: int | str | None, reservation: Reservation | None) -> BuiltPrompt:
    """The prompt of ``n_tokens`` tokens cut to ``max_tokens`` by shortening the longest documents (whole tokens
    from their ends), with ``truncated_docs`` set; InputError when one token per document does not fit."""

    def build(texts: list[str]) -> tuple[BuiltPrompt, int]:
        shortened = tuple(Document(title=d.title, text=t) for d, t in zip(docs, texts))
        b = format_prompt(template, question, shortened, tokenizer=tokenizer, use_chat_template=use_chat_template,
                          system=system)
        return b, count_tokens(tokenizer, b.text, b.add_special_tokens, b.user_spans)

    def doc_offsets(text: str) -> list[Span]:
        return encode_text(tokenizer, text, add_special_tokens=False, split_special_tokens=True)[1]

    originals = [d.text for d in docs]
    offsets = [doc_offsets(t) for t in originals]
    smallest = [_shorten(t, o, 1) for t, o in zip(originals, offsets)]
    minimal, n_minimal = build(smallest)
    if n_minimal > max_tokens:
        raise _overflow_error(template, question, n_minimal, max_tokens, reservation, item,
                              tokenizer=tokenizer, use_chat_template=use_chat_template, system=system)
    texts = list(originals)
    for _ in range(16):
        caps = _caps([len(o) for o in offsets], n_tokens - max_tokens)
        texts = [t if cap >= len(o) else _shorten(t, o, cap) for t, o, cap in zip(texts, offsets, caps)]
        built, n_tokens = build(texts)
        if n_tokens <= max_tokens:
            break
        offsets = [doc_offsets(t) for t in texts]
    else:
        texts, built = smallest, minimal
    truncated = tuple(i + 1 for i, (t, o) in enumerate(zip(texts, originals)) if t != o)
    return BuiltPrompt(**{**built.__dict__, "truncated_docs": truncated})


def _overflow_error(template: PromptTemplate, question: str, needed: int, max_tokens: int,
                    reservation: Reservation | None, item: int | str | None, **prompt_kw: Any) -> InputError:
    """The error for a prompt that does not fit even with every document cut to one token. It blames the template's
    instruction when the prompt would fit without it and it takes more room than the reservation."""
    instruction = count_tokens(prompt_kw["tokenizer"], template.instruction, False) if template.instruction else 0
    if instruction and needed - instruction <= max_tokens and instruction >= (reservation.tokens if reservation else 0):
        room = (f"the {max_tokens} tokens the model's {reservation.window}-token window leaves for it" if reservation
                else f"the {max_tokens} available")
        return InputError(
            f"the instruction of the prompt template {short_repr(template.name)} takes {instruction} tokens, and the "
            f"prompt with every document cut to one token needs {needed}, over {room}; shorten its instruction field "
            "(in a template file given as prompt.path) or use a model with a longer context window.", item=item)
    if reservation is not None and needed < reservation.window:
        return reservation.error(needed, item)
    if reservation is not None:
        contextless = format_prompt(template, question, (), **prompt_kw)
        alone = count_tokens(prompt_kw["tokenizer"], contextless.contextless_text, contextless.add_special_tokens,
                             contextless.contextless_user_spans)
        if alone < reservation.window:
            return InputError(
                f"the documents' titles and headers take {needed - alone} tokens, and the prompt with every document "
                f"cut to one token needs {needed}, over the model's {reservation.window}-token window; shorten the "
                "titles or give fewer documents.", item=item, field="docs")
        return InputError(
            f"the question and prompt template alone take {alone} tokens, filling the model's "
            f"{reservation.window}-token window; shorten the question or use a model with a longer context window.",
            item=item, field="question")
    return InputError(
        f"the prompt needs {needed} tokens even with documents truncated, over the {max_tokens} available; "
        "shorten the question or use a model with a longer context window.", item=item, field="question")


def tokenize_prompt(tokenizer: Any, prompt: BuiltPrompt) -> TokenizedPrompt:
    """Tokenize both prompts and map each token inside the documents block to the document it overlaps most.

    User text (``prompt.user_spans``) is tokenized as text, see
    :func:`mirage.attribution.tokenization.encode_prompt_text`.

    A token that reaches across the block's edge is not a context token: it is part template text (Gemma's tokenizer
    merges the last document's closing newline with the template's next one into a single ``"\n\n"``), and such a
    separator position can carry the largest saliency of the whole prompt, which would all go to the last document.
    """
    ids, offsets = encode_prompt_text(tokenizer, prompt.text, prompt.add_special_tokens, prompt.user_spans)
    contextless_ids, _ = encode_prompt_text(tokenizer, prompt.contextless_text, prompt.add_special_tokens,
                                            prompt.contextless_user_spans)
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


@dataclass(frozen=True)
class PreparedItem:
    """A validated item with its prompt built and tokenized."""

    item: RAGItem
    prompt: BuiltPrompt
    tokens: TokenizedPrompt
