"""The attribution pipeline: prompt → (generation) → CTI → CCI → aggregation → result.

    m = Mirage.from_pretrained("smollm2-135m-instruct")
    res = m.attribute(question, docs)            # or answer="..." to attribute a given answer
    res.sentences[0].mirage_citations
    scores = m.score_tokens(m.prepare(item), answer)   # the token-scoring stage alone (CTI + CCI, no aggregation)
    ds = attribute_dataset(ds, m)                # a datasets.Dataset with the attribution as columns

A citation rule (``aggregation.rule``) gives each sentence its cited documents: ``reference`` (the documents behind
its context-sensitive tokens), ``likelihood`` (the passage-likelihood classifier) and ``selfcite`` (SelfCite's
best-rewarded set of one or two documents) are built in, and :func:`register_citation_rule` adds one (a function of
:class:`CitationInputs`).
"""

from __future__ import annotations

import dataclasses
import functools
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from mirage.attribution.aggregation import aggregate, content_mask, saliency_matrix, tokens_by_sentence
from mirage.attribution.cci import document_method
from mirage.attribution.citations import ParsedAnswer, parse_answer
from mirage.attribution.generation import Generated, generate_answer
from mirage.attribution.models import LoadedModel, load_adapter, load_model, wrap_model
from mirage.attribution.prompts import PreparedItem, Reservation, build_prompt, load_template, tokenize_prompt
from mirage.attribution.results import AttributionResult, SentenceAttribution
from mirage.attribution.serialization import library_versions
from mirage.attribution.token_scores import TargetSpec, TokenScores, score_batch, score_tokens
from mirage.attribution.tokenization import TokenizedAnswer, max_token_chars, tokenize_answer
from mirage.compat import RULE_TIMINGS
from mirage.config import DEFAULT_MODEL, ConfigError, MirageConfig
from mirage.data.inputs import InputError, RAGItem, make_item
from mirage.likelihood.classifier import learned_citations, load_learned
from mirage.likelihood.signals import passage_signals
from mirage.registry import CITATION_RULES

if TYPE_CHECKING:
    import datasets

