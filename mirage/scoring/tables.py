"""Plain-text tables of the benchmark reports, laid out as the paper's tables."""

from __future__ import annotations

from dataclasses import dataclass

from mirage.scoring.eli5 import ELI5Report
from mirage.scoring.metrics import BINARY_METRICS  # registers the built-ins
from mirage.scoring.xor_eval import TABLE_ORDER
from mirage.scoring.xor_report import XorAttriQAReport
from mirage.views.markdown import fmt_number

__all__ = ["METRIC_ORDER", "SETTING_NAMES", "classifier_settings", "eli5_table", "grid", "methods_table_rows",
           "xor_legend", "xor_metrics", "xor_table", "xor_text"]

SETTING_NAMES = {
    "ex_top3": "MIRAGE-EX top-3",
    "ex_top5pct": "MIRAGE-EX top-5%",
    "cal_top3": "MIRAGE-CAL top-3",
    "cal_top5pct": "MIRAGE-CAL top-5%",
    "nli_mt": "NLI (MT to English)",
    "nli_orig": "NLI (original text)",
    "cite_all": "cite every passage",
    "cite_none": "cite none",
    "mirage_raw": "MIRAGE |CTI| x CCI share",
    "learned": "passage-likelihood classifier",
    "learned_agreement": "passage-likelihood classifier, threshold for agreement",
    "passage_score": "passage likelihood gain (alone vs none)",
}
#: What each row is, and which row of the MIRAGE paper's Table 2 (XOR-AttriQA, agreement with the human labels)
#: it stands for; rows the paper does not have say so.
SETTING_NOTES = {
    "ex_top3": "the paper's MIRAGE EX Top-3 row: tokens past the per-answer CTI spread, each citing the passages of "
               "its 3 most salient context tokens",
    "ex_top5pct": "the paper's MIRAGE EX Top-5% row: the same, the top 5 % of context tokens",
    "cal_top3": "the paper's MIRAGE CAL Top-3 row: a CTI threshold calibrated on --calibrate-on, top-3 tokens",
    "cal_top5pct": "the paper's MIRAGE CAL Top-5% row: the calibrated threshold, top 5 %",
    "nli_mt": "the paper's NLI baseline on machine-translated English text (an 11B TRUE model, precomputed)",
    "nli_orig": "the paper's NLI baseline on the original fi / ru text (the same judge)",
    "cite_all": "not in the paper: every passage cited (full recall; its precision is the share that supports)",
    "cite_none": "not in the paper: no passage cited (agreement's floor: most passages do not support)",
    "learned": "not in the paper: mirage's passage-likelihood classifier, fitted on --calibrate-on",
    "learned_agreement": "not in the paper: the same classifier at the threshold that maximised agreement on "
                         "--calibrate-on",
    "passage_score": "not in the paper: the threshold-free likelihood gain of each passage alone (ROC-AUC only)",
    "mirage_raw": "not in the paper: |CTI| x CCI share summed per passage, threshold-free (ROC-AUC only)",
}


def xor_legend(report: XorAttriQAReport) -> str:
    """One line per row of :func:`xor_table`: what it is and the paper's row it reproduces (or that it has none)."""
    tables = [report.metric_table(m) for m in xor_metrics()]
    shown = [s for s in TABLE_ORDER if any(s in table for table in tables)]
    width = max((len(SETTING_NAMES.get(s, s)) for s in shown), default=0)
    return "\n".join(["Rows"] + [f"{SETTING_NAMES.get(s, s).ljust(width)}  {SETTING_NOTES.get(s, '')}".rstrip()
                                  for s in shown])


#: The order of the built-in binary metrics' tables; a metric registered beyond them comes after them, before ROC-AUC.
METRIC_ORDER = ("agreement", "f1", "balanced_accuracy", "precision", "recall")


def xor_metrics() -> dict[str, str]:
    """The title of each metric of XOR-AttriQA's tables, in table order: every registered binary metric
    (:data:`mirage.registry.BINARY_METRICS`), then ROC-AUC."""
    names = [*(n for n in METRIC_ORDER if n in BINARY_METRICS), *(n for n in BINARY_METRICS if n not in METRIC_ORDER)]
    return {**{name: BINARY_METRICS[name].title for name in names}, "roc_auc": "ROC-AUC of per-passage scores (0-1)"}


