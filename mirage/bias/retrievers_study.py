"""Retrievers compared (the attribution-bias study's retriever table): the study once per retriever on the same BEIR
data, each retriever's ranking giving the questions' non-relevant documents.

    DIR/<retriever>/run.trec    the retriever's top-k documents per query (TREC run, :mod:`~mirage.bias.retrieval`)
    DIR/<retriever>/…           that retriever's study (items.jsonl, generations.jsonl, results.json, tables.md, …)
    DIR/retrievers.json         the RetrieverComparison
    DIR/retrievers.md           the comparison tables

Each question keeps its relevant document (qrels) at a seeded random position, as in every BEIR study
(:func:`~mirage.bias.items.beir_items`); the retriever chooses the k - 1 others: its best-ranked non-relevant
documents. How often the retriever would have found the relevant document itself is its recall@k.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirage.attribution.models import LoadedModel
from mirage.attribution.serialization import JSONRecord, library_versions
from mirage.bias.metrics import Stat
from mirage.bias.protocol import BiasConfig
from mirage.bias.rage import Embedder
from mirage.bias.results import BiasStudyResult
from mirage.bias.retrieval import (
    RetrievalQuality,
    check_retrievers,
    check_top_k,
    load_beir_data,
    retrieval_quality,
    retrieve,
    write_run,
)
from mirage.bias.study import run_bias_study
from mirage.config import ConfigError
from mirage.data import data_label
from mirage.runs.lazy import MirageSource, resolve_mirage
from mirage.runs.progress import Progress
from mirage.runs.store import write_atomic
from mirage.views.markdown import fmt_p, md_table, stars

__all__ = ["RetrieverComparison", "bias_table", "render_retrievers", "run_retriever_study"]

COMPARISON_FORMAT = 1


@dataclass
class RetrieverRun:
    """One retriever's study: its run file (relative to the comparison's folder), how well its ranking finds the
    relevant documents, and the study's result."""

    retriever: str
    run: str
    quality: RetrievalQuality
    result: BiasStudyResult

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RetrieverRun:
        return cls(retriever=data["retriever"], run=data["run"], quality=RetrievalQuality.from_dict(data["quality"]),
                   result=BiasStudyResult.from_dict(data["result"]))


@dataclass
class RetrieverComparison(JSONRecord):
    """The study per retriever on the same data (``runs[name]``, in the order asked), with ``top_k`` documents
    retrieved per query and ``k`` per question."""

    data: str
    top_k: int
    k: int
    runs: dict[str, RetrieverRun]
    versions: dict[str, str] = field(default_factory=dict)
    format: int = COMPARISON_FORMAT

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RetrieverComparison:
        data = cls.known_fields(data)
        data["runs"] = {k: RetrieverRun.from_dict(v) for k, v in data["runs"].items()}
        return cls(**data)



def run_retriever_study(data: str, retrievers: Sequence[str], *, mirage: MirageSource, cfg: BiasConfig,
                        output_dir: str | Path, top_k: int = 100, limit: int | None = None, split: str = "test",
                        rewriter: LoadedModel | None = None, progress: Progress | None = None,
                        embed: Embedder | None = None, tuned: str | None = None) -> RetrieverComparison | None:
    """For each retriever: rank DATA's corpus (a BEIR folder, or ``nq``), write ``DIR/<retriever>/run.trec`` and run
    the study on it into ``DIR/<retriever>/`` (:func:`~mirage.bias.study.run_bias_study`, resumable); then write
    ``DIR/retrievers.json`` and ``DIR/retrievers.md``. The model is loaded once, the dense retriever's embedder
    (``embed``, default all-MiniLM-L6-v2) too. ConfigError for an unknown retriever, a ``top_k`` below ``cfg.k`` or
    the RAGE mixture (which would replace the retrieved documents), before anything is read. Under a launcher rank 0
    returns the comparison, other ranks None. ``tuned``: as for the study, whose training questions it leaves out."""
    names = list(dict.fromkeys(retrievers))
    check_retrievers(names)
    check_top_k(top_k)
    if top_k < cfg.k:
        raise ConfigError(f"top_k={top_k} is below k={cfg.k}: retrieve at least the documents a question needs.")
    if cfg.docs != "retrieved":
        raise ConfigError(f"docs={cfg.docs!r} replaces the non-relevant documents that the retrievers choose; compare "
                          "retrievers with docs='retrieved' (the default).")
    out_dir = Path(output_dir)
    beir = load_beir_data(data, split=split)  # bad data fails before a model loads
    if embed is None and "dense" in names:
        from mirage.bias.rage import MiniLMEmbedder

        embed = MiniLMEmbedder()
    model = functools.cache(lambda: resolve_mirage(mirage))
    runs: dict[str, RetrieverRun] = {}
    ranked = True
    for name in names:
        folder = out_dir / name
        ranking = retrieve(beir, name, top_k=top_k, cache_dir=folder, embed=embed)
        run_path = write_run(ranking, folder / "run.trec", tag=name)
        result = run_bias_study(data, mirage=model, cfg=cfg, output_dir=folder, limit=limit, split=split,
                                rewriter=rewriter, progress=progress, embed=embed, run=run_path, tuned=tuned)
        if result is None:  # one rank of several: rank 0 writes the comparison
            ranked = False
            continue
        runs[name] = RetrieverRun(retriever=name, run=str(run_path.relative_to(out_dir)), result=result,
                                  quality=retrieval_quality(ranking, beir.qrels, k=cfg.k, top_k=top_k))
    if not ranked:
        return None
    comparison = RetrieverComparison(data=data_label(data), top_k=top_k, k=cfg.k, runs=runs,
                                     versions=library_versions())
    comparison.save(out_dir / "retrievers.json")
    write_atomic(out_dir / "retrievers.md", render_retrievers(comparison))
    return comparison


