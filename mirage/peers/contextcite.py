"""ContextCite (Cohen-Wang et al., 2024; PyPI ``context-cite``) as a peer of mirage on XOR-AttriQA.

ContextCite attributes a response to the sources of its context by ablating random subsets of the sources, scoring
the response's log-probability under each ablated context, and fitting a sparse linear surrogate (LASSO) of that
score on the keep/drop masks; a source's weight is its score. Here it runs on exactly what mirage's XOR-AttriQA
scorer attributes (:func:`mirage.scoring.xor_attriqa.prepare_item`): the same model, the same prompt text (mirage's
template, chat template already applied, documents shortened to fit the window as mirage shortened them), the same
force-decoded answer tokens, with one source per passage (the unit XOR-AttriQA labels): the passage's rendered entry
in mirage's documents block (``Document [i]: …\\n``). An ablated source's entry is removed from the block; the other
entries keep their numbers.

ContextCite's defaults are kept: ``num_ablations=64`` (:data:`CONTEXTCITE_NUM_ABLATIONS`, context-cite 0.0.4),
keep probability 0.5, LASSO ``alpha=0.01`` on standardized masks, batch size 1, and the ``logit_prob`` output (the
logit of the whole answer's probability). ContextCite runs its ablation passes under ``torch.cuda.amp.autocast()``:
on a GPU they run in float16 autocast whatever the model's dtype, on a CPU in the model's dtype. Seed ``s`` uses
ContextCite's mask seeds ``s*N … s*N+N-1`` (``N = num_ablations``): seed 0 is ContextCite's own masks, and different
seeds never share a mask draw (ContextCite's ``base_seed`` would only shift one sequence by one).

:func:`run_contextcite` (``python benchmarks/contextcite_xor.py DATA.jsonl … -o DIR`` runs it) writes
``DIR/contextcite.jsonl``, one record per item (resumable; a file made with other settings is refused):
``{key, settings, scores, seconds, n_forward, n_docs}``; ``scores[i]`` is passage i's ContextCite score, ``seconds``
the wall time of the item (prompt preparation, ablation passes and the surrogate fit), ``n_forward`` the number of
sequences the model ran. An item that fails is written as ``{key, settings, file, line, error}`` and tried again
on the next run. Read the scores back with :func:`contextcite_scores`.

ContextCite's import calls ``nltk.download("punkt_tab")``, which cannot reach the network here; :func:`context_cite`
imports it with that call disabled (the punkt data serves only its sentence partitioner, which is not used).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from mirage.attribution.prompts import BuiltPrompt, Span
from mirage.attribution.tokenization import encode_prompt_text, tokenize_answer
from mirage.data.inputs import InputError
from mirage.data.readers import BadRow
from mirage.runs.lazy import resolve_mirage
from mirage.runs.progress import Progress
from mirage.runs.store import ResumableJSONL
from mirage.scoring.xor_attriqa import prepare_item
from mirage.scoring.xor_data import XorItem

__all__ = ["CONTEXTCITE_NUM_ABLATIONS", "STORE_NAME", "ablated_prompt", "context_cite", "contextcite_citer",
           "contextcite_passage_scores", "contextcite_scores", "run_contextcite", "store_settings"]

#: ContextCiter's default number of ablations (context-cite 0.0.4; a test checks the installed default).
CONTEXTCITE_NUM_ABLATIONS = 64
#: The store's file name inside the output folder.
STORE_NAME = "contextcite.jsonl"


# -- ContextCite, imported offline ------------------------------------------------------------------------------------

def _no_download(*_args: Any, **_kwargs: Any) -> bool:
    return False


@functools.cache
def context_cite() -> Any:
    """The ``context_cite`` package, imported without network access.

    ``context_cite.utils`` runs ``nltk.download("punkt_tab")`` when it is imported; that would try the network (and
    fail here). The call is replaced by a no-op for the import only; no NLTK data is added to NLTK's path. The punkt
    data serves ContextCite's sentence partitioner, which this adapter replaces by one source per document.
    """
    from unittest import mock

    import nltk

    with mock.patch.object(nltk, "download", _no_download):
        import context_cite as cc
        import context_cite.utils  # the module that downloads
    return cc


@functools.cache
def _classes() -> tuple[type, type]:
    """The partitioner and the citer, defined once ContextCite is imported (their base classes are its own)."""
    context_cite()  # imported without network access first
    from context_cite import ContextCiter
    from context_cite.context_partitioner import BaseContextPartitioner
    from context_cite.utils import get_masks_and_logit_probs

    class DocumentPartitioner(BaseContextPartitioner):
        """One source per document: the rendered entries of mirage's documents block, whose spans (in the block)
        were recorded when mirage built the prompt. ``get_context(mask)`` is the block with the entries whose mask
        is False removed (ContextCite's masks are True for a kept source)."""

        def __init__(self, context: str, spans: Sequence[Span]) -> None:
            super().__init__(context)
            if "".join(context[s:e] for s, e in spans) != context:
                raise ValueError("the document entries do not tile the documents block")
            self.spans = tuple(spans)

        @property
        def num_sources(self) -> int:
            return len(self.spans)

        def split_context(self) -> None:
            """Nothing to split: the spans come from how the prompt was built."""

        def get_source(self, index: int) -> str:
            start, end = self.spans[index]
            return self.context[start:end]

        def get_context(self, mask: Any = None) -> str:
            keep = [True] * self.num_sources if mask is None else [bool(k) for k in mask]
            return "".join(self.get_source(i) for i, k in enumerate(keep) if k)

    class ForcedContextCiter(ContextCiter):
        """ContextCite on mirage's prompt and a given answer.

        The prompt: ContextCite renders ``"Context: {context}\\n\\nQuery: {query}"`` as a user message through the
        tokenizer's ``apply_chat_template`` (in ``_get_prompt_ids``). mirage's prompt text already has its template
        and the chat template applied, so ``_get_prompt_ids`` is replaced: the prompt is mirage's text with the
        ablated documents block in place of the whole one, tokenized as mirage tokenizes prompts
        (:func:`mirage.attribution.tokenization.encode_prompt_text`, user text never read as special tokens). With every
        source kept, its ids are mirage's prompt ids.

        The response: ContextCite generates it lazily (``_output`` caches ``prompt + response`` text under
        ``_cache["output"]``) and takes its ids by re-tokenizing that text after the prompt's length, which can merge
        tokens across the boundary. Here the cache holds mirage's prompt and the given answer, so nothing is ever
        generated, and ``_response_ids`` is mirage's own answer tokenization
        (:func:`mirage.attribution.tokenization.tokenize_answer`), the tokens mirage force-decodes. The whole answer is
        attributed through ContextCite's ``_get_attributions_for_ids_range(0, n_answer)``, what ``get_attributions``
        computes for the whole response (without its character-to-token mapping of the re-tokenized text).
        """

        def __init__(self, model: Any, tokenizer: Any, prompt: BuiltPrompt, question: str, answer: str, *,
                     num_ablations: int, base_seed: int) -> None:
            start, _ = prompt.context_span
            partitioner = DocumentPartitioner(prompt.context, [(s - start, e - start) for s, e in prompt.doc_spans])
            super().__init__(model, tokenizer, prompt.context, question, num_ablations=num_ablations,
                             partitioner=partitioner)
            self.prompt = prompt
            self.answer_ids = list(tokenize_answer(tokenizer, answer).ids)
            self.base_seed = base_seed
            self._cache["output"] = prompt.text + answer  # the given answer: ContextCite never generates

        def _get_prompt_ids(self, mask: Any = None, return_prompt: bool = False) -> Any:
            keep = None if mask is None else [bool(k) for k in mask]
            text, user_spans = ablated_prompt(self.prompt, keep, context=self.partitioner.get_context(mask))
            ids, _ = encode_prompt_text(self.tokenizer, text, self.prompt.add_special_tokens, user_spans)
            return (ids, text) if return_prompt else ids

        @property
        def _response_ids(self) -> list[int]:
            return self.answer_ids

        def _compute_masks_and_logit_probs(self) -> None:
            # ContextCite's own routine, with the seed passed on (its method always uses mask seeds 0 … N-1) and
            # its per-item tqdm bar silenced (the CLI shows one bar over the items).
            from unittest import mock

            import context_cite.utils as cc_utils

            with mock.patch.object(cc_utils, "tqdm", _no_bar), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r".*torch\.cuda\.amp\.autocast.*", category=FutureWarning)
                warnings.filterwarnings("ignore", message="CUDA is not available", category=UserWarning)
                masks, logit_probs = get_masks_and_logit_probs(
                    self.model, self.tokenizer, self.num_ablations, self.num_sources, self._get_prompt_ids,
                    self._response_ids, self.ablation_keep_prob, self.batch_size, base_seed=self.base_seed)
            self._cache["reg_masks"], self._cache["reg_logit_probs"] = masks, logit_probs

        def scores(self) -> list[float]:
            """The surrogate's weight of each source, for the whole answer."""
            weight, _bias = self._get_attributions_for_ids_range(0, len(self.answer_ids))
            return [float(w) for w in weight]

    return DocumentPartitioner, ForcedContextCiter


