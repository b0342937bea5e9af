"""The one interface every document-level attribution method follows: what a method is given
(:class:`DocumentInputs`: the prepared prompt with its document spans and the answer tokens), what it returns
(:class:`DocumentAttribution`: per answer token a score per document, per context token where the method has them,
and what it cost, :class:`PassCost`), how the cost is measured (:class:`PassMeter`), and the method base class
(:class:`DocumentMethod`) with its registry (:data:`mirage.registry.DOCUMENT_METHODS`,
:func:`register_document_method`, :func:`attribute_documents`).

Shapes: ``n_answer`` answer tokens, ``n_docs`` documents, ``n_context`` context tokens (the prompt's tokens inside a
document's rendered entry, in the order of ``prepared.tokens.context_positions``).
"""

from __future__ import annotations

import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import torch

from mirage.attribution.planner import probing
from mirage.attribution.serialization import JSONRecord, library_versions
from mirage.likelihood.signals import Prepare, prompt_with_documents
from mirage.registry import DOCUMENT_METHODS

if TYPE_CHECKING:
    from mirage.attribution.models import LoadedModel
    from mirage.attribution.prompts import PreparedItem

__all__ = [
    "DocumentAttribution",
    "DocumentInputs",
    "DocumentMethod",
    "MethodScores",
    "PassCost",
    "PassMeter",
    "attribute_documents",
    "document_inputs",
    "register_document_method",
]


@dataclass(frozen=True)
class DocumentInputs:
    """What a document attribution method is given: the model, the item as :meth:`mirage.Mirage.prepare` prepared it
    (its prompt, each context token's position and 0-based document: ``prepared.tokens.context_positions`` /
    ``context_docs``), the answer's token ids, and ``prepare``, which prepares the item again with fewer documents
    (:data:`mirage.likelihood.signals.Prepare`: ``functools.partial(m.prepare, config=cfg)``). Build it with
    :func:`document_inputs` from a :class:`mirage.Mirage`."""

    lm: LoadedModel
    prepared: PreparedItem
    answer_ids: tuple[int, ...]
    prepare: Prepare

    def __post_init__(self) -> None:
        object.__setattr__(self, "answer_ids", tuple(int(i) for i in self.answer_ids))
        if not self.answer_ids:
            raise ValueError("answer_ids is empty: give an answer of at least one token.")
        if not self.prepared.item.docs:
            raise ValueError("prepared has no documents: document attribution needs at least one in item.docs.")

    @property
    def n_docs(self) -> int:
        return len(self.prepared.item.docs)

    @property
    def n_answer(self) -> int:
        return len(self.answer_ids)

    @property
    def n_context(self) -> int:
        return len(self.prepared.tokens.context_positions)

    @property
    def all_docs(self) -> tuple[int, ...]:
        """Every document's 0-based index, in prompt order."""
        return tuple(range(self.n_docs))

    def per_document(self, context: torch.Tensor) -> torch.Tensor:
        """``context`` ``[n_answer, n_context, ...]`` (a score per context token, in the order of
        ``prepared.tokens.context_positions``) summed over each document's tokens: ``[n_answer, n_docs, ...]``."""
        docs = torch.tensor(list(self.prepared.tokens.context_docs), dtype=torch.long, device=context.device)
        return context.new_zeros((context.shape[0], self.n_docs, *context.shape[2:])).index_add_(1, docs, context)

    def with_documents(self, kept: Sequence[int]) -> PreparedItem:
        """The item prepared with only the documents ``kept`` (0-based, in the order given, numbered from 1 in the
        prompt) and room for the answer; all of them, in order, is :attr:`prepared` itself."""
        if tuple(kept) == self.all_docs:
            return self.prepared
        if not kept:
            raise ValueError("kept is empty: the prompt without documents is prompt_ids(()), the contextless one.")
        return prompt_with_documents(self.prepared, kept, prepare=self.prepare, reserve_tokens=self.n_answer + 1)

    def prompt_ids(self, kept: Sequence[int]) -> list[int]:
        """The prompt's token ids with only the documents ``kept`` (see :meth:`with_documents`); none: the
        contextless prompt (``prepared.tokens.contextless_ids``)."""
        if not kept:
            return list(self.prepared.tokens.contextless_ids)
        return list(self.with_documents(kept).tokens.ids)


