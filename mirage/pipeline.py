"""The attribution pipeline: prompt → (generation) → CTI → CCI → aggregation → result.

    m = Mirage.from_pretrained("smollm2-135m-instruct")
    res = m.attribute(question, docs)            # or answer="..." to attribute a given answer
    res.sentences[0].mirage_citations
    scores = m.score_tokens(m.prepare(item), answer)   # the token-scoring stage alone (CTI + CCI, no aggregation)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .aggregation import aggregate
from .citations import ParsedAnswer, parse_answer
from .config import MirageConfig
from .generation import Generated, generate_answer
from .inputs import InputError, RAGItem, make_item
from .models import LoadedModel, load_model, wrap_model
from .prompts import BuiltPrompt, Reservation, build_prompt, load_template
from .results import AttributionResult
from .serialization import library_versions
from .token_scores import Targets, TokenScores, score_tokens
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

    def score_tokens(self, prepared: PreparedItem, answer: TokenizedAnswer | str, *, targets: Targets = "selected",
                     generated: Generated | None = None, config: MirageConfig | None = None) -> TokenScores:
        """CTI for every answer token and CCI for the ``targets`` (``"selected"`` by CTI, ``"all"`` or ``"none"``);
        see :mod:`mirage.token_scores`. ``answer`` is the text (or its tokens) to force-decode after the prepared
        prompt; ``generated``: the generation that produced it, whose logits are then reused."""
        if isinstance(answer, str):
            answer = tokenize_answer(self.lm.tokenizer, answer)
        return score_tokens(self.lm, prepared.tokens, answer, config or self.config, targets=targets,
                            generated=generated)

    def attribute_item(self, item: RAGItem | dict, *, config: MirageConfig | None = None,
                       index: int | str | None = None) -> AttributionResult:
        """Attribute one item ``{"question", "docs", "output"?}``; see :meth:`attribute`."""
        cfg = config or self.config
        t0 = time.perf_counter()
        prep = self._prepare_for_output(item, cfg, index)
        timings = {"prepare": time.perf_counter() - t0}
        generated = None
        if prep.item.output is None:
            t = time.perf_counter()
            generated = generate_answer(self.lm, prep.tokens.ids, cfg=cfg.generation)
            timings["generation"] = time.perf_counter() - t
        parsed = self._parse_answer(prep, generated, index)
        answer = tokenize_answer(self.lm.tokenizer, parsed.text)
        scores = self.score_tokens(prep, answer, generated=generated, config=cfg)
        timings.update(scores.timings)
        sentences, tokens, spans, ctx_spans = aggregate(
            tokenizer=self.lm.tokenizer, prompt_text=prep.prompt.text, tokenized=prep.tokens, answer=answer,
            parsed=parsed, n_docs=len(prep.item.docs), cti=scores.cti, cci=scores.cci, cci_cfg=cfg.cci,
            cfg=cfg.aggregation)
        timings["total"] = time.perf_counter() - t0
        return AttributionResult(
            question=prep.item.question,
            docs=[{"title": d.title, "text": d.text} for d in prep.item.docs],
            answer=parsed.text,
            raw_answer=parsed.raw,
            context=prep.prompt.context,
            prompt=prep.prompt.text,
            contextless_prompt=prep.prompt.contextless_text,
            model=self.lm.name,
            config=cfg.to_dict(),
            sentences=sentences,
            tokens=tokens,
            spans=spans,
            context_spans=ctx_spans,
            cti_threshold=float(scores.cti.threshold),
            generated=generated is not None,
            truncated_docs=list(prep.prompt.truncated_docs),
            id=prep.item.id,
            versions=library_versions(),
            timings={k: round(v, 4) for k, v in timings.items()},
        )

    def _prepare_for_output(self, item: RAGItem | dict, cfg: MirageConfig, index: int | str | None) -> PreparedItem:
        """The item prepared with room for its given answer (as text), or for generation when it has none."""
        raw_item = make_item(item, item=index)
        reserve = None
        if raw_item.output is not None:
            reserve = len(tokenize_answer(self.lm.tokenizer, raw_item.output).ids) + 1
        return self.prepare(raw_item, config=cfg, index=index, reserve_tokens=reserve)

    def _parse_answer(self, prep: PreparedItem, generated: Generated | None,
                      index: int | str | None) -> ParsedAnswer:
        """The given or generated answer with its self-citations parsed out; empty once stripped is an InputError."""
        raw_answer = generated.text if generated is not None else prep.item.output
        parsed = parse_answer(raw_answer, len(prep.item.docs))
        if not parsed.text.strip():
            field = "output" if prep.item.output is not None else "generated answer"
            raise InputError("is empty once citation marks are removed; nothing to attribute.",
                             item=index if index is not None else prep.item.id, field=field)
        return parsed