def _no_bar(iterable: Iterable[Any], *_args: Any, **_kwargs: Any) -> Iterable[Any]:
    return iterable


# -- the prompt with documents removed --------------------------------------------------------------------------------

def ablated_prompt(prompt: BuiltPrompt, keep: Sequence[bool] | None, *,
                   context: str | None = None) -> tuple[str, tuple[Span, ...]]:
    """mirage's prompt text with the entries of the documents whose ``keep`` is False removed, and its user-text
    spans moved to match (those inside a removed entry dropped). ``keep=None`` keeps every document (the prompt
    itself). ``context``: the ablated documents block, when the caller already has it (it must be the kept
    entries)."""
    if keep is None:
        keep = [True] * len(prompt.doc_spans)
    if len(keep) != len(prompt.doc_spans):
        raise ValueError(f"a mask of {len(keep)} for {len(prompt.doc_spans)} documents")
    removed = [span for span, k in zip(prompt.doc_spans, keep) if not k]
    block_start, block_end = prompt.context_span
    kept_block = "".join(prompt.text[s:e] for (s, e), k in zip(prompt.doc_spans, keep) if k)
    if context is not None and context != kept_block:
        raise ValueError("the ablated documents block is not the kept documents' entries")
    text = prompt.text[:block_start] + kept_block + prompt.text[block_end:]

    def moved(pos: int) -> int:
        return pos - sum(e - s for s, e in removed if e <= pos)

    spans = tuple((moved(s), moved(e)) for s, e in prompt.user_spans
                  if not any(s < r_end and r_start < e for r_start, r_end in removed))
    return text, spans


