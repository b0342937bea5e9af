"""The study's result: attribution quality per mode, CAS and CAB with p-values and the random-citation baseline, once
for the self-citations and once for mirage's citations; a dataclass that round-trips through plain JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..serialization import JSONRecord, library_versions
from .metrics import (
    METRICS,
    Effect,
    ModeSummary,
    Stat,
    align,
    cab_effect,
    cas_effect,
    random_baseline,
    summarize_mode,
)
from .protocol import BiasConfig, Metadata
from .records import SOURCES, BiasRecord, CitationSource

RESULT_FORMAT = 1


@dataclass
class SourceSummary:
    """One citation set (``self`` or ``mirage``): quality per mode, CAS per non-vanilla mode, CAB, and the random
    citer's mean precision/recall per mode (``baseline``)."""

    source: str
    modes: dict[str, ModeSummary]
    cas: dict[str, Effect]
    cab: Effect | None
    baseline: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SourceSummary:
        def effect(d: dict[str, Any]) -> Effect:
            return Effect(precision=Stat(**d["precision"]), recall=Stat(**d["recall"]), n=d["n"])

        return cls(source=data["source"], modes={m: ModeSummary(**s) for m, s in data["modes"].items()},
                   cas={m: effect(e) for m, e in data["cas"].items()},
                   cab=effect(data["cab"]) if data.get("cab") else None, baseline=data.get("baseline", {}))


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
    format: int = RESULT_FORMAT

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BiasStudyResult:
        data = cls.known_fields(data)
        data["sources"] = {k: SourceSummary.from_dict(v) for k, v in data["sources"].items()}
        return cls(**data)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(indent=2), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> BiasStudyResult:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    @property
    def self_citation(self) -> SourceSummary:
        return self.sources["self"]

    @property
    def mirage(self) -> SourceSummary:
        return self.sources["mirage"]


def summarize_source(records: Sequence[BiasRecord], source: CitationSource, *, modes: Sequence[str], omega: int,
                     draws: int, seed: int) -> SourceSummary:
    """Quality, CAS, CAB and baseline of one citation set, over the items present in every mode."""
    by_mode: dict[str, list[BiasRecord]] = {}
    for r in records:
        by_mode.setdefault(r.mode, []).append(r)
    modes = [m for m in modes if m in by_mode]
    aligned = dict(zip(modes, align(by_mode, modes)))
    quality, cas_base, cab_base = random_baseline(aligned, source, omega=omega, draws=draws, seed=seed)
    summary = SourceSummary(source=source, modes={m: summarize_mode(aligned[m], source) for m in modes}, cas={},
                            cab=None, baseline=quality)
    if "vanilla" in aligned:
        for mode in modes:
            if mode != "vanilla":
                effect = cas_effect(aligned[mode], aligned["vanilla"], source)
                for metric in METRICS:
                    effect.stat(metric).baseline = cas_base[mode][metric]
                summary.cas[mode] = effect
    if "informed" in aligned and "counterfactual" in aligned:
        effect = cab_effect(aligned["informed"], aligned["counterfactual"], source, omega=omega)
        for metric in METRICS:
            effect.stat(metric).baseline = cab_base[metric]
        summary.cab = effect
    return summary


def summarize(records: Sequence[BiasRecord], *, cfg: BiasConfig, metadata: Metadata, model: str, data: str,
              mirage_config: dict[str, Any]) -> BiasStudyResult:
    """The study result of ``records`` (one per item and mode), for both citation sets."""

    sources = {s: summarize_source(records, s, modes=cfg.modes, omega=cfg.omega, draws=cfg.baseline_draws,
                                   seed=cfg.seed) for s in SOURCES}
    n_items = max((s.n for src in sources.values() for s in src.modes.values()), default=0)
    return BiasStudyResult(
        model=model, data=data,
        metadata={"type": metadata.type, "first": metadata.first.name, "second": metadata.second.name,
                  "first_labels": list(metadata.first.labels), "second_labels": list(metadata.second.labels),
                  "consideration": metadata.consideration},
        config=json.loads(json.dumps(cfg.to_dict())), mirage_config=json.loads(json.dumps(mirage_config)), n_items=n_items, omega=cfg.omega, sources=sources,
        versions=library_versions())
