"""mirage's settings beside ContextCite and the NLI judges on the same XOR-AttriQA items, from stored runs.

    python benchmarks/xor_attriqa_peers.py RUN_DIR --contextcite CC_DIR \\
        --data fi.jsonl ru.jsonl --calibrate-on train.jsonl val.jsonl [--text en] [-o RUN_DIR/peers]

``RUN_DIR`` is a ``mirage score xor-attriqa`` output folder (its ``scores.jsonl``), ``CC_DIR`` a
``benchmarks/contextcite_xor.py`` output folder over the test and calibration files, on the same model and view. The
comparison is on the test items both scored (ContextCite may have run on a subset); nothing runs a model. Settings:

- every mirage setting of ``results.json``, recomputed on those items (calibrated, and the learned classifier
  fitted, on the calibration items, as the scorer does);
- ``contextcite_ex``: passages whose ContextCite score is positive and at least the item's mean + 1 std (the
  example-level rule MIRAGE-EX applies to CTI); ``contextcite_cal_agreement`` / ``contextcite_cal_f1``: one global
  threshold on the score, chosen on the calibration items to maximise agreement (MIRAGE-CAL's rule) or F1 (the
  learned classifier's rule); ROC-AUC from the raw scores;
- the NLI baselines and the trivial citers;
- ``*_content``: MIRAGE-EX (and, where the stored rows allow, MIRAGE-CAL) in the content-only view, attributing
  to passage text only, not the template's scaffolding (``Document [1]:``, newlines).

Writes ``peers.json`` (metric → setting → language → value, with counts and the ContextCite settings) and
``pairs.jsonl`` (one line per test pair: label, learned probability, passage score, ContextCite score, NLI
predictions; what the notebook's ROC curves read), and prints the table.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from harness import Text, main, text_arg

from mirage.config import MirageConfig
from mirage.likelihood.classifier import LearnedModel, best_threshold
from mirage.options import cli_arg
from mirage.peers.contextcite import STORE_NAME, contextcite_scores
from mirage.runs.store import read_records
from mirage.scoring.tables import SETTING_NAMES, grid, xor_metrics
from mirage.scoring.xor_attriqa import scores_from_records
from mirage.scoring.xor_classifier import pair_scores
from mirage.scoring.xor_data import XorItem, concat_data, load_xor_attriqa
from mirage.scoring.xor_eval import RowsNeeded, evaluate, per_language

PEER_NAMES = {**{f"{k}_content": f"{v}, content only" for k, v in SETTING_NAMES.items()},
              "contextcite_ex": "ContextCite EX-style", "contextcite_cal_agreement": "ContextCite CAL (agreement)",
              "contextcite_cal_f1": "ContextCite CAL (F1)"}


def ex_rule(scores: Sequence[float]) -> list[bool]:
    """Positive and at least mean + 1 sample std of the item's scores (all positive ones for one or two passages
    of equal score)."""
    if len(scores) < 2:
        return [s > 0 for s in scores]
    cut = statistics.mean(scores) + statistics.stdev(scores)
    return [s > 0 and s >= cut - 1e-12 for s in scores]


def peer_rows(items: Sequence[XorItem], cc: dict[str, list[float]], rule) -> list:
    return [(item.lang, rule(cc[item.key]), list(item.labels), list(cc[item.key])) for item in items if item.key in cc]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    run_dir: str = cli_arg(flag="run_dir", help="a mirage score xor-attriqa run folder (scores.jsonl, results.json)")
    contextcite: str | None = cli_arg(None, flag="--contextcite", help="folder of benchmarks/contextcite_xor.py's "
                                      "output (without it: mirage's settings and the NLI judges only)")
    data: tuple[str, ...] = cli_arg(flag="--data", help="the test files (XOR-AttriQA JSONL)")
    calibrate_on: tuple[str, ...] = cli_arg(flag="--calibrate-on", help="the calibration files (XOR-AttriQA JSONL)")
    text: Text = text_arg()
    output: str | None = cli_arg(None, flag="--output", aliases=("-o",), help="output folder (default RUN_DIR/peers)")


def run(args: Options) -> int:
    folder = Path(args.run_dir)
    out = Path(args.output) if args.output else folder / "peers"
    out.mkdir(parents=True, exist_ok=True)
    scores = scores_from_records(read_records(folder / "scores.jsonl"))
    cc_records = read_records(Path(args.contextcite) / STORE_NAME) if args.contextcite else []
    cc = contextcite_scores(cc_records)
    test = concat_data(load_xor_attriqa(p, text=args.text) for p in args.data).items
    cal = concat_data(load_xor_attriqa(p, text=args.text) for p in args.calibrate_on).items
    both = [i for i in test if (i.key in cc or not args.contextcite) and i.key in scores]
    cal_both = [i for i in cal if i.key in cc and i.key in scores]
    stored = json.loads((folder / "results.json").read_text())
    cfg = MirageConfig.from_dict(stored["settings"]["config"])
    groups = stored["settings"].get("groups") or ("ex", "cal", "learned")
    report = evaluate(both, scores, config=cfg, calibration_items=[i for i in cal if i.key in scores],
                      calibrate_by=stored["settings"].get("calibrate_by", "global"), groups=groups)
    langs = report.languages
    titles = xor_metrics()
    tables = {metric: dict(report.metric_table(metric)) for metric in titles}

    if "ex" in groups:  # the content-only view (#16): attributing to passage text only, not the scaffolding
        try:
            content = evaluate(both, scores, config=cfg, calibration_items=[i for i in cal if i.key in scores],
                               calibrate_by=stored["settings"].get("calibrate_by", "global"), learned=False,
                               context="content", groups=groups)
            content_settings = [s for s in ("ex_top3", "ex_top5pct", "cal_top3", "cal_top5pct") if s in content.f1]
        except RowsNeeded:  # its calibration would reach rows the run did not compute: the example-level ones only
            content = evaluate(both, scores, config=cfg, learned=False, context="content", groups=("ex",))
            content_settings = ["ex_top3", "ex_top5pct"]
        for metric in titles:
            for setting in content_settings:
                tables[metric][f"{setting}_content"] = content.metric_table(metric)[setting]

    if cc:
        cal_values = [v for i in cal_both for v in cc[i.key]]
        cal_labels = [y for i in cal_both for y in i.labels]
        t_agree, _ = best_threshold(cal_values, cal_labels, "agreement")
        t_f1, _ = best_threshold(cal_values, cal_labels, "f1")
        rules = {"contextcite_ex": ex_rule,
                 "contextcite_cal_agreement": lambda s: [v >= t_agree for v in s],
                 "contextcite_cal_f1": lambda s: [v >= t_f1 for v in s]}
        for name, rule in rules.items():
            per = per_language(peer_rows(both, cc, rule), langs)
            for metric in titles:
                tables[metric][name] = per[metric]

    features = report.features or {}
    model = LearnedModel.from_dict(features["learned"]) if features.get("learned") else None
    pairs = pair_scores(both, scores, config=cfg, model=model)
    by_item = {i.key: i for i in both}
    cc_seconds = {r["key"]: r.get("seconds") for r in cc_records if "scores" in r}
    for row in pairs:
        item = by_item[row["key"]]
        if cc:
            row["contextcite"] = cc[row["key"]][row["passage"]]
        for nli, preds in item.nli.items():
            row[nli] = bool(preds[row["passage"]])
    with (out / "pairs.jsonl").open("w", encoding="utf-8") as fh:
        for row in pairs:
            fh.write(json.dumps(row) + "\n")
    result = {"items": len(both), "calibration_items": len(cal_both), "counts": report.counts,
              "contextcite": {"thresholds": {"agreement": t_agree, "f1": t_f1},
                              "seconds_per_item": statistics.median(v for k, v in cc_seconds.items()
                                                                    if k in by_item and v is not None)}
              if cc else None,
              **tables}
    (out / "peers.json").write_text(json.dumps(result, indent=2) + "\n")
    names = {**SETTING_NAMES, **PEER_NAMES}
    for metric, title in titles.items():
        digits = 3 if metric == "roc_auc" else 1
        rows = [[names.get(s, s), *[("-" if v.get(lang) is None else f"{v[lang]:.{digits}f}")
                                    for lang in [*langs, "avg"]]] for s, v in tables[metric].items()]
        print(grid(f"{title} — {len(both)} items", ["", *langs, "avg"], rows), end="\n\n")
    print(f"wrote {out / 'peers.json'} and {out / 'pairs.jsonl'}")
    return 0


if __name__ == "__main__":
    main(Options, run)
