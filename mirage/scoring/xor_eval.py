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

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from mirage.attribution.aggregation import doc_scores
from mirage.attribution.cci import select_context
from mirage.attribution.cti import select_tokens
from mirage.config import CCIConfig, ContextView, CTIConfig, MirageConfig
from mirage.likelihood.features import ALL_TOKEN_FEATURES, FEATURES
from mirage.runs.benchmark_options import SETTING_GROUPS, CalibrateBy, setting_groups
from mirage.scoring import metrics as M
from mirage.scoring.rows import BadRow
from mirage.scoring.xor_attriqa import ItemScores
from mirage.scoring.xor_classifier import (
    PASSAGE_SCORE,
    ex_cti_config,
    feature_rows,
    fit_learned_model,
    fit_rows,
    learned_rows,
    method_feature,
    with_method_features,
)
from mirage.scoring.xor_data import NLI_FILES, XorItem
from mirage.scoring.xor_report import METRIC_FIELDS, XorAttriQAReport

__all__ = ["CCI_SELECTIONS", "SCORE_ONLY", "SETTINGS", "TABLE_ORDER", "RowsNeeded", "TokenView", "XorItemView",
           "build_views", "calibrate_threshold", "calibrated_floor", "calibration_rows", "calibration_selections",
           "evaluate", "pair_records", "per_language", "predict", "selected_tokens"]

#: Reported settings, in table order.
SETTINGS = ("ex_top3", "ex_top5pct", "cal_top3", "cal_top5pct", "nli_mt", "nli_orig", "cite_all", "cite_none")
#: Every row a report can have, in table order: the settings, then ``learned`` and ``learned_agreement`` (with
#: calibration: the classifier at its F1 and at its agreement threshold) and the threshold-free ``passage_score`` and
#: ``mirage_raw`` (ROC-AUC only; ``mirage_raw`` with every CCI row).
TABLE_ORDER = (*SETTINGS[:4], "learned", "learned_agreement", *SETTINGS[4:], "passage_score", "mirage_raw")
#: The CCI selections of the paper's table: top-3 tokens and top-5 %.
CCI_SELECTIONS: dict[str, dict[str, Any]] = {"top3": {"top_k": 3, "top_percent": None},
                                             "top5pct": {"top_k": None, "top_percent": 5.0}}
#: The top-% values of the sweep (the paper's Figure 4).
SWEEP_PERCENTS = (3, 5, 7, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100)
#: A setting's row of one item: language, predictions, labels and scores per passage, item key.
SettingRow = tuple[str, list[bool], list[bool], list[float], str]


# -- settings ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenView:
    """Per answer token of one item: CTI score, passages kept by each CCI selection, and saliency share per passage
    (largest saliency on the passage over the largest on the context; 1 for the only passage); ``kept`` and
    ``share`` are None for a token whose CCI row was not computed (no setting selects it)."""

    cti: float
    kept: dict[str, frozenset[int]] | None
    share: tuple[float, ...] | None


class MissingRows(ValueError):
    """A setting selected a token whose CCI row the run did not compute."""


@dataclass(frozen=True)
class XorItemView:
    """An item's tokens under the CCI selections; ``floor``: the lowest |CTI| a calibrated threshold can select in
    it (its mean score under ``cti.threshold_floor: mean``, else 0)."""

    item: XorItem
    tokens: tuple[TokenView, ...]
    floor: float = 0.0