__all__ = ["CitationInputs", "CitationRuleFn", "Mirage", "PreparedItem", "attribute_dataset", "register_citation_rule",
           "selfcite_answer_citations", "selfcite_citations"]


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
        name_or_path: str | None = None,
        *,
        config: MirageConfig | None = None,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        trust_remote_code: bool = False,
        adapter: str | None = None,
        device_map: str | dict[str, Any] | None = None,
        max_memory: str | int | dict[Any, Any] | None = None,
        quantization: str | None = None,
        memory_budget: str | int | None = None,
    ) -> Mirage:
        """Load an embedded model name, a Hugging Face id or a local path (default
        :data:`~mirage.config.DEFAULT_MODEL`, ``smollm2-135m-instruct``).
        Without ``config``, a model mirage tuned (a shipped adapter such as ``smollm2-135m-cite-follow``, an adapter
        or a fully fine-tuned model folder) is prompted in the template it was trained in.

        ``adapter``: a LoRA adapter folder (``mirage tune sft -o DIR``: ``DIR/adapter``) merged into the model, by
        default the base model the adapter names (a folder given as ``name_or_path`` is taken as the adapter).
        Placement as Hugging Face's ``from_pretrained``: ``device_map`` (``"auto"`` or module → device) with
        ``max_memory`` per device, ``quantization`` ``"8bit"``/``"4bit"`` (bitsandbytes, CUDA). ``memory_budget``
        (or ``max_memory`` as one size, ``"3GB"``): the most memory attribution may bring the process to; long
        prompts then run with gradient checkpointing and CCI's backward passes in smaller batches (see
        :func:`mirage.attribution.models.load_model`, :func:`mirage.attribution.planner.plan_graph`)."""
        from mirage.attribution.models import is_adapter_folder, trained_prompt_name

        cfg = config or MirageConfig()
        trained = None if config is not None else trained_prompt_name(adapter or name_or_path)
        if trained:  # a tuned model without a config of one's own: the prompt it was trained in
            cfg = cfg.replace(prompt={"name": trained})
        placement: dict[str, Any] = {"device_map": device_map, "max_memory": max_memory, "quantization": quantization,
                     "memory_budget": memory_budget, "trust_remote_code": trust_remote_code}
        if adapter is None and name_or_path is not None and is_adapter_folder(name_or_path):
            adapter, name_or_path = str(name_or_path), None
        if adapter is not None:
            lm = load_adapter(adapter, base=name_or_path, device=device, dtype=dtype,
                              use_chat_template=cfg.prompt.chat_template, **placement)
            return cls(lm, config=cfg)
        lm = load_model(name_or_path or DEFAULT_MODEL, device=device, dtype=dtype,
                        use_chat_template=cfg.prompt.chat_template, **placement)
        return cls(lm, config=cfg)

    # -- stages ---------------------------------------------------------------------------------------------------

    def prepare(self, item: RAGItem | Mapping[str, Any], *, config: MirageConfig | None = None,
                index: int | str | None = None, reserve_tokens: int | None = None) -> PreparedItem:
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
        docs: Sequence[Mapping[str, Any] | str] | Mapping[str, Sequence[Any]],
        *,
        answer: str | None = None,
        config: MirageConfig | None = None,
        id: str | None = None,
        max_new_tokens: int | None = None,
        do_sample: bool | None = None,
        sample: bool | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
    ) -> AttributionResult:
        """Generate (or force-decode ``answer``) and attribute each sentence to the documents it relied on.

        ``docs``: ``{"title", "text"}`` objects, plain strings (texts without titles), or columns
        ``{"title": [...], "text": [...]}`` (see :func:`mirage.data.inputs.make_item`). ``max_new_tokens``,
        ``do_sample`` (or its alias ``sample``), ``temperature``, ``top_p`` and ``seed`` override the config's
        ``generation`` section for this call.
        """
        cfg = with_generation(config or self.config, max_new_tokens=max_new_tokens, do_sample=do_sample,
                              sample=sample, temperature=temperature, top_p=top_p, seed=seed)
        docs_given = docs if isinstance(docs, (str, Mapping)) else list(docs)  # a wrong type is make_item's error
        if answer is not None and (not isinstance(answer, str) or not answer.strip()):  # named as this call names it
            raise InputError(f"must be non-blank text, got {answer!r}; give the answer to attribute, or leave it out "
                             "(None) to generate one.", item=id, field="answer")
        return self.attribute_item({"question": question, "docs": docs_given, "output": answer, "id": id},
                                   config=cfg)

    def score_tokens(self, prepared: PreparedItem, answer: TokenizedAnswer | str, *, targets: TargetSpec = "selected",
                     generated: Generated | None = None, config: MirageConfig | None = None) -> TokenScores:
        """CTI for every answer token and CCI for the ``targets`` (``"selected"`` by CTI, ``"all"`` or ``"none"``);
        see :mod:`mirage.attribution.token_scores`. ``answer`` is the text (or its tokens) to force-decode after the
        prepared prompt; ``generated``: the generation that produced it, whose logits are then reused."""
        if isinstance(answer, str):
            answer = tokenize_answer(self.lm.tokenizer, answer)
        cfg = config or self.config
        if document_method(cfg.cci) is not None:  # a document method as the CCI step
            from mirage.attribution.methods.as_cci import context_cci

            return context_cci(self, prepared, answer, cfg, targets=targets, generated=generated)
        return score_tokens(self.lm, prepared.tokens, answer, cfg, targets=targets, generated=generated)

    def score_batch(self, prepared: Sequence[PreparedItem], answers: Sequence[TokenizedAnswer | str], *,
                    targets: TargetSpec = "selected", item_targets: Sequence[TargetSpec] | None = None,
                    config: MirageConfig | None = None, max_batch_tokens: int | None = None) -> list[TokenScores]:
        """:meth:`score_tokens` of several prepared items at once, in padded batches: CTI's passes and, from the
        same differentiable pass, CCI's gradients (see :func:`mirage.attribution.token_scores.score_batch`); the same
        scores up to float rounding."""
        tokenized = [tokenize_answer(self.lm.tokenizer, a) if isinstance(a, str) else a for a in answers]
        cfg = config or self.config
        if document_method(cfg.cci) is not None:  # its own passes: item by item
            specs = list(item_targets) if item_targets is not None else [targets] * len(prepared)
            return [self.score_tokens(p, a, targets=spec, config=cfg) for p, a, spec in zip(prepared, tokenized, specs)]
        return score_batch(self.lm, [p.tokens for p in prepared], tokenized, cfg, targets=targets,
                           item_targets=item_targets, max_batch_tokens=max_batch_tokens)

    def attribute_item(self, item: RAGItem | Mapping[str, Any], *, config: MirageConfig | None = None,
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
        content = content_mask(prep.tokens, prep.prompt.user_spans)
        sentences, tokens, spans, ctx_spans = aggregate(
            tokenizer=self.lm.tokenizer, prompt_text=prep.prompt.text, tokenized=prep.tokens, answer=answer,
            parsed=parsed, n_docs=len(prep.item.docs), cti=scores.cti, cci=scores.cci, cci_cfg=cfg.cci,
            cfg=cfg.aggregation, content=content)
        rule = CITATION_RULES.lookup(cfg.aggregation.rule)
        t = time.perf_counter()
        sentences = rule(CitationInputs(mirage=self, prepared=prep, text=parsed.text, answer=answer, scores=scores,
                                        sentences=sentences, content=content, config=cfg))
        timing = RULE_TIMINGS.get(cfg.aggregation.rule, cfg.aggregation.rule)
        if timing is not None:
            timings[timing] = time.perf_counter() - t
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
            versions={**library_versions(), **self.lm.passes},  # and how the passes ran (attention kernel, ...)
            timings={k: round(v, 4) for k, v in timings.items()},
            saliency=saliency_matrix(prep.tokens, scores.cci, content) if cfg.aggregation.keep_saliency else None,
        )

    def _prepare_for_output(self, item: RAGItem | Mapping[str, Any], cfg: MirageConfig,
                            index: int | str | None) -> PreparedItem:
        """The item prepared with room for its given answer (as text), or for generation when it has none."""
        raw_item = make_item(item, item=index)
        reserve = None
        if raw_item.output is not None:
            window = self.lm.context_window
            if window is not None and len(raw_item.output) > window * max_token_chars(self.lm.tokenizer):
                # it cannot fit the window: refused before anything tokenizes it (a huge answer would take
                # gigabytes to tokenize, and every resume would try again)
                raise InputError(f"is {len(raw_item.output)} characters long, more than the model's window of "
                                 f"{window} tokens can hold; shorten the answer or use a model with a longer window.",
                                 item=index if index is not None else raw_item.id, field="output")
            reserve = len(tokenize_answer(self.lm.tokenizer, raw_item.output).ids) + 1
        return self.prepare(raw_item, config=cfg, index=index, reserve_tokens=reserve)

    def _parse_answer(self, prep: PreparedItem, generated: Generated | None,
                      index: int | str | None) -> ParsedAnswer:
        """The given or generated answer with its self-citations parsed out; empty once stripped is an InputError."""
        raw_answer = generated.text if generated is not None else prep.item.output or ""
        parsed = parse_answer(raw_answer, len(prep.item.docs))
        if not parsed.text.strip():
            field = "output" if prep.item.output is not None else "generated answer"
            raise InputError("is empty once citation marks are removed; nothing to attribute.",
                             item=index if index is not None else prep.item.id, field=field)
        return parsed


