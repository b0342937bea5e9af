"""XOR-AttriQA settings from stored scores: CTI/CCI selections, MIRAGE-CAL calibration, the per-language report and
the top-% sweep. Pure functions of :class:`~mirage.scoring.xor_attriqa.ItemScores`; nothing here runs a model.

Settings: ``ex_*`` use the example-level CTI threshold (mean + k·std of the answer's scores), ``cal_*`` a threshold
calibrated to maximise agreement on calibration items; ``*_top3`` keeps the 3 most salient context tokens per
context-sensitive token, ``*_top5pct`` the top 5 % (by the run's ``cci.percent_rule``). ROC-AUC uses, per passage,
its largest saliency share over the setting's context-sensitive tokens (the score before the CCI threshold);
``roc_auc["mirage_raw"]`` uses max over all answer tokens of |CTI| × saliency share (no threshold at all; with one
passage per row, the largest CTI score, as in the reference's "full" evaluation).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..aggregation import doc_scores
from ..cci import select_context
from ..config import CCIConfig, CTIConfig, MirageConfig
from ..cti import select_tokens
from ..serialization import JSONRecord
from . import metrics as M
from .rows import BadRow
from .xor_attriqa import NLI_FILES, ItemScores, XorItem

CalibrateBy = Literal["global", "language"]

#: Reported settings, in table order.
SETTINGS = ("ex_top3", "ex_top5pct", "cal_top3", "cal_top5pct", "nli_mt", "nli_orig", "cite_all", "cite_none")
#: The CCI selections of the paper's table: top-3 tokens and top-5 %.
CCI_SELECTIONS: dict[str, dict[str, Any]] = {"top3": {"top_k": 3, "top_percent": None},
                                             "top5pct": {"top_k": None, "top_percent": 5.0}}
#: The top-% values of the sweep (the paper's Figure 4).
SWEEP_PERCENTS = (3, 5, 7, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100)
REPORT_FORMAT = 1


# -- settings ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenView:
    """Per answer token of one item: CTI score, passages kept by each CCI selection, and saliency share per passage
    (largest saliency on the passage over the largest on the context; 1 for the only passage)."""

    cti: float
    kept: dict[str, frozenset[int]]
    share: tuple[float, ...]


@dataclass(frozen=True)
class ItemView:
    item: XorItem
    tokens: tuple[TokenView, ...]


def build_views(items: Sequence[XorItem], scores: dict[str, ItemScores], selections: dict[str, CCIConfig]
                ) -> list[ItemView]:
    """Apply each CCI selection to every token of every scored item (items without scores are left out)."""
    views = []
    for item in items:
        sc = scores.get(item.key)
        if sc is None:
            continue
        docs = sc.docs_per_context_token()
        toks = []
        for t, cti in enumerate(sc.cti):
            if sc.n_docs == 1 or not sc.cci:
                kept = {name: frozenset({0}) for name in selections}
                share: tuple[float, ...] = (1.0,) * sc.n_docs
            else:
                row = sc.cci[t]
                kept = {name: frozenset(docs[j] for j in select_context(row, cfg)) for name, cfg in selections.items()}
                share = tuple(doc_scores(row, docs, sc.n_docs))
            toks.append(TokenView(cti=cti, kept=kept, share=share))
        views.append(ItemView(item=item, tokens=tuple(toks)))
    return views


def selected_tokens(view: ItemView, cti: CTIConfig) -> tuple[int, ...]:
    """Context-sensitive tokens of an item under a CTI config (the core's selector)."""
    return select_tokens([t.cti for t in view.tokens], cti)[0]


def predict(view: ItemView, selected: Sequence[int], selection: str) -> list[bool]:
    """Per passage: kept by ``selection`` for at least one selected (context-sensitive) token."""
    kept: set[int] = set()
    for t in selected:
        kept |= view.tokens[t].kept[selection]
    return [d in kept for d in range(len(view.item.passages))]


def passage_scores(view: ItemView, selected: Sequence[int]) -> list[float]:
    """Per passage, the score before the CCI threshold: its largest saliency share over the selected tokens."""
    n = len(view.item.passages)
    return [max((view.tokens[t].share[d] for t in selected), default=0.0) for d in range(n)]


def threshold_free_scores(view: ItemView) -> list[float]:
    """Per passage, with no threshold at all: max over answer tokens of CTI score × saliency share."""
    n = len(view.item.passages)
    return [max((abs(t.cti) * t.share[d] for t in view.tokens), default=0.0) for d in range(n)]


def calibrate_threshold(views: Sequence[ItemView], selection: str) -> tuple[float, float | None]:
    """The CTI threshold maximising agreement on ``views`` with the CCI ``selection``, and that agreement.

    Candidates are the observed |CTI| scores (and one above all, citing nothing); between two candidates the
    selection is the same, so the midpoint with the next lower score is returned. Ties go to the lowest threshold.
    """
    values = sorted({abs(t.cti) for v in views for t in v.tokens})
    if not values:
        return 0.0, None
    top = values[-1]
    candidates = values + [top * 2 + 1.0]
    best_t, best_agree, best_i = candidates[0], -1.0, 0
    for i, t in enumerate(candidates):
        preds: list[bool] = []
        labels: list[bool] = []
        for v in views:
            sel = [k for k, tok in enumerate(v.tokens) if abs(tok.cti) >= t]
            preds += predict(v, sel, selection)
            labels += list(v.item.labels)
        counts = M.BinaryCounts.of(preds, labels)
        agree = M.agreement(counts) or 0.0
        if agree > best_agree + 1e-12:
            best_t, best_agree, best_i = t, agree, i
    lower = candidates[best_i - 1] if best_i > 0 else 0.0
    threshold = (lower + best_t) / 2 if best_i > 0 else best_t
    return float(threshold), best_agree


@dataclass(frozen=True)
class Calibration:
    """Calibrated CTI thresholds per CCI selection: one global value, and per language where calibrated by language."""

    thresholds: dict[str, float]
    by_language: dict[str, dict[str, float]] = field(default_factory=dict)
    agreement: dict[str, float | None] = field(default_factory=dict)

    def threshold(self, selection: str, lang: str) -> float:
        return self.by_language.get(selection, {}).get(lang, self.thresholds[selection])


def calibrate(views: Sequence[ItemView], selections: Iterable[str], *, by: CalibrateBy = "global") -> Calibration:
    """Calibrate the CTI threshold (and nothing else) for each CCI selection on the calibration items."""
    thresholds, agreement, per_lang = {}, {}, {}
    for sel in selections:
        thresholds[sel], agreement[sel] = calibrate_threshold(views, sel)
        if by == "language":
            langs = sorted({v.item.lang for v in views})
            per_lang[sel] = {lang: calibrate_threshold([v for v in views if v.item.lang == lang], sel)[0]
                             for lang in langs}
    return Calibration(thresholds=thresholds, by_language=per_lang, agreement=agreement)


# -- report -----------------------------------------------------------------------------------------------------------


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
    #: With ``--faithfulness``: mean drop/keep per citation method (:class:`mirage.faithfulness.FaithfulnessSummary`).
    faithfulness: dict[str, Any] | None = None
    format: int = REPORT_FORMAT


    @property
    def languages(self) -> list[str]:
        return [k for k in self.counts if k != "all"]


def _languages(items: Iterable[XorItem]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item.lang, None)
    return list(seen)


def _per_language(rows: Sequence[tuple[str, list[bool], list[bool], list[float]]], langs: Sequence[str]
                  ) -> dict[str, dict[str, float | None]]:
    """rows: (lang, predictions, labels, scores) per item → metric → lang/avg → value."""
    out: dict[str, dict[str, float | None]] = {name: {} for name in (*M.BINARY_METRICS, "roc_auc")}
    for lang in langs:
        preds = [p for r in rows if r[0] == lang for p in r[1]]
        labels = [y for r in rows if r[0] == lang for y in r[2]]
        scores = [s for r in rows if r[0] == lang for s in r[3]]
        counts = M.BinaryCounts.of(preds, labels)
        for name, fn in M.BINARY_METRICS.items():
            out[name][lang] = fn(counts) if labels else None
        out["roc_auc"][lang] = M.roc_auc(scores, labels) if labels else None
    for table in out.values():
        table["avg"] = M.mean_defined(table[lang] for lang in langs)
    return out


def _mirage_rows(views: Sequence[ItemView], *, selection: str, cti_for: Callable[[ItemView], CTIConfig]):
    rows = []
    for v in views:
        sel = selected_tokens(v, cti_for(v))
        rows.append((v.item.lang, predict(v, sel, selection), list(v.item.labels), passage_scores(v, sel)))
    return rows


def _calibrated_cti(cal: Calibration, selection: str, metric: str) -> Callable[[ItemView], CTIConfig]:
    """Per item, the CTI config thresholding at the calibrated value for ``selection`` and the item's language."""
    return lambda v: CTIConfig(metric=metric, selector="threshold", threshold=cal.threshold(selection, v.item.lang))


def _baseline_rows(views: Sequence[ItemView]) -> dict[str, list[tuple[str, list[bool], list[bool], list[float]]]]:
    """Rows of the settings that need no mirage score: each stored NLI prediction, citing every passage, none."""
    out = {}
    for name in NLI_FILES:
        with_nli = [v for v in views if name in v.item.nli]
        if with_nli:
            out[name] = [(v.item.lang, [bool(p) for p in v.item.nli[name]], list(v.item.labels),
                          [float(p) for p in v.item.nli[name]]) for v in with_nli]
    out["cite_all"] = [(v.item.lang, [True] * len(v.item.labels), list(v.item.labels), [1.0] * len(v.item.labels))
                       for v in views]
    out["cite_none"] = [(v.item.lang, [False] * len(v.item.labels), list(v.item.labels), [0.0] * len(v.item.labels))
                        for v in views]
    return out


def _setting_tables(views: Sequence[ItemView], langs: Sequence[str], *, selections: Iterable[str], ex_cti: CTIConfig,
                   calibration: Calibration | None) -> dict[str, dict[str, dict[str, float | None]]]:
    """``metric → setting → language (and "avg") → value`` for every setting of :data:`SETTINGS` that applies
    (``cal_*`` only with a calibration) and ``roc_auc["mirage_raw"]``, settings in table order."""
    tables: dict[str, dict[str, dict[str, float | None]]] = {name: {} for name in (*M.BINARY_METRICS, "roc_auc")}

    def put(setting: str, rows) -> None:
        per = _per_language(rows, langs)
        for name, table in tables.items():
            table[setting] = per[name]

    for sel in selections:
        put(f"ex_{sel}", _mirage_rows(views, selection=sel, cti_for=lambda v: ex_cti))
        if calibration is not None:
            put(f"cal_{sel}", _mirage_rows(views, selection=sel,
                                           cti_for=_calibrated_cti(calibration, sel, ex_cti.metric)))
    for setting, rows in _baseline_rows(views).items():
        put(setting, rows)
    raw_auc = _per_language([(v.item.lang, [False] * len(v.item.labels), list(v.item.labels),
                              threshold_free_scores(v)) for v in views], langs)["roc_auc"]
    tables["roc_auc"]["mirage_raw"] = raw_auc
    rank = {name: i for i, name in enumerate((*SETTINGS, "mirage_raw"))}
    return {m: dict(sorted(t.items(), key=lambda kv: rank.get(kv[0], len(rank)))) for m, t in tables.items()}


def _counts(views: Sequence[ItemView], langs: Sequence[str]) -> dict[str, dict[str, int]]:
    """Items, (item, passage) pairs and supporting pairs per language and over all."""
    counts = {lang: {"items": sum(1 for v in views if v.item.lang == lang),
                     "pairs": sum(len(v.item.labels) for v in views if v.item.lang == lang),
                     "supporting": sum(sum(v.item.labels) for v in views if v.item.lang == lang)}
              for lang in langs}
    counts["all"] = {k: sum(c[k] for c in counts.values()) for k in ("items", "pairs", "supporting")}
    return counts


def evaluate(
    items: Sequence[XorItem],
    scores: dict[str, ItemScores],
    *,
    config: MirageConfig | None = None,
    calibration_items: Sequence[XorItem] | None = None,
    calibrate_by: CalibrateBy = "global",
    percents: Sequence[float] = SWEEP_PERCENTS,
    bad_rows: Sequence[BadRow] = (),
    settings: dict[str, Any] | None = None,
) -> XorAttriQAReport:
    """All settings and baselines per language from stored scores (no model run)."""
    cfg = config or MirageConfig()
    base_cci = cfg.cci
    selections = {name: CCIConfig(**{**asdict(base_cci), **sel}) for name, sel in CCI_SELECTIONS.items()}
    views = build_views(items, scores, selections)
    langs = _languages(v.item for v in views)
    ex_cti = CTIConfig(metric=cfg.cti.metric, selector="std", std_k=cfg.cti.std_k)
    cal_views = build_views(calibration_items, scores, selections) if calibration_items is not None else []
    cal = calibrate(cal_views, selections, by=calibrate_by) if cal_views else None

    tables = _setting_tables(views, langs, selections=selections, ex_cti=ex_cti, calibration=cal)
    sweep = top_percent_sweep(items, calibration_items or [], scores, base_cci=base_cci, ex_cti=ex_cti, langs=langs,
                              percents=percents, calibrate_by=calibrate_by)
    calibration = None
    if cal is not None:
        calibration = {"items": len(cal_views), "by": calibrate_by, "thresholds": cal.thresholds,
                       "by_language": cal.by_language, "agreement_on_calibration": cal.agreement}
    bad = [{"file": b.file, "line": b.line, "error": b.error} for b in bad_rows]
    return XorAttriQAReport(
        agreement=tables["agreement"], precision=tables["precision"], recall=tables["recall"], f1=tables["f1"],
        balanced_accuracy=tables["balanced_accuracy"], roc_auc=tables["roc_auc"], counts=_counts(views, langs),
        sweep=sweep, calibration=calibration, bad_rows={"count": len(bad), "rows": bad}, settings=dict(settings or {}),
    )


def top_percent_sweep(items: Sequence[XorItem], calibration_items: Sequence[XorItem], scores: dict[str, ItemScores],
                      *, base_cci: CCIConfig, ex_cti: CTIConfig, langs: Sequence[str],
                      percents: Sequence[float] = SWEEP_PERCENTS, calibrate_by: CalibrateBy = "global"
                      ) -> dict[str, Any]:
    """Agreement and F1 for CCI top-p% selection over ``percents`` (the paper's Figure 4): with the example-level
    CTI threshold and, given calibration items, with the CTI threshold recalibrated for each p."""
    out: dict[str, Any] = {"percents": list(percents), "agreement": {"ex": {}, "cal": {}}, "f1": {"ex": {}, "cal": {}},
                           "cal_thresholds": []}
    names = {p: f"top{p}pct" for p in percents}
    selections = {names[p]: CCIConfig(**{**asdict(base_cci), "top_k": None, "top_percent": float(p)})
                  for p in percents}
    views = build_views(items, scores, selections)
    cal_views = build_views(calibration_items, scores, selections) if calibration_items else []
    for p in percents:
        name = names[p]
        variants: dict[str, Callable[[ItemView], CTIConfig]] = {"ex": lambda v: ex_cti}
        if cal_views:
            cal = calibrate(cal_views, [name], by=calibrate_by)
            out["cal_thresholds"].append(cal.thresholds[name])
            variants["cal"] = lambda v, c=cal, n=name: CTIConfig(metric=ex_cti.metric, selector="threshold",
                                                                  threshold=c.threshold(n, v.item.lang))
        for variant, cti_for in variants.items():
            per = _per_language(_mirage_rows(views, selection=name, cti_for=cti_for), langs)
            for metric in ("agreement", "f1"):
                for lang, value in per[metric].items():
                    out[metric][variant].setdefault(lang, []).append(value)
    if not cal_views:
        for metric in ("agreement", "f1"):
            out[metric].pop("cal")
        out.pop("cal_thresholds")
    return out
