"""RAG prompts built from YAML templates, recording each document's character span as the prompt is built."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from .config import ConfigError, PromptConfig
from .inputs import Document, InputError

PROMPTS_DIR = Path(__file__).parent / "configs" / "prompts"


@dataclass(frozen=True)
class PromptTemplate:
    """A prompt template: ``template`` uses {INST}, {Q}, {D}; ``doc_template`` uses {ID}, {T}, {P}."""

    name: str
    instruction: str
    template: str
    contextless_template: str
    doc_template: str

    def __post_init__(self) -> None:
        for field, needed in (("template", ("{Q}", "{D}")), ("contextless_template", ("{Q}",)),
                              ("doc_template", ("{P}",))):
            for placeholder in needed:
                if placeholder not in getattr(self, field):
                    raise ConfigError(f"prompt template {self.name!r}: {field} must contain {placeholder}.")
        if "{D}" in self.contextless_template:
            raise ConfigError(f"prompt template {self.name!r}: contextless_template must not contain {{D}}.")


@dataclass(frozen=True)
class BuiltPrompt:
    """A prompt with and without documents, and where each document sits in ``text``.

    ``doc_spans[i]`` is the ``(start, end)`` character span of document i (its whole rendered entry) in ``text``;
    ``context_span`` is the span of the documents block ``context``.
    """

    text: str
    contextless_text: str
    context: str
    context_span: tuple[int, int]
    doc_spans: tuple[tuple[int, int], ...]
    add_special_tokens: bool
    truncated_docs: tuple[int, ...] = ()


@cache
def _load_template_file(path: str) -> PromptTemplate:
    data = yaml.safe_load(Path(path).read_text())
    keys = {"name", "instruction", "template", "contextless_template", "doc_template"}
    missing = keys - set(data)
    if missing:
        raise ConfigError(f"prompt template file {path} lacks {sorted(missing)}.")
    return PromptTemplate(**{k: data[k] for k in keys})


def available_prompts() -> list[str]:
    """Names of the prompt templates in ``configs/prompts``."""
    return sorted(p.stem for p in PROMPTS_DIR.glob("*.yaml"))


def load_template(cfg: PromptConfig) -> PromptTemplate:
    """The template named by ``cfg.name`` (or the file ``cfg.path``)."""
    if cfg.path:
        return _load_template_file(str(Path(cfg.path).resolve()))
    path = PROMPTS_DIR / f"{cfg.name}.yaml"
    if not path.exists():
        raise ConfigError(f"prompt.name={cfg.name!r} is unknown; choose one of {available_prompts()} or set prompt.path.")
    return _load_template_file(str(path))


def _fill(template: str, values: dict[str, str]) -> tuple[str, dict[str, int]]:
    """Replace {KEY} placeholders (no other brace handling) and return where each value starts."""
    out, starts, i = [], {}, 0
    pos = 0
    while i < len(template):
        if template[i] == "{":
            close = template.find("}", i)
            key = template[i + 1 : close] if close != -1 else ""
            if key in values:
                starts[key] = pos
                out.append(values[key])
                pos += len(values[key])
                i = close + 1
                continue
        out.append(template[i])
        pos += 1
        i += 1
    return "".join(out), starts


def render_documents(template: PromptTemplate, docs: tuple[Document, ...]) -> tuple[str, list[tuple[int, int]]]:
    """The documents block and each document's span inside it (1-based ids in the text)."""
    parts, spans, pos = [], [], 0
    for i, doc in enumerate(docs, start=1):
        entry, _ = _fill(template.doc_template, {"ID": str(i), "T": doc.title, "P": doc.text})
        parts.append(entry)
        spans.append((pos, pos + len(entry)))
        pos += len(entry)
    return "".join(parts), spans


def _apply_chat(tokenizer: Any, content: str, system: str | None) -> tuple[str, int]:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    offset = rendered.find(content)
    if offset < 0:
        raise ConfigError("the tokenizer's chat template alters the message text; set prompt.chat_template=false.")
    return rendered, offset


def format_prompt(
    template: PromptTemplate,
    question: str,
    docs: tuple[Document, ...],
    *,
    tokenizer: Any = None,
    use_chat_template: bool = False,
    system: str | None = None,
) -> BuiltPrompt:
    """Build the with- and without-documents prompts, recording document spans."""
    block, spans = render_documents(template, docs)
    values = {"INST": template.instruction, "Q": question}
    content, starts = _fill(template.template, {**values, "D": block})
    contextless, _ = _fill(template.contextless_template, values)
    offset = 0
    if use_chat_template:
        content, offset = _apply_chat(tokenizer, content, system)
        contextless, _ = _apply_chat(tokenizer, contextless, system)
    base = offset + starts["D"]
    return BuiltPrompt(
        text=content,
        contextless_text=contextless,
        context=block,
        context_span=(base, base + len(block)),
        doc_spans=tuple((base + s, base + e) for s, e in spans),
        add_special_tokens=not use_chat_template,
    )


def count_tokens(tokenizer: Any, text: str, add_special_tokens: bool) -> int:
    return len(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])


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
) -> BuiltPrompt:
    """Build the prompt; if it exceeds ``max_tokens``, shorten the longest documents (word-wise) with a warning.

    The truncation keeps every document (so document ids stay as given) and cuts text from the end of the
    longest ones first. If even empty documents do not fit, raises InputError for the question.
    """
    built = format_prompt(template, question, docs, tokenizer=tokenizer, use_chat_template=use_chat_template,
                          system=system)
    if max_tokens is None:
        return built
    n_tokens = count_tokens(tokenizer, built.text, built.add_special_tokens)
    if n_tokens <= max_tokens:
        return built
    words = [doc.text.split(" ") for doc in docs]
    truncated: set[int] = set()
    for _ in range(12):
        excess = n_tokens - max_tokens
        if excess <= 0:
            break
        lengths = [len(w) for w in words]
        if sum(lengths) == 0:
            break
        # Tokens per word ~ n_tokens / words overall; cut the longest documents down towards a common cap.
        ratio = max(1.0, n_tokens / max(1, sum(lengths) + 50))
        to_cut = int(excess / ratio) + 1
        cap = max(lengths)
        while to_cut > 0 and cap > 0:
            cap -= 1
            to_cut -= sum(1 for n in lengths if n > cap)
        for i, w in enumerate(words):
            if len(w) > cap:
                words[i] = w[:cap]
                truncated.add(i)
        docs = tuple(Document(title=d.title, text=" ".join(w)) for d, w in zip(docs, words))
        built = format_prompt(template, question, docs, tokenizer=tokenizer, use_chat_template=use_chat_template,
                              system=system)
        n_tokens = count_tokens(tokenizer, built.text, built.add_special_tokens)
    if n_tokens > max_tokens:
        raise InputError(
            f"the prompt needs {n_tokens} tokens even with documents truncated, over the {max_tokens} available; "
            "shorten the question or use a model with a longer context window.", item=item, field="question")
    warnings.warn(
        f"item {item}: prompt exceeded the model's window; truncated document(s) "
        f"{sorted(i + 1 for i in truncated)} to fit {max_tokens} tokens.", stacklevel=2)
    return BuiltPrompt(**{**built.__dict__, "truncated_docs": tuple(sorted(i + 1 for i in truncated))})
