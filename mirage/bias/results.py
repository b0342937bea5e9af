"""The study's result: attribution quality per mode, CAS and CAB with p-values and the random-citation baseline, once
for the self-citations and once for mirage's citations; a dataclass that round-trips through plain JSON."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mirage.attribution.citations import CITATION_SOURCES, CitationSource
from mirage.attribution.serialization import JSONRecord, library_versions
from mirage.bias.explanations import ExplanationAnalysis, analyse_explanations, label_words
from mirage.bias.metrics import (
    METRICS,
    Defect,
    Effect,
    FollowSide,
    ModeSummary,
    align,
    answer_defect,
    cab_effect,
    cas_effect,
    contrast_effect,
    mode_tests,
    random_baseline,
    random_side,
    side_of,
    sound_pairs,
    summarize_mode,
)
from mirage.bias.prompts import load_prompts, mode_template
from mirage.bias.protocol import BiasConfig, Metadata, Side, grid_modes
from mirage.bias.records import BiasRecord

__all__ = ["BiasFollow", "BiasStudyResult", "SourceSummary", "follow_summary", "summarize"]

BIAS_RESULT_FORMAT = 1


#: The mixed grid's contrasts: name -> ((relevant, non-relevant) sides of A, of B); each is mean (M_A − M_B), signed
#: so that a positive value is a pull toward the first label (labelling the relevant documents with it raises
#: quality; labelling the non-relevant ones with it lowers quality). ``same label`` compares the two cells whose
#: labels say nothing about relevance (every document first vs every document second): the mixed-mode CAB.
GRID_CONTRASTS: dict[str, tuple[tuple[Side, Side], tuple[Side, Side]]] = {
    "relevant label, non-relevant first": (("first", "first"), ("second", "first")),
    "relevant label, non-relevant second": (("first", "second"), ("second", "second")),
    "non-relevant label, relevant first": (("first", "second"), ("first", "first")),
    "non-relevant label, relevant second": (("second", "second"), ("second", "first")),
    "same label (mixed CAB)": (("first", "first"), ("second", "second")),
}


@dataclass
class MixedGrid:
    """The 2 × 2 grid of (relevant side, non-relevant side): each cell's mode and mean precision/recall
    (``cells["first/second"]``), and the contrasts of :data:`GRID_CONTRASTS` over the queries present in all four."""

    cells: dict[str, dict[str, Any]]
    effects: dict[str, Effect]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MixedGrid:
        return cls(cells=data["cells"], effects={k: Effect.from_dict(e) for k, e in data["effects"].items()})


@dataclass
class SourceSummary:
    """One citation set (``self`` or ``mirage``): quality per mode, CAS per non-vanilla mode, CAB, the random
    citer's mean precision/recall per mode (``baseline``), paired tests between modes (``mode_tests["A vs B"]``:
    precision and recall p-values) and, when the run covers it, the mixed grid."""

    source: str
    modes: dict[str, ModeSummary]
    cas: dict[str, Effect]
    cab: Effect | None
    baseline: dict[str, dict[str, float]] = field(default_factory=dict)
    mode_tests: dict[str, dict[str, float | None]] = field(default_factory=dict)
    grid: MixedGrid | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SourceSummary:
        return cls(source=data["source"], modes={m: ModeSummary(**s) for m, s in data["modes"].items()},
                   cas={m: Effect.from_dict(e) for m, e in data["cas"].items()},
                   cab=Effect.from_dict(data["cab"]) if data.get("cab") else None, baseline=data.get("baseline", {}),
                   mode_tests=data.get("mode_tests", {}),
                   grid=MixedGrid.from_dict(data["grid"]) if data.get("grid") else None)


@dataclass
class BiasFollow(JSONRecord):
    """Whether each citation set follows the relevant document wherever the study put it (the permutation test's
    measure, :func:`mirage.bias.metrics.follows`): the ``vanilla`` answers of questions with exactly one relevant
    document among ``k`` (the study's most common number), by that document's position. ``random`` cites as many
    documents as the model did (self-citation), uniformly; ``mirage`` leaves out the answers mirage could not
    attribute."""

    k: int
    n_answers: int
    self_citation: FollowSide
    random: FollowSide
    mirage: FollowSide | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BiasFollow:
        sides = {name: FollowSide.from_dict(data[name]) if data.get(name) is not None else None
                 for name in ("self_citation", "random", "mirage")}
        return cls(**{**cls.known_fields(data), **sides})

    def rows(self) -> list[tuple[str, FollowSide]]:
        """The citers of the table: self-citation, MIRAGE, random."""
        rows = [("self-citation", self.self_citation)]
        if self.mirage is not None:
            rows.append(("MIRAGE", self.mirage))
        return [*rows, ("random (self-citation's count)", self.random)]


def follow_summary(records: Sequence[BiasRecord]) -> BiasFollow | None:
    """The :class:`BiasFollow` of a study's records; None where no ``vanilla`` answer has exactly one relevant
    document."""
    usable = [r for r in records if r.mode == "vanilla" and len(r.relevant) == 1 and r.n_docs >= 2]
    if not usable:
        return None
    counts = Counter(r.n_docs for r in usable)
    k = max(counts, key=lambda n: (counts[n], n))
    usable = [r for r in usable if r.n_docs == k]
    positions = [int(r.relevant[0]) for r in usable]
    own = [{d for sentence in r.self_citations for d in sentence} for r in usable]
    attributed = [(r, p) for r, p in zip(usable, positions) if r.error is None]
    return BiasFollow(
        k=k, n_answers=len(usable), self_citation=side_of(own, positions, k),
        random=random_side([len(c) for c in own], positions, k),
        mirage=side_of([{d for sentence in r.mirage_citations for d in sentence} for r, _ in attributed],
                       [p for _, p in attributed], k) if attributed else None)


@dataclass
class BiasStudyResult(JSONRecord):
    """Everything a study table shows, and what reproduces it."""

    model: str
    data: str
    metadata: dict[str, Any]
    config: dict[str, Any]
    mirage_config: dict[str, Any]
    n_items: int
    omega: int
    sources: dict[str, SourceSummary]
    versions: dict[str, str] = field(default_factory=dict)
    format: int = BIAS_RESULT_FORMAT
    #: the analysis of the ``--explain`` explanations (:mod:`mirage.bias.explanations`); None without them
    explanations: ExplanationAnalysis | None = None
    #: the fewest and the most documents a question of the study had (``config["k"]`` is what was asked: items
    #: built from data with fewer documents, or prepared items, have their own number); None in older results
    documents: list[int] | None = None
    #: does each citation set follow the relevant document (:func:`follow_summary`)? None in older results
    follow: BiasFollow | None = None
    #: the data's questions that the model records it was trained on, left out (or, with
    #: ``keep_trained_questions``, kept: :func:`mirage.runs.experiment.leave_out_trained`); None for a model without
    #: that record, and in older results
    trained_questions_left_out: int | None = None
    trained_questions_kept: int | None = None

    def documents_text(self) -> str:
        """How many documents the questions had: ``"5"``, ``"3–10"``; the asked ``k`` for older results."""
        if not self.documents:
            return str(self.config.get("k"))
        low, high = self.documents
        return str(low) if low == high else f"{low}–{high}"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BiasStudyResult:
        data = cls.known_fields(data)
        data["sources"] = {k: SourceSummary.from_dict(v) for k, v in data["sources"].items()}
        if data.get("explanations") is not None:
            data["explanations"] = ExplanationAnalysis.from_dict(data["explanations"])
        if data.get("follow") is not None:
            data["follow"] = BiasFollow.from_dict(data["follow"])
        return cls(**data)


    @property
    def self_citation(self) -> SourceSummary:
        return self.sources["self"]

    @property
    def mirage(self) -> SourceSummary:
        return self.sources["mirage"]


def mixed_grid(by_mode: dict[str, list[BiasRecord]], source: CitationSource,
               cells: dict[tuple[Side, Side], str], defects: Mapping[str, Defect | None] | None = None,
               ) -> MixedGrid | None:
    """The mixed grid of one citation set, when ``cells`` (:func:`mirage.bias.protocol.grid_modes`) covers all four
    (relevant, non-relevant) side pairs; None otherwise. Each contrast leaves out the query pairs with an empty or
    echoing answer (``defects`` by record key, :func:`~mirage.bias.metrics.sound_pairs`)."""
    sides: list[tuple[Side, Side]] = [("first", "first"), ("first", "second"), ("second", "first"),
                                      ("second", "second")]
    if not all(c in cells and cells[c] in by_mode for c in sides):
        return None
    modes = [cells[c] for c in sides]
    aligned = dict(zip(sides, align(by_mode, modes)))
    out_cells = {}
    for c in sides:
        s = summarize_mode(aligned[c], source)
        out_cells[f"{c[0]}/{c[1]}"] = {"mode": cells[c], "precision": s.precision, "recall": s.recall, "n": s.n}
    effects = {name: _sound_effect(contrast_effect, aligned[a], aligned[b], source, defects or {})
               for name, (a, b) in GRID_CONTRASTS.items()}
    return MixedGrid(cells=out_cells, effects=effects)


def _sound_effect(effect: Any, a: Sequence[BiasRecord], b: Sequence[BiasRecord], source: CitationSource,
                  defects: Mapping[str, Defect | None], **kwargs: Any) -> Effect:
    """``effect(a, b, source, **kwargs)`` over the pairs whose answers are both sound, with the count left out."""
    a, b, excluded = sound_pairs(a, b, defects)
    out = effect(a, b, source, **kwargs)
    out.n_excluded = excluded
    return out


def summarize_source(records: Sequence[BiasRecord], source: CitationSource, *, modes: Sequence[str], omega: int,
                     draws: int, seed: int, grid: dict[tuple[Side, Side], str] | None = None,
                     defects: Mapping[str, Defect | None] | None = None) -> SourceSummary:
    """Quality, CAS, CAB, baseline and mode-vs-mode tests of one citation set, over the items present in every
    mode; the mixed grid when ``grid`` (cell -> mode) covers it (over the items present in its four modes).
    ``defects`` (by record key, :func:`~mirage.bias.metrics.answer_defect`): quality and its tests count every
    answer (and the empty and echoing ones); CAS, CAB and the grid's contrasts leave out the query pairs with one."""
    defects = defects or {}
    by_mode: dict[str, list[BiasRecord]] = {}
    for r in records:
        by_mode.setdefault(r.mode, []).append(r)
    modes = [m for m in modes if m in by_mode]
    aligned = dict(zip(modes, align(by_mode, modes)))
    quality, cas_base, cab_base = random_baseline(aligned, source, omega=omega, draws=draws, seed=seed,
                                                  defects=defects)
    summary = SourceSummary(source=source, modes={m: summarize_mode(aligned[m], source, defects) for m in modes},
                            cas={}, cab=None, baseline=quality, mode_tests=mode_tests(aligned, source),
                            grid=mixed_grid(by_mode, source, grid, defects) if grid else None)
    if "vanilla" in aligned:
        for mode in modes:
            if mode != "vanilla":
                effect = _sound_effect(cas_effect, aligned[mode], aligned["vanilla"], source, defects)
                for metric in METRICS:
                    effect.stat(metric).baseline = cas_base[mode][metric]
                summary.cas[mode] = effect
    if "informed" in aligned and "counterfactual" in aligned:
        effect = _sound_effect(cab_effect, aligned["informed"], aligned["counterfactual"], source, defects,
                               omega=omega)
        for metric in METRICS:
            effect.stat(metric).baseline = cab_base[metric]
        summary.cab = effect
    return summary


def summarize(records: Sequence[BiasRecord], *, cfg: BiasConfig, metadata: Metadata, model: str, data: str,
              mirage_config: dict[str, Any], sources: Sequence[CitationSource] = CITATION_SOURCES) -> BiasStudyResult:
    """The study result of ``records`` (one per item and mode), for the citation sets ``sources`` (both by
    default; answers generated elsewhere without a local model have self-citations only). Answers that are empty
    or echo their mode's instruction (:func:`~mirage.bias.metrics.answer_defect`, the instruction from the study's
    prompt files) are counted per mode and left out of CAS, CAB and the grid's contrasts."""
    defects = answer_defects(records, cfg, metadata)
    by_source: dict[str, SourceSummary] = {
        s: summarize_source(records, s, modes=cfg.modes, omega=cfg.omega, draws=cfg.baseline_draws, seed=cfg.seed,
                            grid=grid_modes(cfg), defects=defects) for s in sources}
    n_items = max((s.n for src in by_source.values() for s in src.modes.values()), default=0)
    meta = {"type": metadata.type, "first": metadata.first.name, "second": metadata.second.name,
            "first_labels": list(metadata.first.labels), "second_labels": list(metadata.second.labels),
            "consideration": metadata.consideration}
    explained = any(r.explanation is not None for r in records)
    return BiasStudyResult(
        model=model, data=data, metadata=meta,
        explanations=analyse_explanations(records, label_words=label_words(meta)) if explained else None,
        config=json.loads(json.dumps(cfg.to_dict())), mirage_config=json.loads(json.dumps(mirage_config)),
        n_items=n_items, omega=cfg.omega, sources=by_source, versions=library_versions(),
        documents=[min(r.n_docs for r in records), max(r.n_docs for r in records)] if records else None,
        follow=follow_summary(records) if "self" in sources else None)


def answer_defects(records: Sequence[BiasRecord], cfg: BiasConfig, metadata: Metadata) -> dict[str, Defect | None]:
    """Per record key, whether its answer is empty or echoes the instruction of its mode's prompt (the study's
    prompt files, :func:`~mirage.bias.prompts.mode_template`)."""
    prompts = load_prompts(cfg)
    instructions: dict[str, str] = {}
    out = {}
    for r in records:
        if r.mode not in instructions:
            instructions[r.mode] = mode_template(prompts, r.mode, metadata)["instruction"]
        out[r.key] = answer_defect(r.answer, instructions[r.mode])
    return out
