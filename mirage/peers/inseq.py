"""The reference procedure adapter: the MIRAGE paper's procedure as inseq implements it (``attribute_context``, CTI +
CCI), run on an already loaded model and mapped onto mirage's prompts, for the parity tests and the benchmarks.

inseq is an optional dependency (``bash scripts/setup.sh --test`` installs it), imported only when
:func:`run_reference` runs. This is the procedure of the MIRAGE paper as implemented in inseq 0.7.1
(``inseq/commands/attribute_context/attribute_context.py``):

* CTI: ``kl_divergence`` step score between the contextless run (the attributed "original" input) and the
  with-documents run (``contrast_targets``), i.e. per answer token KL(P_noctx || P_ctx), with answer positions
  aligned from the right; tokens with ``|score| >= mean + std_k * std`` (unbiased std) are selected.
* CCI: for each selected answer token, ``saliency`` (|d f / d input embedding|, then L2 norm over the hidden
  dimension, NOT normalized) of ``f = contrast_prob_diff(logprob=True)`` = log p_ctx(y) - log p_ctx(y_nc), where
  ``y_nc`` is the greedy next token of the contextless prompt + contextual answer prefix.  When ``y_nc == y`` inseq
  sets ``contrast_force_inputs`` and the contrast term is computed on the contextless input without gradient, so the
  attributed quantity is effectively log p_ctx(y).

Argument mapping used (decoder-only, ``decoder_input_output_separator=""``): with ``prompt = before + context + after``
and ``p`` = the longest common prefix of ``before`` and ``contextless_prompt``::

    input_current_text             = before[:p]
    input_template                 = "{current}" + esc(before[p:]) + "{context}" + esc(after)
    input_context_text             = context
    contextless_input_current_text = "{current}" + esc(contextless_prompt[p:])
    output_current_text            = answer

(``esc`` doubles curly braces.)  ``{current}`` is put *before* ``{context}`` on purpose: inseq counts the tokens that
precede the context with ``input_template.partition("{context}")[0]`` and only ``.format``s that prefix when it
contains ``{current}``, so a literal brace before the documents would otherwise shift every CCI score.  If the
prompt and the contextless prompt share no prefix (e.g. the prompt starts with the documents), the common *suffix*
of ``after`` and ``contextless_prompt`` is used as ``input_current_text`` instead.

Every special token that occurs literally in the prompts (``<|im_start|>``, ``<|im_end|>`` for ChatML) is passed in
``special_tokens_to_keep``: inseq rebuilds the CCI input string from *filtered* tokens, so without it CCI would run
on a prompt with the chat markers deleted.

No monkeypatch is needed for transformers 5.23 (inseq 0.7.1 already handles v5).  Side effects of inseq that are
undone here: ``inseq.load_model`` sets ``tokenizer.padding_side/truncation_side = "left"`` (restored after each run)
and would move the model to its default device (we pass the model's own device); importing
``inseq.commands.attribute_context`` calls ``warnings.filterwarnings("ignore")`` and silences transformers logging
process-wide (both restored after import).

``python benchmarks/reference_check.py`` checks it against a plain-torch re-implementation.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from mirage.attribution.aggregation import cite_sentences, cite_token
from mirage.attribution.cci import select_context
from mirage.attribution.results import AttributionResult
from mirage.config import CCIConfig

if TYPE_CHECKING:
    from mirage.attribution.tokenization import TokenizedPrompt

__all__ = ["fit_to_prompt_context", "import_inseq", "passage_predictions", "run_reference", "sentence_citations"]


@dataclass
class ReferenceOutput:
    """What the reference procedure computed for one answer (token indices are into ``answer_tokens``)."""

    answer_tokens: list[str]  # the answer tokens inseq scored for CTI (raw tokenizer tokens, e.g. "ĠIn")
    cti_scores: list[float]  # per answer token: KL(P_noctx || P_ctx)
    cti_threshold: float  # mean + std_k * std of cti_scores (what inseq compared |score| against)
    selected: list[int]  # indices into answer_tokens inseq kept as context-sensitive, ascending
    context_tokens: list[str]  # the input_context tokens
    cci_scores: dict[int, list[float]]  # per selected index: saliency on each context token
    contrast_tokens: dict[int, str]  # per selected index: the contextless alternative token inseq used
    seconds: float  # wall time of inseq's attribute_context_with_model (model wrapping excluded)
    notes: list[str] = field(default_factory=list)  # tokenization mismatches detected (empty = faithful)
    scored: tuple[int, int] = (0, 0)  # [start, end) of the context tokens inseq actually scored (after re-alignment)


_INSEQ_MODELS: dict[tuple[int, int], Any] = {}


def import_inseq():
    """Import inseq's attribute_context without leaking its global warning/logging changes."""
    saved_filters = warnings.filters[:]
    import transformers

    saved_verbosity = transformers.logging.get_verbosity()
    try:
        import inseq
        from inseq.commands.attribute_context import attribute_context as ac_module
        from inseq.commands.attribute_context.attribute_context_args import AttributeContextArgs
        from inseq.commands.attribute_context.attribute_context_helpers import get_scores_threshold
    finally:
        warnings.filters[:] = saved_filters
        transformers.logging.set_verbosity(saved_verbosity)
    return inseq, ac_module.attribute_context_with_model, AttributeContextArgs, get_scores_threshold