# -- rendering --------------------------------------------------------------------------------------------------------

def _cell(stat: Stat | None) -> str:
    """A CAS or CAB value in percent with its significance stars and p-value (–: none, or undefined)."""
    if stat is None or stat.value is None:
        return "–"
    return f"{100 * stat.value:.2f}{stars(stat.p_value)} (p {fmt_p(stat.p_value)})"


def retrieval_table(comparison: RetrieverComparison) -> str:
    """Per retriever: recall@k, recall@top_k and MRR of the relevant documents, and the questions studied."""
    k, top_k = comparison.k, comparison.top_k
    head = ["Retriever", f"Recall@{k}", f"Recall@{top_k}", "MRR", "Queries ranked", "Questions studied"]
    return md_table(head, [[name, f"{100 * run.quality.recall_at_k:.1f}", f"{100 * run.quality.recall_at_top_k:.1f}",
                            f"{100 * run.quality.mrr:.1f}", str(run.quality.n_queries), str(run.result.n_items)]
                           for name, run in comparison.runs.items()])


def bias_table(comparison: RetrieverComparison) -> str:
    """Per retriever and citation set: CAS per mode (vs vanilla) and CAB, precision and recall, with p-values."""
    modes = list(dict.fromkeys(m for run in comparison.runs.values() for s in run.result.sources.values()
                               for m in s.cas))
    head = ["Retriever", "Citations"] + [f"CAS {m} {x}" for m in modes for x in ("P", "R")] + ["CAB P", "CAB R"]
    rows = []
    for name, run in comparison.runs.items():
        for key, source in run.result.sources.items():
            cells = [name, "self-citation" if key == "self" else "MIRAGE" if key == "mirage" else key]
            for m in modes:
                effect = source.cas.get(m)
                cells += [_cell(effect.precision if effect else None), _cell(effect.recall if effect else None)]
            cab = source.cab
            cells += [_cell(cab.precision if cab else None), _cell(cab.recall if cab else None)]
            rows.append(cells)
    return md_table(head, rows)


def render_retrievers(comparison: RetrieverComparison) -> str:
    """The comparison as markdown: retrieval quality, then CAS and CAB per retriever and citation set."""
    first = next(iter(comparison.runs.values()), None)
    model = first.result.model if first else "–"
    labels = (f"{first.result.metadata['first']} vs {first.result.metadata['second']}, ω = {first.result.omega:+d}"
              if first else "")
    return "\n".join([
        f"# Attribution sensitivity and bias per retriever: {model}",
        "",
        (f"Data `{comparison.data}`; each retriever ranks the corpus (top {comparison.top_k} per query, "
         f"`<retriever>/run.trec`); each question keeps its relevant document and takes the retriever's "
         f"{comparison.k - 1} best-ranked non-relevant ones (k = {comparison.k}). Metadata {labels}."),
        "",
        "## Retrieval quality",
        "",
        ("Recall@n: the share of a query's relevant documents that the retriever ranks in its top n; MRR: mean "
         "1 / rank of the first relevant one; over every query with a relevant document (percent)."),
        "",
        retrieval_table(comparison),
        "",
        "## Attribution sensitivity (CAS) and bias (CAB)",
        "",
        ("Percent. CAS = mean |M_mode − M_vanilla|, CAB = ω · mean (M_informed − M_counterfactual), M precision (P) or "
         "recall (R) of the citations; p-value of each test in parentheses, * p < 0.05, ** p < 0.01. Each "
         "retriever's full tables: `<retriever>/tables.md`."),
        "",
        bias_table(comparison),
    ]) + "\n"