def document_inputs(mirage: Any, item: Any, answer: str | Sequence[int] | None = None, *,
                    config: Any = None) -> DocumentInputs:
    """:class:`DocumentInputs` for ``item`` (a raw item, a :class:`~mirage.data.inputs.RAGItem`, or a
    :class:`~mirage.attribution.prompts.PreparedItem` already prepared by ``mirage``) and ``answer`` (its text,
    its token ids, or None: the item's ``output``), on a :class:`mirage.Mirage` (``config``: its configuration,
    when not the Mirage's own). A raw item is prepared with room for the answer, as the XOR-AttriQA scorer does."""
    from mirage.attribution.prompts import PreparedItem
    from mirage.attribution.tokenization import tokenize_answer

    cfg = config or mirage.config
    prepare = functools.partial(mirage.prepare, config=cfg)
    if answer is None:
        answer = item.item.output if isinstance(item, PreparedItem) else (
            item.get("output") if isinstance(item, Mapping) else getattr(item, "output", None))
        if not answer:
            raise ValueError("answer is missing: give the answer (text or token ids) or an item with an output.")
    answer_ids = tokenize_answer(mirage.lm.tokenizer, answer).ids if isinstance(answer, str) else tuple(answer)
    prepared = item if isinstance(item, PreparedItem) else prepare(item, reserve_tokens=len(answer_ids) + 1)
    return DocumentInputs(lm=mirage.lm, prepared=prepared, answer_ids=answer_ids, prepare=prepare)


@dataclass(frozen=True)
class PassCost(JSONRecord):
    """What one method's call cost: model passes by kind (a forward pass that extends a cached prefix counts as
    one), the positions they computed (``tokens``: input positions over every pass, a cached prefix not counted
    again), wall-clock ``seconds``, and the peak memory allocated on the GPU during the call (None on a CPU, where
    torch does not measure it per call)."""

    forward_passes: int = 0
    jvp_passes: int = 0
    backward_passes: int = 0
    tokens: int = 0
    seconds: float = 0.0
    peak_memory_bytes: int | None = None


class PassMeter:
    """Counts a model's passes for a block (a forward hook on the model: each completed call of ``lm.model`` is one
    pass, of the kind :meth:`mode` sets, ``"forward"`` by default; the memory planner's one-time probes of the model,
    :func:`mirage.attribution.planner.probing`, are not counted), times the block and, on a GPU, takes its peak
    memory. Backward passes do not call the model's forward: a method counts them with :meth:`add_backward`."""

    def __init__(self, lm: LoadedModel) -> None:
        self.lm = lm
        self.counts = {"forward": 0, "jvp": 0}
        self.tokens = 0
        self.backward = 0
        self._kind = "forward"
        self._start = 0.0
        self._seconds = 0.0
        self._handle: Any = None
        self._cuda = lm.device.type == "cuda"

    def _hook(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        if probing():  # the memory planner measuring the model once, not the method's work
            return
        self.counts[self._kind] += 1
        given = kwargs.get("input_ids")
        if given is None:
            given = kwargs.get("inputs_embeds")
        if given is None and args:
            given = args[0]
        if isinstance(given, torch.Tensor) and given.dim() >= 2:
            self.tokens += int(given.shape[0] * given.shape[1])

    def __enter__(self) -> PassMeter:  # noqa: PYI034 - typing.Self needs Python 3.11; the project runs on 3.10
        self._handle = self.lm.model.register_forward_hook(self._hook, with_kwargs=True)
        if self._cuda:
            torch.cuda.synchronize(self.lm.device)
            torch.cuda.reset_peak_memory_stats(self.lm.device)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._cuda:
            torch.cuda.synchronize(self.lm.device)
        self._seconds = time.perf_counter() - self._start
        self._handle.remove()

    @contextmanager
    def mode(self, kind: str) -> Iterator[None]:
        """Count the model's calls in the block as ``kind`` passes (``"jvp"``: forward-mode passes)."""
        before, self._kind = self._kind, kind
        try:
            yield
        finally:
            self._kind = before

    def add_backward(self, n: int = 1) -> None:
        """Count ``n`` backward passes."""
        self.backward += n

    def add_forward(self, n: int, *, tokens: int) -> None:
        """Count ``n`` forward passes' worth of work the model's forward hook does not see (blocks run again one at a
        time inside a pass, as :mod:`~mirage.attribution.methods.zeroing` does), over ``tokens`` positions."""
        self.counts["forward"] += n
        self.tokens += tokens

    def cost(self) -> PassCost:
        peak = int(torch.cuda.max_memory_allocated(self.lm.device)) if self._cuda else None
        return PassCost(forward_passes=self.counts["forward"], jvp_passes=self.counts["jvp"],
                        backward_passes=self.backward, tokens=self.tokens, seconds=self._seconds,
                        peak_memory_bytes=peak)


def _score_rows(matrix: torch.Tensor) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in row) for row in matrix.tolist())


