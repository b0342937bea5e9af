"""The attribution pipeline: prompt → (generation) → CTI → CCI → aggregation → result.

    m = Mirage.from_pretrained("smollm2-135m-instruct")
    res = m.attribute(question, docs)            # or answer="..." to attribute a given answer
    res.sentences[0].mirage_citations
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .aggregation import aggregate
from .cci import compute_cci, with_documents_logits
from .citations import parse_answer
from .config import MirageConfig
from .cti import compute_cti
from .forward import answer_logits, model_inputs
from .generation import generate_answer
from .inputs import InputError, RAGItem, make_item
from .models import LoadedModel, load_model, wrap_model
from .prompts import BuiltPrompt, Reservation, build_prompt, load_template
from .results import AttributionResult
from .serialization import library_versions
from .tokenization import TokenizedAnswer, TokenizedPrompt, tokenize_answer, tokenize_prompt


@dataclass(frozen=True)
class PreparedItem:
    """A validated item with its prompt built and tokenized."""

    item: RAGItem
    prompt: BuiltPrompt
    tokens: TokenizedPrompt


class Mirage:
    """Attribute RAG answers to their documents from the model's internals (CTI + CCI)."""

    def __init__(self, model: Any, tokenizer: Any = None, *, config: MirageConfig | None = None,
                 name: str | None = None) -> None:
        """Wrap a :class:`LoadedModel`, or a model and tokenizer the caller already loaded."""
        if isinstance(model, LoadedModel):
            self.lm = model
        else:
            if tokenizer is None:
                raise ValueError("Mirage(model, tokenizer): a tokenizer is required with a bare model.")
            self.lm = wrap_model(model, tokenizer, name=name)
        self.config = config or MirageConfig()

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str = "smollm2-135m-instruct",
        *,
        config: MirageConfig | None = None,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        trust_remote_code: bool = False,
    ) -> Mirage:
        """Load an embedded model name, a Hugging Face id or a local path."""
        cfg = config or MirageConfig()
        lm = load_model(name_or_path, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                        use_chat_template=cfg.prompt.chat_template)
        return cls(lm, config=cfg)

    # -- stages ---------------------------------------------------------------------------------------------------

    def prepare(self, item: RAGItem | dict, *, config: MirageConfig | None = None, index: int | str | None = None,
                reserve_tokens: int | None = None) -> PreparedItem:
        """Validate an item and build and tokenize its prompts (documents truncated to fit the window).

        ``reserve_tokens`` is the room kept for a given answer (its tokens and one more); without it, the room is
        ``generation.max_new_tokens``. Either is what an InputError blames when it leaves the prompt no room.
        """
        cfg = config or self.config
        item = make_item(item, item=index)
        window = self.lm.context_window
        reservation = None
        if window is not None:
            reservation = (Reservation(window, reserve_tokens, "output") if reserve_tokens is not None
                           else Reservation(window, cfg.generation.max_new_tokens, "generation.max_new_tokens"))
        built = build_prompt(load_template(cfg.prompt), item.question, item.docs, tokenizer=self.lm.tokenizer,
                             use_chat_template=self._chat(cfg), system=cfg.prompt.system, reservation=reservation,
                             item=index if index is not None else item.id)
        return PreparedItem(item=item, prompt=built, tokens=tokenize_prompt(self.lm.tokenizer, built))

    def _chat(self, cfg: MirageConfig) -> bool:
        if cfg.prompt.chat_template is None:
            return self.lm.use_chat_template
        return cfg.prompt.chat_template and not self.lm.is_encoder_decoder

    def attribute(
        self,
        question: str,
        docs: Sequence[dict | Any],
        *,
        answer: str | None = None,
        config: MirageConfig | None = None,
        id: str | None = None,
    ) -> AttributionResult:
        """Generate (or force-decode ``answer``) and attribute each sentence to the documents it relied on."""
        return self.attribute_item({"question": question, "docs": list(docs), "output": answer, "id": id},
                                   config=config)

    def attribute_item(self, item: RAGItem | dict, *, config: MirageConfig | None = None,
                       index: int | str | None = None) -> AttributionResult:
        """Attribute one item ``{"question", "docs", "output"?}``; see :meth:`attribute`."""
        cfg = config or self.config
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        raw_item = make_item(item, item=index)
        reserve = None
        if raw_item.output is not None:
            reserve = len(tokenize_answer(self.lm.tokenizer, raw_item.output).ids) + 1  # the answer, as text
        prep = self.prepare(raw_item, config=cfg, index=index, reserve_tokens=reserve)
        timings["prepare"] = time.perf_counter() - t0
        where = index if index is not None else prep.item.id

        generated = None
        if prep.item.output is None:
            t = time.perf_counter()
            generated = generate_answer(self.lm, prep.tokens.ids, cfg=cfg.generation)
            timings["generation"] = time.perf_counter() - t
            raw_answer = generated.text
        else:
            raw_answer = prep.item.output
        parsed = parse_answer(raw_answer, len(prep.item.docs))
        text = parsed.text
        if not text.strip():
            field = "output" if prep.item.output is not None else "generated answer"
            raise InputError("is empty once citation marks are removed; nothing to attribute.", item=where,
                             field=field)
        answer = tokenize_answer(self.lm.tokenizer, text)
        return self._attribute_answer(prep, parsed, answer, generated, cfg, timings, t0)

    def _attribute_answer(self, prep, parsed, answer: TokenizedAnswer, generated, cfg: MirageConfig,
                          timings: dict[str, float], t0: float) -> AttributionResult:
        lm, tok = self.lm, prep.tokens
        t = time.perf_counter()
        if generated is not None and tuple(generated.ids) == answer.ids:
            logits_ctx, graph = generated.logits, None  # generation already computed the with-documents pass
        else:
            logits_ctx, graph = with_documents_logits(lm, tok.ids, answer.ids, cfg.cci)  # CCI reuses the graph
        logits_noctx = answer_logits(lm, tok.contextless_ids, answer.ids)
        cti = compute_cti(logits_ctx, logits_noctx, answer.ids, cfg=cfg.cti)
        timings["cti"] = time.perf_counter() - t
        t = time.perf_counter()
        input_ids, positions = model_inputs(lm, tok.ids, answer.ids)
        cci = compute_cci(lm, input_ids, answer.ids, positions, cti.selected, cti.contextless_top,
                          tok.context_positions, cfg=cfg.cci, graph=graph)
        del graph
        timings["cci"] = time.perf_counter() - t
        sentences, tokens, spans, ctx_spans = aggregate(
            tokenizer=lm.tokenizer, prompt_text=prep.prompt.text, tokenized=tok, answer=answer, parsed=parsed,
            n_docs=len(prep.item.docs), cti=cti, cci=cci, cci_cfg=cfg.cci, cfg=cfg.aggregation)
        timings["total"] = time.perf_counter() - t0
        return AttributionResult(
            question=prep.item.question,
            docs=[{"title": d.title, "text": d.text} for d in prep.item.docs],
            answer=parsed.text,
            raw_answer=parsed.raw,
            context=prep.prompt.context,
            prompt=prep.prompt.text,
            contextless_prompt=prep.prompt.contextless_text,
            model=lm.name,
            config=cfg.to_dict(),
            sentences=sentences,
            tokens=tokens,
            spans=spans,
            context_spans=ctx_spans,
            cti_threshold=float(cti.threshold),
            generated=generated is not None,
            truncated_docs=list(prep.prompt.truncated_docs),
            id=prep.item.id,
            versions=library_versions(),
            timings={k: round(v, 4) for k, v in timings.items()},
        )

