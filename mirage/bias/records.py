"""One generation of the study (an item in one mode): the answer, both citation sets and their confidences."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from mirage.attribution.citations import CitationSource
from mirage.attribution.serialization import JSONRecord
from mirage.data.inputs import InputError
from mirage.runs.files import read_run_records, run_file

__all__ = ["BiasRecord", "PromptCell", "read_generations"]


@dataclass
class PromptCell(JSONRecord):
    """What one prompt of the study shows, and so what identifies it: its ``key``, the item, the mode, the label on
    each document (None where the document has none), the relevant documents (1-based), how many documents it has
    and the item's reference answers. A :class:`BiasRecord` (answered here) and a
    :class:`~mirage.bias.answers.BiasRequest` (to answer elsewhere) both start with these fields."""

    key: str
    item_id: str
    mode: str
    labels: list[str | None]
    relevant: list[int]
    n_docs: int
    answers: list[str]

    def cell(self) -> dict[str, Any]:
        """The :class:`PromptCell` fields alone (copies), to build another record of the same prompt."""
        return {f.name: copy.copy(getattr(self, f.name)) for f in fields(PromptCell)}


@dataclass
class BiasRecord(PromptCell):
    """An item's answer in one mode.

    ``self_citations`` / ``mirage_citations``: per answer sentence, 1-based document ids (the model's own ``[n]``
    marks; mirage's citations of the citation-stripped answer). ``self_citation_probs``: per ``[n]`` mark naming a
    document, ``[doc, p]`` with p the generation probability of the mark's number tokens.
    ``mirage_citation_probs``: per (sentence, mirage-cited document), ``[doc, p]`` with p the mean generation
    probability of the sentence's context-sensitive tokens that mirage attributes to that document.
    ``error``: why mirage could not attribute the answer (e.g. nothing left once citation marks are removed); its
    mirage citations are then empty.
    """

    raw_answer: str
    answer: str
    self_citations: list[list[int]]
    mirage_citations: list[list[int]]
    self_citation_probs: list[list[float]] = field(default_factory=list)
    mirage_citation_probs: list[list[float]] = field(default_factory=list)
    n_answer_tokens: int = 0
    explanation: str | None = None
    error: str | None = None
    prompt: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    def citations(self, source: CitationSource) -> list[list[int]]:
        return self.self_citations if source == "self" else self.mirage_citations

    def citation_probs(self, source: CitationSource) -> list[tuple[int, float]]:
        rows = self.self_citation_probs if source == "self" else self.mirage_citation_probs
        return [(int(d), float(p)) for d, p in rows]



def read_generations(run_dir: str | Path) -> list[BiasRecord]:
    """The records of a run folder's ``generations.jsonl`` (or ``generations.jsonl.gz``, as shipped runs keep it)."""
    path = run_file(run_dir, "generations.jsonl")
    if path is None:
        raise InputError(f"{run_dir} has no generations.jsonl(.gz); give the output folder of a `mirage bias` run.")
    return [BiasRecord.from_dict(r) for r in read_run_records(path)]