def build_views(items: Sequence[XorItem], scores: dict[str, ItemScores], selections: dict[str, CCIConfig], *,
                context: ContextView = "all", cti_floor: str = "none") -> list[XorItemView]:
    """Apply each CCI selection to every token of every scored item (items without scores are left out).
    ``context="content"`` attributes to passage text only, leaving out the template's scaffolding tokens (as
    ``aggregation.context`` does for ``mirage attribute``; a ValueError for stores that did not record them)."""
    views = []
    for item in items:
        sc = scores.get(item.key)
        if sc is None:
            continue
        docs = sc.docs_per_context_token()
        keep = None
        if context == "content" and sc.n_docs > 1:
            mask = sc.content_per_context_token()
            if mask is None:
                raise ValueError("these stored scores do not record which context tokens are passage text; "
                                 "score them again to evaluate the content-only view.")
            keep = [j for j, is_text in enumerate(mask) if is_text]
            docs = [docs[j] for j in keep]
        toks = []
        for t, cti in enumerate(sc.cti):
            kept: dict[str, frozenset[int]] | None = None
            share: tuple[float, ...] | None = None
            if sc.n_docs == 1:
                kept = {name: frozenset({0}) for name in selections}
                share = (1.0,)
            elif t in sc.cci:
                row = sc.cci[t] if keep is None else [sc.cci[t][j] for j in keep]
                kept = {name: frozenset(docs[j] for j in select_context(row, cfg)) for name, cfg in selections.items()}
                share = tuple(doc_scores(row, docs, sc.n_docs))
            toks.append(TokenView(cti=cti, kept=kept, share=share))
        floor = sum(sc.cti) / len(sc.cti) if cti_floor == "mean" and sc.cti else 0.0
        views.append(XorItemView(item=item, tokens=tuple(toks), floor=floor))
    return views


def selected_tokens(view: XorItemView, cti: CTIConfig) -> tuple[int, ...]:
    """Context-sensitive tokens of an item under a CTI config (the core's selector)."""
    return select_tokens([t.cti for t in view.tokens], cti)[0]


def _row(view: XorItemView, t: int) -> TokenView:
    tok = view.tokens[t]
    if tok.kept is None:
        raise MissingRows(f"answer token {t} of {view.item.file} line {view.item.line} is selected but has no CCI row "
                          "in the stored scores; run the scorer again (it computes the rows the settings select).")
    return tok


def predict(view: XorItemView, selected: Sequence[int], selection: str) -> list[bool]:
    """Per passage: kept by ``selection`` for at least one selected (context-sensitive) token."""
    kept: set[int] = set()
    for t in selected:
        kept |= _row(view, t).kept[selection]  # type: ignore[index]
    return [d in kept for d in range(len(view.item.passages))]


def passage_scores(view: XorItemView, selected: Sequence[int]) -> list[float]:
    """Per passage, the score before the CCI threshold: its largest saliency share over the selected tokens."""
    n = len(view.item.passages)
    return [max((_row(view, t).share[d] for t in selected), default=0.0) for d in range(n)]  # type: ignore[index]


def has_every_row(view: XorItemView) -> bool:
    return all(t.share is not None for t in view.tokens)


def threshold_free_scores(view: XorItemView) -> list[float]:
    """Per passage, with no threshold at all: max over answer tokens of CTI score × saliency share (needs every
    token's CCI row)."""
    n = len(view.item.passages)
    return [max((abs(t.cti) * _row(view, k).share[d] for k, t in enumerate(view.tokens)), default=0.0)  # type: ignore[index]
            for d in range(n)]


class RowsNeeded(Exception):
    """Calibration reached tokens whose CCI rows are not stored: ``rows`` maps item keys to the answer indices to
    compute before calibrating again (see :func:`calibration_rows`)."""

    def __init__(self, rows: dict[str, set[int]]) -> None:
        super().__init__(f"{sum(map(len, rows.values()))} CCI rows needed")
        self.rows = rows


