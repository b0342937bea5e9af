"""XOR-AttriQA's report (``results.json``): per metric, setting and language, the scores of
:func:`mirage.scoring.xor_eval.evaluate`, beside calibration, the top-% sweep, counts, skipped rows and settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mirage.attribution.serialization import JSONRecord

__all__ = ["METRIC_FIELDS", "XOR_REPORT_FORMAT", "XorAttriQAReport"]

#: The version of the report's layout (``format``).
XOR_REPORT_FORMAT = 2

#: The metrics the report holds as fields of their own (the built-in binary metrics and ROC-AUC), in field order; a
#: binary metric registered beyond them goes to ``registered_metrics``.
METRIC_FIELDS = ("agreement", "precision", "recall", "f1", "balanced_accuracy", "roc_auc")


@dataclass
class XorAttriQAReport(JSONRecord):
    """The benchmark's tables: ``metric → setting → language (and "avg") → value``, plus calibration, the top-%
    sweep, counts, skipped rows and what produced it. Percentages except ROC-AUC (0–1); None where undefined."""

    agreement: dict[str, dict[str, float | None]]
    precision: dict[str, dict[str, float | None]]
    recall: dict[str, dict[str, float | None]]
    f1: dict[str, dict[str, float | None]]
    balanced_accuracy: dict[str, dict[str, float | None]]
    roc_auc: dict[str, dict[str, float | None]]
    counts: dict[str, dict[str, int]]
    sweep: dict[str, Any]
    calibration: dict[str, Any] | None
    bad_rows: dict[str, Any]
    settings: dict[str, Any]
    versions: dict[str, str] = field(default_factory=dict)
    #: With ``--faithfulness``: mean drop/keep per citation method
    #: (:class:`mirage.scoring.faithfulness.FaithfulnessSummary`).
    faithfulness: dict[str, Any] | None = None
    #: The per-passage features: ``passage_score`` (the feature behind that setting), ``roc_auc`` of each feature
    #: on the test items, and, with calibration, the ``learned`` model (:class:`LearnedModel` as a dict), its
    #: standardised ``coefficients`` and each feature's ``roc_auc_calibration``.
    features: dict[str, Any] | None = None
    #: With ``--methods``: per document method, its settings, calibrated thresholds and cost per answer
    #: (:func:`mirage.scoring.xor_methods.document_method_rows`); its rows are ``NAME@RULE`` in the tables.
    methods: dict[str, Any] | None = None
    #: The tables of the binary metrics registered beyond the fields above (:data:`mirage.registry.BINARY_METRICS`),
    #: by name: ``metric → setting → language (and "avg") → value``.
    registered_metrics: dict[str, dict[str, dict[str, float | None]]] = field(default_factory=dict)
    format: int = XOR_REPORT_FORMAT


    @property
    def languages(self) -> list[str]:
        return [k for k in self.counts if k != "all"]

    def metric_table(self, name: str) -> dict[str, dict[str, float | None]]:
        """``setting → language (and "avg") → value`` of one metric: a built-in field, or a registered metric's
        table (empty where the run predates it)."""
        return getattr(self, name) if name in METRIC_FIELDS else self.registered_metrics.get(name, {})