@dataclass(frozen=True)
class CitationInputs:
    """What a citation rule is given for one answer: the ``mirage`` that attributes it (its model ``mirage.lm``, its
    ``prepare``), the ``prepared`` item, the answer's ``text`` (citation marks removed) and tokens (``answer``), its
    token ``scores`` (CTI for every token, CCI for the selected ones), its ``sentences`` as aggregation made them
    (with the reference rule's citations), which context tokens are document ``content``, and the ``config``."""

    mirage: Mirage
    prepared: PreparedItem
    text: str
    answer: TokenizedAnswer
    scores: TokenScores
    sentences: list[SentenceAttribution]
    content: Sequence[bool]
    config: MirageConfig


#: ``rule(inputs) -> sentences``: the answer's sentences, each with its ``mirage_citations`` (and ``doc_scores``).
CitationRuleFn = Callable[[CitationInputs], list[SentenceAttribution]]


def reference_citations(inputs: CitationInputs) -> list[SentenceAttribution]:
    """``reference``: the union of the documents behind each sentence's context-sensitive tokens (the method's rule),
    as aggregation cited them."""
    return inputs.sentences


def likelihood_citations(inputs: CitationInputs) -> list[SentenceAttribution]:
    """``likelihood``: the passage-likelihood classifier's citations (:mod:`mirage.likelihood.classifier`):
    ``mirage_citations`` by the classifier, ``doc_scores`` its probabilities."""
    prep, answer, scores, cfg = inputs.prepared, inputs.answer, inputs.scores, inputs.config
    lm = inputs.mirage.lm
    model = load_learned(cfg.aggregation.learned_model, lm.name)
    signals = passage_signals(lm, prep, answer.ids, prepare=functools.partial(inputs.mirage.prepare, config=cfg),
                              leave_one_out=any(f.startswith("loo_") for f in model.features),
                              attention="attention" in model.features).to_dict()
    members = tokens_by_sentence(inputs.text, [(s.start, s.end) for s in inputs.sentences],
                                 [a for a, _b in answer.offsets], range(len(answer.ids)))
    cited = learned_citations(
        model, cti=scores.cti.scores, rows=dict(zip(scores.cci.selected, scores.cci.scores)),
        docs=prep.tokens.context_docs, n_docs=len(prep.item.docs), selected=scores.cti.selected,
        sentences=members, content=inputs.content, signals=signals, max_citations=cfg.aggregation.max_citations)
    return [dataclasses.replace(s, mirage_citations=ids, doc_scores=[round(p, 6) for p in probs])
            for s, (ids, probs) in zip(inputs.sentences, cited)]