def _scan(views: Sequence[XorItemView], selection: str, ahead: int) -> tuple[float, int, int]:
    """Exact bounded search for the agreement-maximising CTI threshold (see :func:`calibrate_threshold`): the best
    candidate, its index in the descending candidate list, and the number of correct pairs. RowsNeeded when it must
    look at tokens without rows (it asks for the next ``ahead`` candidates' tokens)."""
    tokens = sorted(((abs(tok.cti), vi, k) for vi, v in enumerate(views) for k, tok in enumerate(v.tokens)
                     if abs(tok.cti) >= v.floor), reverse=True)
    values = sorted({t for t, _vi, _k in tokens}, reverse=True)
    candidates = [values[0] * 2 + 1.0, *values]  # descending; the first cites nothing
    n_pairs = sum(len(v.item.labels) for v in views)
    kept: list[set[int]] = [set() for _ in views]
    fp = 0
    correct = sum(1 for v in views for y in v.item.labels if not y)  # citing nothing: the unsupported pairs
    best_i, best_correct = 0, correct
    pos = 0
    for i, t in enumerate(candidates[1:], start=1):
        start = pos
        while pos < len(tokens) and tokens[pos][0] >= t:
            pos += 1
        lacking = [(vi, k) for _t, vi, k in tokens[start:pos] if views[vi].tokens[k].kept is None]
        if lacking:
            cut = candidates[min(len(candidates) - 1, i + ahead)]
            rows: dict[str, set[int]] = {}
            for _t, vi, k in tokens[start:]:
                if _t < cut:
                    break
                if views[vi].tokens[k].kept is None:
                    rows.setdefault(views[vi].item.key, set()).add(k)
            raise RowsNeeded(rows)
        for _t, vi, k in tokens[start:pos]:
            labels = views[vi].item.labels
            for d in views[vi].tokens[k].kept[selection]:  # type: ignore[index]
                if d not in kept[vi]:
                    kept[vi].add(d)
                    correct += 1 if labels[d] else -1
                    fp += 0 if labels[d] else 1
        if correct >= best_correct:  # ties go to the lower threshold
            best_i, best_correct = i, correct
        if n_pairs - fp < best_correct:  # lower thresholds only add citations: none can reach the best again
            break
    return candidates[best_i], best_i, best_correct


def calibrate_threshold(views: Sequence[XorItemView], selection: str, *, ahead: int = 64) -> tuple[float, float | None]:
    """The CTI threshold maximising agreement on ``views`` with the CCI ``selection``, and that agreement.

    Candidates are the observed |CTI| scores (and one above all, citing nothing); between two candidates the
    selection is the same, so the midpoint with the next lower score is returned. Ties go to the lowest threshold.
    The search goes down from the highest threshold and stops as soon as no lower one can tie the best (lowering the
    threshold only adds citations, so pairs wrongly cited stay wrong): the tokens below that point need no CCI row.
    Raises :class:`RowsNeeded` when it reaches a token without its row.
    """
    if not any(v.tokens for v in views):
        return 0.0, None
    best, best_i, best_correct = _scan(views, selection, ahead)
    values = sorted({abs(tok.cti) for v in views for tok in v.tokens if abs(tok.cti) >= v.floor}, reverse=True)
    lower = values[best_i] if best_i < len(values) else None  # the next candidate below the best
    threshold = best if lower is None else (lower + best) / 2  # the lowest observed score: itself
    n_pairs = sum(len(v.item.labels) for v in views)
    agreement = M.agreement(M.BinaryCounts(tp=0, fp=0, tn=best_correct, fn=n_pairs - best_correct))
    return float(threshold), agreement


def calibration_rows(views: Sequence[XorItemView], selections: Iterable[str], *, by: CalibrateBy = "global"
                     ) -> dict[str, set[int]]:
    """The CCI rows calibrating ``selections`` still needs (item key → answer indices); empty when it can run."""
    need: dict[str, set[int]] = {}
    groups = [list(views)]
    if by == "language":
        groups += [[v for v in views if v.item.lang == lang] for lang in sorted({v.item.lang for v in views})]
    for sel in selections:
        for group in groups:
            try:
                calibrate_threshold(group, sel)
            except RowsNeeded as err:
                for key, rows in err.rows.items():
                    need.setdefault(key, set()).update(rows)
    return need


@dataclass(frozen=True)
class Calibration:
    """Calibrated CTI thresholds per CCI selection: one global value, and per language where calibrated by language."""

    thresholds: dict[str, float]
    by_language: dict[str, dict[str, float]] = field(default_factory=dict)
    agreement: dict[str, float | None] = field(default_factory=dict)

    def threshold(self, selection: str, lang: str) -> float:
        return self.by_language.get(selection, {}).get(lang, self.thresholds[selection])