def _inseq_model(model, tokenizer):
    key = (id(model), id(tokenizer))
    if key not in _INSEQ_MODELS:
        inseq, *_ = import_inseq()
        device = next(model.parameters()).device
        if device.type == "cuda" and device.index is not None:
            torch.cuda.set_device(device)  # inseq names a device by its type alone ("cuda", never "cuda:0")
        _INSEQ_MODELS[key] = inseq.load_model(model, "saliency", tokenizer=tokenizer, device=device.type)
    return _INSEQ_MODELS[key]


def _context_shift(inseq_model, tokenizer, prompt: str, context: str, kwargs: dict) -> int:
    """How many tokens inseq's context slice starts before (<0: after) the real context tokens of ``prompt``."""
    from inseq.commands.attribute_context.attribute_context_helpers import get_filtered_tokens

    prefix, *_ = kwargs["input_template"].partition("{context}")
    if "{current}" in prefix:
        prefix = prefix.format(current=kwargs["input_current_text"])
    inseq_count = len(get_filtered_tokens(prefix, inseq_model, kwargs.get("special_tokens_to_keep", []),
                                          is_target=False))
    # inseq encodes the prompt with the tokenizer's special tokens (Gemma's <bos>, which has an empty offset) but counts
    # the prefix on filtered tokens, so the real count is every token of the encoded prompt before the context.
    start = prompt.index(context)
    enc = tokenizer(prompt, add_special_tokens=True, return_offsets_mapping=True)
    real_count = next(i for i, (_, b) in enumerate(enc["offset_mapping"]) if b > start)
    return real_count - inseq_count


def _esc(s: str) -> str:
    return s.replace("{", "{{").replace("}", "}}")


def build_inseq_args(prompt: str, contextless_prompt: str, context: str, answer: str, tokenizer, std_k: float,
                     logprob: bool = True):
    """The keyword arguments of ``AttributeContextArgs`` that reproduce (prompt, contextless_prompt, answer).
    ``logprob``: CCI's target ``contrast_prob_diff`` on log-probabilities (the ELI5 scripts') or on probabilities
    (``False``: the authors' XOR-AttriQA script, the paper's Eq. 2)."""
    if prompt.count(context) != 1:
        raise ValueError("context must occur exactly once in prompt")
    i = prompt.index(context)
    before, after = prompt[:i], prompt[i + len(context) :]
    p = 0
    while p < min(len(before), len(contextless_prompt)) and before[p] == contextless_prompt[p]:
        p += 1
    if p > 0:
        current = before[:p]
        input_template = "{current}" + _esc(before[p:]) + "{context}" + _esc(after)
        contextless_template = "{current}" + _esc(contextless_prompt[p:])
    else:  # prompt starts with the documents: use the common suffix as the current text
        if "{" in before or "}" in before:
            raise NotImplementedError("braces before the context with no common prefix: inseq would miscount it")
        k = 0
        while k < min(len(after), len(contextless_prompt)) and after[-1 - k] == contextless_prompt[-1 - k]:
            k += 1
        if k == 0:
            raise ValueError("prompt and contextless_prompt share neither a prefix nor a suffix")
        current = after[len(after) - k :]
        input_template = _esc(before) + "{context}" + _esc(after[: len(after) - k]) + "{current}"
        contextless_template = _esc(contextless_prompt[: len(contextless_prompt) - k]) + "{current}"
    specials = [t for t in tokenizer.all_special_tokens if t in prompt or t in contextless_prompt]
    return dict(  # noqa: C408
        input_current_text=current,
        input_context_text=context,
        input_template=input_template,
        contextless_input_current_text=contextless_template,
        output_current_text=answer,
        output_template="{current}",
        attributed_fn="contrast_prob_diff",
        attribution_method="saliency",
        attribution_kwargs={"logprob": True} if logprob else {},
        context_sensitivity_metric="kl_divergence",
        context_sensitivity_std_threshold=std_k,
        decoder_input_output_separator="",
        special_tokens_to_keep=specials,
        generation_kwargs={"do_sample": False},  # contrast token = greedy contextless next token
        handle_output_context_strategy="pre",  # never prompt the user
        show_viz=False,
        add_output_info=False,
        save_path=None,
        viz_path=None,
    )


