"""Does a (tuned) model cite? Generate answers to RAG items and measure their ``[n]`` self-citations.

    report = evaluate_citations(Mirage(load_tuned("out/sft/adapter")), examples, max_new_tokens=48)
    report.answers_cited          # share of answers with at least one citation of an existing document

Per answer: its self-citations per sentence (:func:`mirage.citations.parse_answer`), their union's precision and
recall against the documents labelled as supporting (where labels exist, :func:`mirage.bias.metrics.citation_set_prf`)
and whether the item's reference answer occurs in it (:func:`mirage.bias.metrics.exact_match`). Greedy decoding
with the inference prompt (:meth:`mirage.pipeline.Mirage.prepare`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..bias.metrics import citation_set_prf, exact_match
from ..citations import parse_answer
from ..generation import generate_answer
from ..serialization import JSONRecord, library_versions
from .data import TrainingExample

if TYPE_CHECKING:
    from ..pipeline import Mirage
    from ..progress import Progress


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass
class CitationEval(JSONRecord):
    """Self-citation of one model over items: the share of answers citing at least one existing document
    (``answers_cited``), of sentences doing so (``sentences_cited``), the number of ids naming no document,
    mean precision/recall/F1 of the cited set against the supporting documents (over the items with at least one;
    the labels judge the annotated answer, so for a generated answer they are an approximation), the
    share of answers holding the reference answer (``exact_match``), the seconds per answer, and every answer."""

    model: str
    n_answers: int
    answers_cited: float
    sentences_cited: float
    invalid_citations: int
    precision: float | None
    recall: float | None
    f1: float | None
    exact_match: float | None
    seconds_per_answer: float
    max_new_tokens: int
    answers: list[dict[str, Any]] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)

    def to_text(self) -> str:
        def pct(v: float | None) -> str:
            return "—" if v is None else f"{100 * v:.1f}%"

        return (f"{self.model}: {self.n_answers} answers; cited {pct(self.answers_cited)} of answers, "
                f"{pct(self.sentences_cited)} of sentences; {self.invalid_citations} invalid ids; P/R/F1 "
                f"{pct(self.precision)} / {pct(self.recall)} / {pct(self.f1)}; exact match {pct(self.exact_match)}; "
                f"{self.seconds_per_answer:.2f} s per answer")


def evaluate_citations(mirage: Mirage, examples: Sequence[TrainingExample], *, max_new_tokens: int = 48,
                       progress: Progress | None = None) -> CitationEval:
    """Generate a greedy answer (at most ``max_new_tokens``) to each example's question and documents with
    ``mirage``'s model and prompt, and measure its self-citations (see :class:`CitationEval`)."""
    cfg = mirage.config.replace(generation={"max_new_tokens": max_new_tokens, "do_sample": False})
    answers: list[dict[str, Any]] = []
    n_sentences = n_cited_sentences = invalid = 0
    prf: list[tuple[float, float, float]] = []
    matches: list[bool] = []
    seconds = 0.0
    loop: Iterable[TrainingExample] = progress(examples, len(examples), "generate") if progress else examples
    for ex in loop:
        prep = mirage.prepare(ex.rag_item(with_output=False), config=cfg, index=ex.id)
        t = time.perf_counter()
        gen = generate_answer(mirage.lm, prep.tokens.ids, cfg=cfg.generation)
        seconds += time.perf_counter() - t
        parsed = parse_answer(gen.text, len(ex.docs))
        cited = sorted({d for ids in parsed.citations for d in ids})
        n_sentences += len(parsed.sentences)
        n_cited_sentences += sum(bool(ids) for ids in parsed.citations)
        invalid += sum(len(ids) for ids in parsed.invalid)
        if ex.supporting:  # labels that name a supporting document
            prf.append(citation_set_prf(cited, ex.supporting))
        reference = parse_answer(ex.output, len(ex.docs)).text if ex.output else ""
        match = exact_match(parsed.text, [reference]) if reference else None
        if match is not None:
            matches.append(match)
        answers.append({"id": ex.id, "answer": gen.text, "cited": cited, "supporting": ex.supporting,
                        "citations": [list(c) for c in parsed.citations], "exact_match": match,
                        "n_tokens": len(gen.ids)})
    n = len(answers)
    return CitationEval(
        model=mirage.lm.name, n_answers=n, answers_cited=sum(bool(a["cited"]) for a in answers) / n if n else 0.0,
        sentences_cited=n_cited_sentences / n_sentences if n_sentences else 0.0, invalid_citations=invalid,
        precision=_mean([p for p, _r, _f in prf]), recall=_mean([r for _p, r, _f in prf]),
        f1=_mean([f for _p, _r, f in prf]), exact_match=_mean([float(m) for m in matches]),
        seconds_per_answer=round(seconds / n, 3) if n else 0.0, max_new_tokens=max_new_tokens, answers=answers,
        versions=library_versions())
