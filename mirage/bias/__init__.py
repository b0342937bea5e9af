"""Attribution sensitivity (CAS) and bias (CAB) to document metadata, for self-citations and mirage's citations.

    from mirage import Mirage
    from mirage.bias import BiasConfig, run_bias_study
    result = run_bias_study("data/xor_attriqa_match", mirage=Mirage.from_pretrained(), cfg=BiasConfig(),
                            output_dir="out")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mirage.runs.lazy import lazy_exports

if TYPE_CHECKING:
    from mirage.bias.answers import run_answers_study, write_study_requests
    from mirage.bias.explanations import ExplanationAnalysis, analyse_run
    from mirage.bias.items import BiasItem, beir_items, msmarco_items, read_beir, xor_items
    from mirage.bias.metrics import (
        abs_change_p_value,
        bootstrap_ci,
        cab,
        cas,
        citation_set_prf,
        exact_match,
        paired_p_value,
    )
    from mirage.bias.protocol import BiasConfig, Metadata, doc_labels, load_metadata
    from mirage.bias.rage import load_embedder
    from mirage.bias.records import BiasRecord, read_generations
    from mirage.bias.results import BiasStudyResult, summarize
    from mirage.bias.retrieval import retrieve, write_run
    from mirage.bias.retrievers_study import run_retriever_study
    from mirage.bias.runner import BiasStudy
    from mirage.bias.study import build_items, run_bias_study, summarize_run
    from mirage.bias.sweep import SweepResult, run_bias_sweep
    from mirage.bias.tables import plot_cab, render_markdown

#: Imported on first access: the study brings torch, and ``mirage bias --help`` should not.
__getattr__, __dir__ = lazy_exports(__name__, {
    "BiasItem": "items", "beir_items": "items", "msmarco_items": "items", "read_beir": "items", "xor_items": "items",
    "cab": "metrics", "cas": "metrics", "citation_set_prf": "metrics", "exact_match": "metrics",
    "paired_p_value": "metrics", "BiasConfig": "protocol", "Metadata": "protocol", "doc_labels": "protocol",
    "load_metadata": "protocol", "BiasRecord": "records", "BiasStudyResult": "results", "summarize": "results",
    "BiasStudy": "runner", "build_items": "study", "run_bias_study": "study", "plot_cab": "tables",
    "render_markdown": "tables", "run_answers_study": "answers", "write_study_requests": "answers",
    "abs_change_p_value": "metrics", "bootstrap_ci": "metrics", "read_generations": "records", "summarize_run": "study",
    "analyse_run": "explanations", "ExplanationAnalysis": "explanations", "retrieve": "retrieval",
    "write_run": "retrieval", "run_retriever_study": "retrievers_study", "run_bias_sweep": "sweep",
    "SweepResult": "sweep", "load_embedder": "rage",
})

__all__ = [
    "BiasConfig",
    "BiasItem",
    "BiasRecord",
    "BiasStudy",
    "BiasStudyResult",
    "ExplanationAnalysis",
    "Metadata",
    "SweepResult",
    "abs_change_p_value",
    "analyse_run",
    "beir_items",
    "bootstrap_ci",
    "build_items",
    "cab",
    "cas",
    "citation_set_prf",
    "doc_labels",
    "exact_match",
    "load_embedder",
    "load_metadata",
    "msmarco_items",
    "paired_p_value",
    "plot_cab",
    "read_beir",
    "read_generations",
    "render_markdown",
    "retrieve",
    "run_answers_study",
    "run_bias_study",
    "run_bias_sweep",
    "run_retriever_study",
    "summarize",
    "summarize_run",
    "write_run",
    "write_study_requests",
    "xor_items",
]