#: The largest citation set the ``selfcite`` rule scores (SelfCite's best-of-N over every set of one or two of the
#: documents: 15 sets of five documents), cut further by ``aggregation.max_citations``.
SELFCITE_SET_SIZE = 2


def selfcite_citations(inputs: CitationInputs) -> list[SentenceAttribution]:
    """``selfcite``: SelfCite's self-supervised citation reward (Chuang et al., 2025) as a best-of-N rule, per
    sentence. Every set of at most :data:`SELFCITE_SET_SIZE` (and ``aggregation.max_citations``) documents is
    scored by the sentence's mean token log-probability with only those documents minus without them
    (:func:`mirage.attribution.methods.selfcite.citation_reward_rows`; one set of passes for all the sentences), and
    the best-rewarded set is cited where its reward is positive (a sentence that no set makes likelier cites nothing).
    ``doc_scores``: each document's reward cited alone. Uses no CTI or CCI; costs two passes per candidate set, each
    from the full prompt's cached prefix."""
    return _selfcite_rule(inputs, whole_answer=False)


def selfcite_answer_citations(inputs: CitationInputs) -> list[SentenceAttribution]:
    """``selfcite_answer``: SelfCite's reward as a best-of-N rule over the whole answer: the one set of at most
    :data:`SELFCITE_SET_SIZE` documents whose reward over all the answer's tokens is highest, cited by each sentence
    that set makes likelier (its reward over the sentence's tokens positive). The answer then cites at most that set,
    where :func:`selfcite_citations` lets each sentence pick its own and their union grows with the sentences.
    ``doc_scores`` and the cost are :func:`selfcite_citations`' (the same passes)."""
    return _selfcite_rule(inputs, whole_answer=True)


def _selfcite_rule(inputs: CitationInputs, *, whole_answer: bool) -> list[SentenceAttribution]:
    from mirage.attribution.methods import document_inputs
    from mirage.attribution.methods.selfcite import candidate_sets, citation_reward_rows, ranked, token_means

    cfg = inputs.config
    doc_in = document_inputs(inputs.mirage, inputs.prepared, inputs.text, config=cfg)
    if doc_in.n_docs == 0:
        return [dataclasses.replace(s, mirage_citations=[], doc_scores=[]) for s in inputs.sentences]
    sets = candidate_sets(doc_in.n_docs, min(SELFCITE_SET_SIZE, cfg.aggregation.max_citations))
    rows = citation_reward_rows(doc_in, sets)  # [n_sets, n_answer]
    members = tokens_by_sentence(inputs.text, [(s.start, s.end) for s in inputs.sentences],
                                 [a for a, _b in inputs.answer.offsets], range(rows.shape[1]))
    single = {s[0]: k for k, s in enumerate(sets) if len(s) == 1}
    answer_k = sets.index(ranked(sets, token_means(rows)).best) if whole_answer else None  # the answer's best set
    out = []
    for sentence, tokens in zip(inputs.sentences, members):
        if not tokens:
            out.append(dataclasses.replace(sentence, mirage_citations=[], doc_scores=[0.0] * doc_in.n_docs))
            continue
        rewards = token_means(rows, tokens)
        if answer_k is None:
            best = ranked(sets, rewards)
            cited = list(best.best) if best.rewards[0] > 0 else []
        else:
            cited = list(sets[answer_k]) if rewards[answer_k] > 0 else []
        out.append(dataclasses.replace(sentence, mirage_citations=cited,
                                       doc_scores=[round(rewards[single[d]], 6) for d in range(1, doc_in.n_docs + 1)]))
    return out


CITATION_RULES.register("reference", reference_citations)
CITATION_RULES.register("likelihood", likelihood_citations)
CITATION_RULES.register("selfcite", selfcite_citations)
CITATION_RULES.register("selfcite_answer", selfcite_answer_citations)