# -- one item ---------------------------------------------------------------------------------------------------------

def contextcite_citer(mirage: Any, item: XorItem, *, num_ablations: int = CONTEXTCITE_NUM_ABLATIONS,
                      seed: int = 0) -> Any:
    """ContextCite's citer on the item as mirage's XOR-AttriQA scorer attributes it (nothing run yet)."""
    lm = mirage.lm
    if lm.is_encoder_decoder:
        raise ValueError("ContextCite scores causal language models only; this model is an encoder-decoder.")
    if num_ablations < 1 or seed < 0:
        raise ValueError(f"num_ablations must be >= 1 and seed >= 0, got {num_ablations} and {seed}")
    text, prep = prepare_item(mirage, item)
    _, citer_class = _classes()
    tokenizer = lm.tokenizer
    if tokenizer.pad_token is None:
        # ContextCiter sets pad_token = eos_token on the tokenizer it is given: give it a copy, not the caller's.
        import copy

        tokenizer = copy.deepcopy(tokenizer)
    citer = citer_class(lm.model, tokenizer, prep.prompt, prep.item.question, text, num_ablations=num_ablations,
                        base_seed=seed * num_ablations)
    if not citer.answer_ids:
        raise InputError("has no tokens.", field="answer")
    return citer


def _answer_rows_only(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """Forward pre-hook for ContextCite's ablation passes: the output head runs on the rows ContextCite reads.

    ContextCite calls ``model(input_ids, attention_mask, labels)`` and keeps ``logits[:, -(n+1):-1]`` (n: the
    answer's tokens, the labels that are not -100); the loss the labels make it compute is never read. The hook
    drops ``labels`` and asks for the last n+1 rows' logits only (``logits_to_keep``), so the slice ContextCite takes
    is the same rows, computed the same way, without the head over every prompt position, which on a large
    vocabulary (gemma3's 262k entries) costs more than the layers. mirage's own passes do the same
    (:func:`mirage.attribution.forward.causal_pass`)."""
    labels = kwargs.get("labels")
    if labels is None or "logits_to_keep" in kwargs:
        return None
    kept = {k: v for k, v in kwargs.items() if k != "labels"}
    kept["logits_to_keep"] = int((labels != -100).sum(-1).max()) + 1
    return args, kept


def contextcite_passage_scores(mirage: Any, item: XorItem, *, num_ablations: int = CONTEXTCITE_NUM_ABLATIONS,
                               seed: int = 0, full_head: bool = False) -> tuple[list[float], float, int]:
    """ContextCite's score of each passage of ``item`` for its force-decoded answer, the wall seconds it took, and
    the number of sequences the model ran (``num_ablations``: ContextCite runs one pass per ablation, and none for
    a response it is given). The passes compute the logits of the rows ContextCite reads only
    (:func:`_answer_rows_only`); ``full_head``: over every position, as ContextCite's own code does (same scores up
    to float rounding, slower). Raises InputError for items mirage's pipeline rejects."""
    _classes()  # ContextCite's import (seconds, once per process) is not the item's time
    start = time.perf_counter()
    citer = contextcite_citer(mirage, item, num_ablations=num_ablations, seed=seed)
    counted = [0]

    def count(_module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        counted[0] += int(ids.shape[0]) if ids is not None else 1

    model = mirage.lm.model
    hooks = [model.register_forward_pre_hook(count, with_kwargs=True)]
    if not full_head:
        hooks.append(model.register_forward_pre_hook(_answer_rows_only, with_kwargs=True))
    try:
        scores = citer.scores()
    finally:
        for hook in hooks:
            hook.remove()
    return scores, time.perf_counter() - start, counted[0]


# -- a batch of items -------------------------------------------------------------------------------------------------

def contextcite_scores(records: Iterable[Any]) -> dict[str, list[float]]:
    """Per-passage scores by item key, from the records of a ``contextcite.jsonl`` (error records ignored)."""
    return {rec["key"]: [float(v) if v is not None else math.nan for v in rec["scores"]]
            for rec in records if isinstance(rec, dict) and isinstance(rec.get("scores"), list)}


def store_settings(model: str, text: str, prompt: Any, *, num_ablations: int, seed: int) -> dict[str, Any]:
    """What the stored scores depend on (the store refuses a file made with other settings)."""
    return {"method": "contextcite", "model": model, "text": text, "prompt": dataclasses.asdict(prompt),
            "num_ablations": num_ablations, "seed": seed}


def run_contextcite(model: Any, items: Sequence[XorItem], *, store: ResumableJSONL, num_ablations: int, seed: int,
                    progress: Progress | None = None,
                    full_head: bool = False) -> tuple[dict[str, list[float]], list[BadRow]]:
    """Scores of every item, running ContextCite only for keys without stored scores (items that failed before are
    tried again), each record written as its item finishes. ``model``: a Mirage, or a function returning one, called
    only if something needs to run. Items that fail come back as BadRow and are stored as error records; none stops
    the batch."""
    scores = contextcite_scores(store.records())
    todo: dict[str, XorItem] = {}
    for item in items:
        if item.key not in scores:
            todo.setdefault(item.key, item)
    failed: list[BadRow] = []
    if not todo:
        return scores, failed
    mirage = resolve_mirage(model)
    iterable: Iterable[XorItem] = todo.values()
    if progress is not None:
        iterable = progress(iterable, len(todo), "contextcite")
    for item in iterable:
        try:
            values, seconds, n_forward = contextcite_passage_scores(mirage, item, num_ablations=num_ablations,
                                                                    seed=seed, full_head=full_head)
        except Exception as err:  # noqa: BLE001 - one bad item never stops the batch
            message = str(err) if isinstance(err, InputError) else f"{type(err).__name__}: {err}"
            failed.append(BadRow(file=item.file, line=item.line, error=message))
            store.write_once({"key": item.key, "file": item.file, "line": item.line, "error": message})
            continue
        scores[item.key] = values
        store.write({"key": item.key, "scores": values, "seconds": round(seconds, 4), "n_forward": n_forward,
                     "n_docs": len(item.passages)})
    return scores, failed
