"""Documents' actual authorship: replace documents by an LLM rewrite (greedy decoding, the studies' near-zero
temperature), which should keep their information. The labels alone are enough for the main experiments; this makes
the "true" labels of the informed mode true."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from mirage.attribution.generation import generate_answer
from mirage.attribution.models import LoadedModel
from mirage.attribution.tokenization import encode_chat, encode_plain
from mirage.bias.items import BiasItem
from mirage.bias.protocol import Rewrite
from mirage.config import GenerationConfig
from mirage.data.inputs import Document
from mirage.runs.store import ResumableJSONL

__all__ = ["rewrite_items", "rewrite_text"]


def rewrite_text(lm: LoadedModel, text: str, *, prompt: dict[str, Any], seed: int = 42) -> str:
    """One document rewritten by ``lm`` with the rewrite prompt (``configs/bias/rewrite.yaml``)."""
    content = str(prompt["template"]).replace("{INST}", str(prompt["instruction"]).strip()).replace("{P}", text)
    tok = lm.tokenizer
    if lm.use_chat_template:
        ids = encode_chat(tok, [{"role": "user", "content": content}])
    else:
        ids = encode_plain(tok, content + "\n\n")
    cfg = GenerationConfig(max_new_tokens=int(prompt.get("max_new_tokens", 320)), seed=seed)
    return generate_answer(lm, ids, cfg=cfg).text.strip()


def rewrite_key(model: str, prompt: dict[str, Any], text: str) -> str:
    """The key of a cached rewrite: the SHA-1 of the model name, the prompt's instruction and template, and the text,
    joined by newlines. It is not :func:`mirage.runs.store.content_key` (a hash of canonical JSON, which gives other
    values) because the ``rewrites.jsonl`` files already written are keyed so and must keep finding their rewrites."""
    blob = f"{model}\n{prompt['instruction']}\n{prompt['template']}\n{text}"
    return hashlib.sha1(blob.encode("utf-8", "surrogatepass")).hexdigest()


def rewrite_items(lm: LoadedModel, items: Sequence[BiasItem], which: Rewrite, *, prompt: dict[str, Any],
                  cache: ResumableJSONL | None = None, seed: int = 42) -> list[BiasItem]:
    """Items whose ``which`` documents (relevant, non-relevant or all) are LLM rewrites, authorship ``llm``.

    Rewrites are cached in ``cache`` by model, prompt and text, so a re-run reuses them; a rewrite that comes back
    empty keeps the original text (and authorship).
    """
    if which == "none":
        return list(items)
    known = {r["key"]: r["text"] for r in (cache.records() if cache else []) if "key" in r}
    out = []
    for item in items:
        docs, authors = list(item.docs), list(item.authors)
        for i, doc in enumerate(item.docs):
            is_rel = i + 1 in item.relevant
            if which == "all" or (which == "relevant") == is_rel:
                key = rewrite_key(lm.name, prompt, doc.text)
                if key not in known:
                    known[key] = rewrite_text(lm, doc.text, prompt=prompt, seed=seed)
                    if cache is not None:
                        cache.write({"key": key, "model": lm.name, "original": doc.text, "text": known[key]})
                if known[key]:
                    docs[i], authors[i] = Document(title=doc.title, text=known[key]), "llm"
        out.append(BiasItem(id=item.id, question=item.question, docs=tuple(docs), relevant=item.relevant,
                            answers=item.answers, source=item.source, authors=tuple(authors)))
    return out