def calibrate(views: Sequence[XorItemView], selections: Iterable[str], *, by: CalibrateBy = "global") -> Calibration:
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

def _languages(items: Iterable[XorItem]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item.lang, None)
    return list(seen)


def per_language(rows: Sequence[tuple[str, list[bool], list[bool], list[float]] | SettingRow],
                 langs: Sequence[str]) -> dict[str, dict[str, float | None]]:
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


def _mirage_rows(views: Sequence[XorItemView], *, selection: str, cti_for: Callable[[XorItemView], CTIConfig]):
    rows = []
    for v in views:
        sel = selected_tokens(v, cti_for(v))
        rows.append((v.item.lang, predict(v, sel, selection), list(v.item.labels), passage_scores(v, sel), v.item.key))
    return rows


def _calibrated_cti(cal: Calibration, selection: str, ex_cti: CTIConfig) -> Callable[[XorItemView], CTIConfig]:
    """Per item, the CTI config thresholding at the calibrated value for ``selection`` and the item's language."""
    return lambda v: CTIConfig(metric=ex_cti.metric, selector="threshold",
                               threshold=cal.threshold(selection, v.item.lang), threshold_floor=ex_cti.threshold_floor)


def _baseline_rows(views: Sequence[XorItemView]) -> dict[str, list[SettingRow]]:
    """Rows of the settings that need no mirage score: each stored NLI prediction, citing every passage, none."""
    out = {}
    for name in NLI_FILES:
        with_nli = [v for v in views if name in v.item.nli]
        if with_nli:
            out[name] = [(v.item.lang, [bool(p) for p in v.item.nli[name]], list(v.item.labels),
                          [float(p) for p in v.item.nli[name]], v.item.key) for v in with_nli]
    out["cite_all"] = [(v.item.lang, [True] * len(v.item.labels), list(v.item.labels), [1.0] * len(v.item.labels),
                        v.item.key) for v in views]
    out["cite_none"] = [(v.item.lang, [False] * len(v.item.labels), list(v.item.labels), [0.0] * len(v.item.labels),
                         v.item.key) for v in views]
    return out


def _setting_tables(views: Sequence[XorItemView], langs: Sequence[str], *, selections: Iterable[str], ex_cti: CTIConfig,
                   calibration: Calibration | None, ex: bool = True, collect: dict[str, list] | None = None
                   ) -> dict[str, dict[str, dict[str, float | None]]]:
    """``metric → setting → language (and "avg") → value`` for every setting of :data:`SETTINGS` that applies
    (``cal_*`` only with a calibration) and ``roc_auc["mirage_raw"]``, settings in table order. ``collect`` receives
    each setting's rows (lang, predictions, labels, scores, item key) per item."""
    tables: dict[str, dict[str, dict[str, float | None]]] = {name: {} for name in (*M.BINARY_METRICS, "roc_auc")}

    def put(setting: str, rows) -> None:
        if collect is not None:
            collect[setting] = rows
        per = per_language(rows, langs)
        for name, table in tables.items():
            table[setting] = per[name]

    for sel in selections:
        if ex:
            put(f"ex_{sel}", _mirage_rows(views, selection=sel, cti_for=lambda v: ex_cti))
        if calibration is not None:
            put(f"cal_{sel}", _mirage_rows(views, selection=sel, cti_for=_calibrated_cti(calibration, sel, ex_cti)))
    for setting, rows in _baseline_rows(views).items():
        put(setting, rows)
    if views and all(has_every_row(v) for v in views):  # every CCI row: only runs with --all-tokens
        raw_rows = [(v.item.lang, [False] * len(v.item.labels), list(v.item.labels), threshold_free_scores(v),
                     v.item.key) for v in views]
        tables["roc_auc"]["mirage_raw"] = per_language(raw_rows, langs)["roc_auc"]
        if collect is not None:
            collect["mirage_raw"] = raw_rows
    rank = {name: i for i, name in enumerate(TABLE_ORDER)}
    return {m: dict(sorted(t.items(), key=lambda kv: rank.get(kv[0], len(rank)))) for m, t in tables.items()}