def grid(title: str, header: list[str], rows: list[list[str]]) -> str:
    """A left-aligned first column and right-aligned value columns."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [title]
    for r in [header, *rows]:
        lines.append("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
    return "\n".join(lines)


def xor_text(report: XorAttriQAReport) -> str:
    """What ``mirage score xor-attriqa`` prints: :func:`xor_table`, then :func:`xor_legend`."""
    return f"{xor_table(report)}\n\n{xor_legend(report)}"


def xor_table(report: XorAttriQAReport, metrics: list[str] | None = None) -> str:
    """The report as one table per metric: settings as rows, languages and their average as columns; by default
    every metric of :func:`xor_metrics` the report holds (none for a metric added after its run)."""
    langs = report.languages
    blocks = []
    counts = report.counts
    blocks.append(grid("Data", ["", *langs, "all"],
                       [[name, *[fmt_number(counts[lang][name]) for lang in [*langs, "all"]]]
                        for name in ("items", "pairs", "supporting")]))
    titles = xor_metrics()
    for metric in metrics or [m for m in titles if report.metric_table(m)]:
        table = report.metric_table(metric)
        digits = 3 if metric == "roc_auc" else 1
        order = [s for s in TABLE_ORDER if s in table]
        rows = [[SETTING_NAMES.get(s, s), *[fmt_number(table[s].get(lang), digits) for lang in [*langs, "avg"]]]
                for s in order]
        blocks.append(grid(titles[metric], ["", *langs, "avg"], rows))
    cal = report.calibration
    if cal:
        thr = ", ".join(f"{k}={v:.4g}" for k, v in cal["thresholds"].items())
        blocks.append(f"MIRAGE-CAL: CTI thresholds calibrated on {cal['items']} items ({cal['by']}): {thr}")
    else:
        asked = report.settings.get("groups") or ["cal"]
        blocks.append("MIRAGE-CAL: not run (no --calibrate-on)." if "cal" in asked
                      else "MIRAGE-CAL: not asked for (--settings).")
        if "likelihood" in asked and not report.settings.get("signals", True):
            blocks.append("Passage-likelihood classifier: not run (no --calibrate-on; it is fitted on the calibration "
                          "files).")
    if report.methods:
        blocks.append(methods_table(report))
        if any("faithfulness" in entry for entry in report.methods.values()):
            blocks.append(faithfulness_table(report))
    blocks.append(f"Bad rows skipped: {report.bad_rows['count']}")
    return "\n\n".join(blocks)


#: How each document method's row is cited (:data:`mirage.scoring.xor_methods.METHOD_RULES`).
METHOD_RULE_NAMES = {"ex": "per answer", "cal": "threshold for F1", "cal_agreement": "threshold for agreement"}
#: The measures a document method's row shows, averaged over the languages.
METHOD_MEASURES = ("agreement", "f1", "balanced_accuracy", "roc_auc")


@dataclass(frozen=True)
class MethodRow:
    """One document method's row under one rule (``--methods``): its measures averaged over the languages, and the
    method's mean passes (forward, forward-mode and backward) and seconds per test answer."""

    method: str
    rule: str
    averages: dict[str, float | None]
    passes: float
    seconds: float | None

    @property
    def label(self) -> str:
        return METHOD_RULE_NAMES[self.rule]


def classifier_settings(report: XorAttriQAReport) -> list[str]:
    """The rows of the classifiers fitted with document methods' scores among their features
    (``--classifier-methods``: ``learned+SET``), in the report's order."""
    return [name for name in report.agreement if name.startswith("learned+")]


def methods_table_rows(report: XorAttriQAReport) -> list[MethodRow]:
    """Every document method's rows of ``report``, method by method in the report's order, rule by rule."""
    out = []
    for name, entry in (report.methods or {}).items():
        cost = entry.get("cost", {})
        passes = sum(cost.get(k, 0.0) for k in ("forward_passes", "jvp_passes", "backward_passes"))
        for rule in METHOD_RULE_NAMES:
            setting = f"{name}@{rule}"
            if setting in report.agreement:
                out.append(MethodRow(method=name, rule=rule, passes=passes, seconds=cost.get("seconds"),
                                     averages={m: getattr(report, m)[setting].get("avg") for m in METHOD_MEASURES}))
    return out


def methods_table(report: XorAttriQAReport) -> str:
    """The document methods' rows (``--methods``) beside the strongest baselines, averaged over languages, with
    each method's cost per answer: one line per method and rule."""
    header = ["", "agree", "F1", "bal.acc", "ROC-AUC", "passes", "s/answer"]
    rows = []
    for setting in ("learned", *classifier_settings(report), "nli_orig", "nli_mt", "cal_top3", "ex_top3", "cite_none"):
        if setting in report.agreement:
            rows.append([SETTING_NAMES.get(setting, setting),
                         *[fmt_number(getattr(report, m).get(setting, {}).get("avg"), 3 if m == "roc_auc" else 1)
                           for m in METHOD_MEASURES], "", ""])
    for row in methods_table_rows(report):
        rows.append([f"{row.method}, {row.label}",
                     *[fmt_number(row.averages[m], 3 if m == "roc_auc" else 1) for m in METHOD_MEASURES],
                     fmt_number(row.passes, 1), fmt_number(row.seconds, 3)])
    return grid("Document attribution methods (--methods; averages over languages; cost: mean passes and seconds "
                "per test answer)", header, rows)