def register_citation_rule(name: str, fn: CitationRuleFn, *, overwrite: bool = False) -> None:
    """Make ``fn`` selectable as ``aggregation.rule=name`` (an existing name is replaced only with ``overwrite``)."""
    CITATION_RULES.register(name, fn, overwrite=overwrite)


def with_generation(config: MirageConfig, *, max_new_tokens: int | None = None, do_sample: bool | None = None,
                    sample: bool | None = None, temperature: float | None = None, top_p: float | None = None,
                    seed: int | None = None) -> MirageConfig:
    """``config`` with the generation settings that are given (not None) replaced; ``sample`` is an alias of
    ``do_sample`` (the CLI's ``--sample``). A ConfigError names a bad value's field (``generation.max_new_tokens``)."""
    if do_sample is not None and sample is not None and do_sample != sample:
        raise ConfigError(f"generation.do_sample: do_sample={do_sample!r} and sample={sample!r} disagree; give one.")
    given = {"max_new_tokens": max_new_tokens, "do_sample": do_sample if do_sample is not None else sample,
             "temperature": temperature, "top_p": top_p, "seed": seed}
    changes = {key: value for key, value in given.items() if value is not None}
    return config.replace(generation=changes) if changes else config


#: The columns :func:`attribute_dataset` adds (before its ``prefix``), with their ``datasets`` feature types.
DATASET_COLUMNS = ("answer", "sentences", "mirage_citations", "self_citations", "mirage_result")


def attribute_dataset(dataset: datasets.Dataset, mirage: Mirage, *, config: MirageConfig | None = None,
                      prefix: str = "", desc: str = "mirage attribute", **generation: Any) -> datasets.Dataset:
    """Attribute every row of a Hugging Face ``datasets.Dataset``; a new Dataset with the rows' columns and these:

    - ``answer`` (string): the attributed answer, self-citation marks removed (the row's ``output`` when it has
      one, force-decoded; otherwise generated);
    - ``sentences`` (list of strings): its sentences;
    - ``mirage_citations`` / ``self_citations`` (list of lists of int): per sentence, the 1-based documents mirage
      attributes it to (strongest first) and those the model cited itself;
    - ``mirage_result`` (string): the whole :class:`~mirage.attribution.results.AttributionResult` as JSON
      (``AttributionResult.from_json``).

    Rows are read as :func:`mirage.data.inputs.make_item` reads items: ``question``, ``docs`` or ``ctxs`` (objects,
    strings, or a ``Sequence`` feature's columns), ``output`` and ``id`` optional. Every row is checked before any is
    attributed: a bad one is an InputError naming its index and field. ``prefix`` is put before each new column's
    name; a new column that exists already is a ValueError (give a ``prefix``). ``generation``: the overrides that
    :meth:`Mirage.attribute` takes (``max_new_tokens=16``, ``seed``, ...). The rows are attributed one at a time in
    this process, under ``datasets``' progress bar (``desc``); nothing is cached by ``datasets`` (the model is not a
    hashable input), so a second call computes again.
    """
    import datasets as hf_datasets

    cfg = with_generation(config or mirage.config, **generation)
    names = {column: f"{prefix}{column}" for column in DATASET_COLUMNS}
    taken = sorted(set(names.values()) & set(dataset.column_names))
    if taken:
        raise ValueError(f"the dataset already has column(s) {taken}; attribute_dataset(..., prefix='mirage_') or "
                         "another prefix names the new columns apart.")
    for index, row in enumerate(dataset):
        make_item(row, item=index)  # every row checked before the model runs on any
    value, ids = hf_datasets.Value, hf_datasets.Sequence(hf_datasets.Sequence(hf_datasets.Value("int64")))
    features = dataset.features.copy()
    features.update({names["answer"]: value("string"), names["sentences"]: hf_datasets.Sequence(value("string")),
                     names["mirage_citations"]: ids, names["self_citations"]: ids,
                     names["mirage_result"]: value("string")})

    def attribute_row(row: Mapping[str, Any], index: int) -> dict[str, Any]:
        res = mirage.attribute_item(row, config=cfg, index=index)
        return {names["answer"]: res.answer, names["sentences"]: [s.text for s in res.sentences],
                names["mirage_citations"]: [list(s.mirage_citations) for s in res.sentences],
                names["self_citations"]: [list(s.self_citations) for s in res.sentences],
                names["mirage_result"]: res.to_json()}

    # A fresh fingerprint: datasets would otherwise hash attribute_row, and with it the model, to name a cache.
    return dataset.map(attribute_row, with_indices=True, features=features, desc=desc, load_from_cache_file=False,
                       new_fingerprint=uuid.uuid4().hex)