def _counts(views: Sequence[XorItemView], langs: Sequence[str]) -> dict[str, dict[str, int]]:
    """Items, (item, passage) pairs and supporting pairs per language and over all."""
    counts = {lang: {"items": sum(1 for v in views if v.item.lang == lang),
                     "pairs": sum(len(v.item.labels) for v in views if v.item.lang == lang),
                     "supporting": sum(sum(v.item.labels) for v in views if v.item.lang == lang)}
              for lang in langs}
    counts["all"] = {k: sum(c[k] for c in counts.values()) for k in ("items", "pairs", "supporting")}
    return counts


def calibration_selections(config: MirageConfig | None = None, percents: Sequence[float] = SWEEP_PERCENTS
                           ) -> dict[str, CCIConfig]:
    """Every CCI selection some calibrated setting uses: the table's (top-3, top-5 %) and the sweep's top-p %."""
    base = asdict((config or MirageConfig()).cci)
    return {**{name: CCIConfig(**{**base, **sel}) for name, sel in CCI_SELECTIONS.items()},
            **{f"top{p}pct": CCIConfig(**{**base, "top_k": None, "top_percent": float(p)}) for p in percents}}


def calibrated_floor(calibration_items: Sequence[XorItem], scores: dict[str, ItemScores], *,
                     config: MirageConfig | None = None, calibrate_by: CalibrateBy = "global",
                     percents: Sequence[float] = SWEEP_PERCENTS) -> float | None:
    """The lowest CTI threshold any calibrated setting (``cal_*`` and the sweep's calibrated top-%) picks on the
    calibration items: test tokens with |CTI| at or above it are the ones those settings can select, so they are
    the test tokens that need CCI rows beyond MIRAGE-EX's. None without calibration items. Raises RowsNeeded when the
    calibration items lack rows (:func:`calibration_rows`)."""
    names = calibration_selections(config, percents)
    cfg = config or MirageConfig()
    views = build_views(calibration_items, scores, names, context=cfg.aggregation.context,
                        cti_floor=cfg.cti.threshold_floor)
    if not views:
        return None
    cal = calibrate(views, names, by=calibrate_by)
    values = list(cal.thresholds.values()) + [t for per in cal.by_language.values() for t in per.values()]
    return min(values) if values else None