@dataclass(frozen=True)
class DocumentAttribution(JSONRecord):
    """One method's scores for one answer: ``doc_scores[t][d]``, answer token t's score for document d (0-based)
    ``[n_answer, n_docs]``; ``context_scores[t][j]`` its score for context token j ``[n_answer, n_context]``, where
    the method scores context tokens (else None); the method's name and ``options`` (its settings, plain JSON);
    ``cost``; ``notes`` (how it ran, e.g. the attention kernel it fell back to); ``versions`` (mirage, torch,
    transformers). Round-trips through plain JSON (``to_json`` / ``from_json``)."""

    method: str
    options: dict[str, Any]
    doc_scores: tuple[tuple[float, ...], ...]
    context_scores: tuple[tuple[float, ...], ...] | None
    cost: PassCost
    notes: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def n_answer(self) -> int:
        return len(self.doc_scores)

    @property
    def n_docs(self) -> int:
        return len(self.doc_scores[0]) if self.doc_scores else 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DocumentAttribution:
        known = cls.known_fields(data)
        context = known.get("context_scores")
        known["doc_scores"] = tuple(tuple(float(v) for v in row) for row in known["doc_scores"])
        known["context_scores"] = None if context is None else tuple(tuple(float(v) for v in row) for row in context)
        known["cost"] = PassCost.from_dict(known["cost"])
        return cls(**known)


class MethodScores(NamedTuple):
    """What a method computes: ``doc`` ``[n_answer, n_docs]``, ``context`` ``[n_answer, n_context]`` or None, and
    notes on how it ran."""

    doc: torch.Tensor
    context: torch.Tensor | None = None
    notes: Mapping[str, str] | None = None


class DocumentMethod(ABC):
    """A document attribution method: a frozen dataclass whose fields are its settings (``name`` first, the name
    it is registered under), with :meth:`compute`; :meth:`attribute` runs it on :class:`DocumentInputs`, checks
    the shapes and measures the cost. Register an instance with :func:`register_document_method`; a variant with
    other settings is ``dataclasses.replace(method, ...)``."""

    name: str
    #: Whether every score can be exactly 0 by design (a sparse surrogate, where no document moves the answer past
    #: its penalty); the conformance test asks any other method for some non-zero score.
    sparse: ClassVar[bool] = False

    @abstractmethod
    def compute(self, inputs: DocumentInputs, meter: PassMeter) -> MethodScores:
        """The scores of ``inputs`` (its model's passes counted by ``meter``)."""

    def options(self) -> dict[str, Any]:
        """The method's settings (its dataclass fields but ``name``), as plain JSON values."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "name"}  # type: ignore[arg-type]

    def attribute(self, inputs: DocumentInputs) -> DocumentAttribution:
        """The method's :class:`DocumentAttribution` of ``inputs``."""
        with PassMeter(inputs.lm) as meter:
            scores = self.compute(inputs, meter)
        doc = self._checked("document", scores.doc, (inputs.n_answer, inputs.n_docs))
        context = (None if scores.context is None
                   else self._checked("context", scores.context, (inputs.n_answer, inputs.n_context)))
        return DocumentAttribution(method=self.name, options=self.options(), doc_scores=_score_rows(doc),
                                   context_scores=None if context is None else _score_rows(context), cost=meter.cost(),
                                   notes=dict(scores.notes or {}), versions=library_versions())

    def _checked(self, what: str, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
        """``values`` as float64 on the CPU, or a RuntimeError naming the method when their shape is not ``shape``
        or some are not finite."""
        values = values.detach().double().cpu()
        if tuple(values.shape) != shape:
            raise RuntimeError(f"{self.name} returned {what} scores of shape {list(values.shape)}, not {list(shape)}.")
        if not bool(torch.isfinite(values).all()):
            raise RuntimeError(f"{self.name}: {int((~torch.isfinite(values)).sum())} {what} score(s) are not finite "
                               "(NaN or inf): the model's logits overflow in its dtype.")
        return values


def register_document_method(method: DocumentMethod, *, overwrite: bool = False) -> None:
    """Make ``method`` available as ``DOCUMENT_METHODS[method.name]`` (an existing name is replaced only with
    ``overwrite``)."""
    if not isinstance(method, DocumentMethod):
        raise TypeError(f"a document attribution method must be a DocumentMethod, got {type(method).__name__}.")
    DOCUMENT_METHODS.register(method.name, method, overwrite=overwrite)


def attribute_documents(inputs: DocumentInputs, method: str | DocumentMethod, **options: Any) -> DocumentAttribution:
    """Run ``method`` (a registered name or a method) on ``inputs``; ``options`` replace its settings
    (``attribute_documents(inputs, "shapley", permutations=32)``)."""
    found = DOCUMENT_METHODS.lookup(method) if isinstance(method, str) else method
    if options:
        unknown = sorted(set(options) - set(found.options()))
        if unknown:
            raise ValueError(f"{found.name} has no setting {', '.join(map(repr, unknown))}; its settings: "
                             f"{', '.join(map(repr, found.options())) or 'none'}.")
        found = replace(found, **options)  # type: ignore[type-var]
    return found.attribute(inputs)