def faithfulness_table(report: XorAttriQAReport) -> str:
    """Each document method's faithfulness (:func:`mirage.scoring.xor_methods.method_faithfulness`): rank agreement
    with exact Shapley values and leave-one-out of the same model, and the answer's log-probability change when its
    top passage is dropped or kept alone, beside a random passage's."""
    header = ["", "answers", "rho Shapley", "top-1 Shapley %", "rho LOO", "top-1 LOO %", "drop top-1",
              "drop random", "keep top-1", "keep random"]
    rows = []
    for name, entry in (report.methods or {}).items():
        f = entry.get("faithfulness")
        if not f:
            continue
        rows.append([name, fmt_number(f.get("answers")),
                     fmt_number(f["spearman"].get("shapley"), 2), fmt_number(f["top1"].get("shapley"), 1),
                     fmt_number(f["spearman"].get("leave_one_out"), 2), fmt_number(f["top1"].get("leave_one_out"), 1),
                     *[fmt_number(f.get(k), 3) for k in ("drop_top1", "drop_random", "keep_top1", "keep_random")]])
    return grid("Faithfulness of the document methods, on the answers with 2+ passages\n"
                "rho: Spearman with the same model's exact Shapley values / leave-one-out (LOO); top-1: the method's "
                "top passage is theirs\ndrop: how far the answer's mean token log-probability (nats) falls with the "
                "method's top passage removed; keep: its change with that passage alone (against every passage); "
                "each beside a random passage's",
                header, rows)


ELI5_ROWS = {
    "answers": "answers",
    "sentences": "sentences",
    "no_citation_sentences_pct": "sentences with no citation (%)",
    "no_citation_answers_pct": "answers with no citation (%)",
    "citations_per_sentence": "citations per sentence",
    "citation_recall": "ALCE citation recall (%)",
    "citation_precision": "ALCE citation precision (%)",
    "citation_f1": "ALCE citation F1 (%)",
}
#: :class:`~mirage.scoring.metrics.CitationSetAgreement` of self-citation (a) and MIRAGE (b): a sentence that a side
#: leaves uncited is counted as such, never as agreeing; the agreement figures are over the sentences both cite.
AGREEMENT_ROWS = {
    "neither": "sentences neither cites",
    "only_a": "sentences only self-citation cites",
    "only_b": "sentences only MIRAGE cites",
    "both": "sentences both cite",
    "both_same_set": "of those both cite: same citation set (%)",
    "both_jaccard": "of those both cite: mean Jaccard of the sets (%)",
    "both_pair_agreement": "of those both cite: (sentence, document) pairs agreeing (%)",
}
#: What results written before the split reported (over every sentence, so a sentence neither side cites counted
#: as agreeing): shown for those results, under names that say so.
LEGACY_AGREEMENT_ROWS = {
    "exact_match": "same citation set, uncited sentences counted as agreeing (% of sentences)",
    "jaccard": "mean Jaccard, two empty sets counted as 1 (%)",
    "pair_agreement": "(sentence, document) pairs agreeing, uncited sentences included (%)",
}


def eli5_table(report: ELI5Report) -> str:
    """Self-citation beside MIRAGE (mean over seeds, ± standard deviation with several seeds)."""
    n_seeds = len(report.per_seed)

    def cell(block: str, name: str) -> str:
        value = report.mean[block].get(name)
        if name in ("answers", "sentences", *list(AGREEMENT_ROWS)[:4]) and isinstance(value, float) \
                and value.is_integer():
            value = int(value)
        text = fmt_number(value, 2 if name == "citations_per_sentence" else 1)
        if n_seeds > 1 and value is not None and report.std[block].get(name) is not None:
            text += f" ± {report.std[block][name]:.1f}"
        return text

    rows = [[label, cell("self", name), cell("mirage", name)] for name, label in ELI5_ROWS.items()
            if name in report.mean["self"]]
    seeds = ", ".join(report.per_seed)
    out = [grid(f"Citations over {n_seeds} seed(s) ({seeds})", ["", "self-citation", "MIRAGE"], rows)]
    out.append(grid("Agreement between the two citation sets", ["", "value"],
                    [[label, cell("agreement", name)] for name, label in
                     (AGREEMENT_ROWS | LEGACY_AGREEMENT_ROWS).items() if name in report.mean["agreement"]]))
    out.append(f"NLI judge: {report.judge or 'none (give --nli MODEL for ALCE citation quality)'}")
    out.append(f"Bad rows skipped: {report.bad_rows['count']}")
    return "\n\n".join(out)