def _tokenization_notes(tokenizer, prompt, context, answer, out, inseq_out) -> list[str]:
    """Check that inseq scored what a user would expect; return human-readable mismatches."""
    notes = []
    conv = tokenizer.convert_ids_to_tokens
    ans_ids = tokenizer(answer, add_special_tokens=False).input_ids
    if conv(ans_ids) != out.answer_tokens:
        notes.append(f"answer tokens differ: inseq {out.answer_tokens} vs tokenizer {conv(ans_ids)}")
    full_ids = tokenizer(prompt + answer, add_special_tokens=False).input_ids
    if full_ids[len(full_ids) - len(ans_ids) :] != ans_ids:
        notes.append("prompt+answer tokenization merges across the prompt/answer boundary")
    ctx_ids = tokenizer(context, add_special_tokens=False).input_ids
    if conv(ctx_ids) != out.context_tokens:
        notes.append("context tokens differ from tokenizer(context)")
    before = prompt[: prompt.index(context)]
    n_before = len(tokenizer(before, add_special_tokens=False).input_ids)
    prompt_ids = tokenizer(prompt, add_special_tokens=False).input_ids
    in_prompt = prompt_ids[n_before : n_before + len(ctx_ids)]
    if in_prompt != ctx_ids:
        diff = [j for j, (a, b) in enumerate(zip(ctx_ids, in_prompt)) if a != b] or [min(len(ctx_ids), len(in_prompt))]
        j = diff[0]
        notes.append(
            f"context tokenized differently inside the prompt at context positions {diff[:5]}"
            f" (e.g. {conv(ctx_ids[j : j + 1])} -> {conv(in_prompt[j : j + 1])});"
            " inseq's CCI slice uses the in-prompt tokens at those positions"
        )
    n_prompt = len(full_ids) - len(ans_ids)
    for c in inseq_out.cci_scores:
        ids = tokenizer(c.contextual_output, add_special_tokens=False).input_ids
        if ids != full_ids[: n_prompt + c.cti_idx + 1]:
            notes.append(f"CCI step {c.cti_idx}: re-tokenized contextual prefix differs from the teacher-forced ids")
    return notes