def _feature_aucs(rows: Sequence[tuple[XorItem, list[dict[str, float]]]], langs: Sequence[str]
                  ) -> dict[str, dict[str, float | None]]:
    """ROC-AUC of each single feature, per language and averaged (which features carry the signal)."""
    names = [n for n in (*FEATURES, *ALL_TOKEN_FEATURES) if rows and all(n in f for _i, feats in rows for f in feats)]
    return {name: per_language([(item.lang, [False] * len(feats), list(item.labels), [f[name] for f in feats])
                                 for item, feats in rows], langs)["roc_auc"] for name in names}


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
    learned: bool = True,
    context: ContextView | None = None,
    groups: Sequence[str] = SETTING_GROUPS,
    pairs: list[dict[str, Any]] | None = None,
    extra_rows: Mapping[str, list] | None = None,
    classifier_methods: Sequence[str] = (),
    method_scores: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
) -> XorAttriQAReport:
    """The settings of ``groups`` (:data:`SETTING_GROUPS`) and the baselines per language from stored scores (no model
    run). With ``learned`` (the items have their passage signals), the ``passage_score`` setting and the features'
    ROC-AUC, and with calibration items the passage-likelihood classifier (rows ``learned``, ``learned_agreement``),
    fitted on them and applied to ``items``. ``context``: the context tokens CCI selects among (default the config's
    ``aggregation.context``; ``content`` leaves the prompt's passage markers out, as the authors' script does).
    ``pairs``, when given, receives one record per (item, passage): :func:`pair_records`. ``extra_rows``: more
    settings' rows (lang, predictions, labels, scores, item key) per item, tabled after these (the document methods'
    of :mod:`mirage.scoring.xor_methods`). ``classifier_methods``: feature sets (``NAME`` or ``NAME+NAME…`` of
    document methods), each a classifier fitted like ``learned`` with those methods' passage scores
    (``method_scores``: method → item key → score per passage) added to its features: rows ``learned+SET``, on the
    items every method of the set scored."""
    groups = setting_groups(groups)
    learned = learned and "likelihood" in groups
    cfg = config or MirageConfig()
    context = context or cfg.aggregation.context
    base_cci = cfg.cci
    selections = {name: CCIConfig(**{**asdict(base_cci), **sel}) for name, sel in CCI_SELECTIONS.items()}
    floor = cfg.cti.threshold_floor
    views = build_views(items, scores, selections, context=context, cti_floor=floor)
    langs = _languages(v.item for v in views)
    ex_cti = ex_cti_config(cfg)
    cal_views = (build_views(calibration_items, scores, selections, context=context, cti_floor=floor)
                 if calibration_items is not None else [])
    cal = calibrate(cal_views, selections, by=calibrate_by) if cal_views and "cal" in groups else None

    collected: dict[str, list] = {}
    tables = _setting_tables(views, langs, selections=selections, ex_cti=ex_cti, calibration=cal, ex="ex" in groups,
                             collect=collected)

    def add(setting: str, rows: list) -> None:
        """One more setting's rows (lang, predictions, labels, scores, item key), tabled per language."""
        collected[setting] = rows
        per = per_language(rows, langs)
        for name, table in tables.items():
            table[setting] = per[name]

    for setting, rows in (extra_rows or {}).items():
        add(setting, rows)
    test_rows = feature_rows([v.item for v in views], scores, ex_cti)
    features: dict[str, Any] | None = None
    if learned:
        collected["passage_score"] = [(item.lang, [False] * len(feats), list(item.labels),
                                       [f[PASSAGE_SCORE] for f in feats], item.key) for item, feats in test_rows]
        tables["roc_auc"]["passage_score"] = per_language(collected["passage_score"], langs)["roc_auc"]
        features = {"passage_score": PASSAGE_SCORE, "roc_auc": _feature_aucs(test_rows, langs)}
    if cal_views and features is not None:
        cal_items = [v.item for v in cal_views]
        model = fit_learned_model(cal_items, scores, cti=ex_cti)
        add("learned", learned_rows(model, test_rows))
        # the same classifier at the threshold that maximised out-of-fold agreement on the calibration items
        add("learned_agreement", learned_rows(model, test_rows, model.cv["agreement_threshold"]))
        cal_rows = feature_rows(cal_items, scores, ex_cti)
        features.update(learned=model.to_dict(), coefficients=model.coefficients(),
                        roc_auc_calibration=_feature_aucs(cal_rows, _languages(cal_items)))
        classifiers = {}
        for feature_set in classifier_methods:
            names = feature_set.split("+")
            setting = f"learned+{feature_set}"
            with_methods = fit_rows(with_method_features(cal_rows, names, method_scores or {}),
                                    [*model.features, *map(method_feature, names)])
            add(setting, learned_rows(with_methods, with_method_features(test_rows, names, method_scores or {})))
            classifiers[setting] = {"model": with_methods.to_dict(), "coefficients": with_methods.coefficients()}
        if classifiers:
            features["with_methods"] = classifiers
    sweep: dict[str, Any] = {}
    if "ex" in groups:
        sweep = top_percent_sweep(items, (calibration_items or []) if "cal" in groups else [], scores,
                                  base_cci=base_cci, ex_cti=ex_cti, langs=langs, percents=percents,
                                  calibrate_by=calibrate_by, context=context)
    calibration = None
    if cal is not None:
        calibration = {"items": len(cal_views), "by": calibrate_by, "thresholds": cal.thresholds,
                       "by_language": cal.by_language, "agreement_on_calibration": cal.agreement}
    if pairs is not None:
        pairs.extend(pair_records([v.item for v in views], collected))
    bad = [{"file": b.file, "line": b.line, "error": b.error} for b in bad_rows]
    return XorAttriQAReport(
        agreement=tables["agreement"], precision=tables["precision"], recall=tables["recall"], f1=tables["f1"],
        balanced_accuracy=tables["balanced_accuracy"], roc_auc=tables["roc_auc"], counts=_counts(views, langs),
        registered_metrics={name: table for name, table in tables.items() if name not in METRIC_FIELDS},
        sweep=sweep, calibration=calibration, bad_rows={"count": len(bad), "rows": bad}, settings=dict(settings or {}),
        features=features,
    )