def run_reference(
    model, tokenizer, *, prompt: str, contextless_prompt: str, context: str, answer: str, std_k: float = 1.0,
    logprob: bool = True,
) -> ReferenceOutput:
    """Run inseq's MIRAGE procedure (CTI kl_divergence + CCI saliency of contrast_prob_diff) on loaded objects;
    ``logprob=False`` attributes p(y) − p(y_nc) instead of log p(y) − log p(y_nc)."""
    _, attribute_context_with_model, AttributeContextArgs, get_scores_threshold = import_inseq()
    saved_sides = (tokenizer.padding_side, tokenizer.truncation_side)
    inseq_model = _inseq_model(model, tokenizer)
    kwargs = build_inseq_args(prompt, contextless_prompt, context, answer, tokenizer, std_k, logprob)
    args = AttributeContextArgs(model_name_or_path=model.config.name_or_path or "model", **kwargs)
    saved_filters = warnings.filters[:]
    inseq_logger = logging.getLogger("inseq")
    saved_level = inseq_logger.level
    try:
        tokenizer.padding_side = tokenizer.truncation_side = "left"  # what inseq's wrapper expects
        warnings.simplefilter("ignore")  # inseq warns on every contrastive step
        inseq_logger.setLevel(logging.ERROR)
        t0 = time.perf_counter()
        res = attribute_context_with_model(args, inseq_model)
        seconds = time.perf_counter() - t0
    finally:
        tokenizer.padding_side, tokenizer.truncation_side = saved_sides
        warnings.filters[:] = saved_filters  # type: ignore[index]  # typeshed says Sequence; it is the module's list
        inseq_logger.setLevel(saved_level)
    threshold = get_scores_threshold(res.cti_scores, std_k)
    shift = _context_shift(inseq_model, tokenizer, prompt, context, kwargs)
    if shift:
        # inseq slices the context scores after a prefix it counts by tokenizing the template's prefix alone; when
        # that count differs from the prefix's tokens inside the full prompt, its slice is off by `shift` tokens.
        # Re-align to the real context tokens (scores past inseq's slice are unknown: 0.0).
        for c in res.cci_scores:
            scores = list(c.input_context_scores)
            c.input_context_scores = (scores[shift:] + [0.0] * shift) if shift > 0 else [0.0] * -shift + scores[:shift]
    out = ReferenceOutput(
        answer_tokens=list(res.output_current_tokens),
        cti_scores=[float(s) for s in res.cti_scores],
        cti_threshold=float(threshold),
        selected=sorted(c.cti_idx for c in res.cci_scores),
        context_tokens=list(res.input_context_tokens),
        cci_scores={c.cti_idx: [float(s) for s in c.input_context_scores] for c in res.cci_scores},
        contrast_tokens={c.cti_idx: c.contrast_token for c in res.cci_scores},
        seconds=seconds,
    )
    out.notes = _tokenization_notes(tokenizer, prompt, context, answer, out, res)
    n_ctx = len(out.context_tokens)
    out.scored = (max(0, -shift), n_ctx - max(0, shift))
    if shift:
        out.notes.append(f"inseq's context slice was off by {shift} token(s); re-aligned")
    for c in res.cci_scores:
        if len(c.input_context_scores) != len(out.context_tokens):
            n_scores, n_ctx = len(c.input_context_scores), len(out.context_tokens)
            out.notes.append(f"CCI step {c.cti_idx}: {n_scores} scores for {n_ctx} context tokens")
    return out


def fit_to_prompt_context(ref: ReferenceOutput, tokenizer: Any, tokens: TokenizedPrompt) -> list[str]:
    """Fit ``ref``'s context to the context tokens mirage attributes (the tokens at ``tokens``' context positions), in
    place, and return what was done or what still differs (empty: the same tokens).
    inseq's context may end with a token mirage leaves out because it straddles the documents block's end
    (:func:`mirage.attribution.prompts.tokenize_prompt`): it is dropped from the comparison."""
    prompt_context_tokens = tokenizer.convert_ids_to_tokens([tokens.ids[p] for p in tokens.context_positions])
    n = len(prompt_context_tokens)
    extra = len(ref.context_tokens) - n
    notes = []
    if extra > 0 and list(ref.context_tokens[:n]) == list(prompt_context_tokens):
        notes.append(f"last {extra} inseq context token(s) straddle the block's end; not compared")
        ref.context_tokens = ref.context_tokens[:n]
        ref.cci_scores = {t: v[:n] for t, v in ref.cci_scores.items()}
        ref.scored = (ref.scored[0], min(ref.scored[1], n))
    if len(ref.context_tokens) != n:
        notes.append(f"{len(ref.context_tokens)} inseq context tokens, {n} in the prompt")
    return notes


def passage_predictions(ref: ReferenceOutput, context_docs: Sequence[int], selection: CCIConfig,
                        n_passages: int) -> list[bool]:
    """MIRAGE-EX's passage predictions from the reference's output: a passage is cited when a context token of it is
    among ``selection``'s top context tokens of some selected answer token (``context_docs``: each context token's
    passage, mirage's token-to-document map)."""
    kept = {context_docs[j] for t in ref.selected for j in select_context(ref.cci_scores[t], selection)}
    return [d in kept for d in range(n_passages)]


def sentence_citations(res: AttributionResult, context_docs: Sequence[int],
                       scores: Mapping[int, Sequence[float]]) -> list[list[int]]:
    """Per sentence of ``res``, the documents that per-token context scores (``scores[i]`` for answer token i, e.g.
    the reference's) make it cite, through mirage's own CCI selector and aggregation under ``res``'s configuration:
    what makes two methods' citations comparable. ``context_docs[j]`` is context token j's 0-based document."""
    cfg = CCIConfig(**res.config["cci"])
    cited = {i: cite_token(row, context_docs, cfg) for i, row in scores.items()}
    return cite_sentences(res.answer, [(s.start, s.end) for s in res.sentences], [t.start for t in res.tokens], cited,
                          res.config["aggregation"]["max_citations"])