#: Settings whose rows carry only a score, no citation (ROC-AUC rows): ``cited`` is null for them in pairs.jsonl.
SCORE_ONLY = frozenset({"passage_score", "mirage_raw"})


def pair_records(items: Sequence[XorItem], rows: dict[str, list]) -> list[dict[str, Any]]:
    """One record per (item, passage) of ``items``, in their order: the item's ``key``, its ``query`` as the view
    shows it, the ``passage`` number (0-based, file order), the human ``label`` and, under ``settings``, per setting
    by its results.json name, ``{"score": …, "cited": …}`` (``cited`` null for the score-only rows of
    :data:`SCORE_ONLY`; a setting that did not score an item, such as an NLI baseline without its file, is absent).
    ``rows``: per setting, its rows (lang, predictions, labels, scores, item key) per item."""
    rank = {name: i for i, name in enumerate(TABLE_ORDER)}
    by_setting = {name: {r[4]: r for r in setting_rows}
                  for name, setting_rows in sorted(rows.items(), key=lambda kv: rank.get(kv[0], len(rank)))}
    out = []
    for item in items:
        for d, label in enumerate(item.labels):
            settings = {}
            for name, found in by_setting.items():
                row = found.get(item.key)
                if row is not None:
                    settings[name] = {"score": float(row[3][d]),
                                      "cited": None if name in SCORE_ONLY else bool(row[1][d])}
            out.append({"key": item.key, "query": item.question, "passage": d, "label": bool(label),
                        "settings": settings})
    return out


def top_percent_sweep(items: Sequence[XorItem], calibration_items: Sequence[XorItem], scores: dict[str, ItemScores],
                      *, base_cci: CCIConfig, ex_cti: CTIConfig, langs: Sequence[str],
                      percents: Sequence[float] = SWEEP_PERCENTS, calibrate_by: CalibrateBy = "global",
                      context: ContextView = "all") -> dict[str, Any]:
    """Agreement and F1 for CCI top-p% selection over ``percents`` (the paper's Figure 4): with the example-level
    CTI threshold and, given calibration items, with the CTI threshold recalibrated for each p."""
    out: dict[str, Any] = {"percents": list(percents), "agreement": {"ex": {}, "cal": {}}, "f1": {"ex": {}, "cal": {}},
                           "cal_thresholds": []}
    names = {p: f"top{p}pct" for p in percents}
    selections = {names[p]: CCIConfig(**{**asdict(base_cci), "top_k": None, "top_percent": float(p)}) for p in percents}
    views = build_views(items, scores, selections, context=context, cti_floor=ex_cti.threshold_floor)
    cal_views = (build_views(calibration_items, scores, selections, context=context, cti_floor=ex_cti.threshold_floor)
                 if calibration_items else [])
    for p in percents:
        name = names[p]
        variants: dict[str, Callable[[XorItemView], CTIConfig]] = {"ex": lambda v: ex_cti}
        if cal_views:
            cal = calibrate(cal_views, [name], by=calibrate_by)
            out["cal_thresholds"].append(cal.thresholds[name])
            variants["cal"] = _calibrated_cti(cal, name, ex_cti)
        for variant, cti_for in variants.items():
            per = per_language(_mirage_rows(views, selection=name, cti_for=cti_for), langs)
            for metric in ("agreement", "f1"):
                for lang, value in per[metric].items():
                    out[metric][variant].setdefault(lang, []).append(value)
    if not cal_views:
        for metric in ("agreement", "f1"):
            out[metric].pop("cal")
        out.pop("cal_thresholds")
    return out
