"""Which CCI method ranks passages best: saliency, input × gradient and integrated gradients, compared as passage
scores on the calibration splits only.

    python benchmarks/cci_methods.py SCORES --calibrate-on xor-attriqa-match:train,val (or files) --model NAME
        [--text en]
        --store ROWS.jsonl [--methods saliency input_x_gradient integrated_gradients] [--ig-steps 8]
        (``--methods`` also takes attention_last, attention_all, rollout, attnlrp: the CCI step's other methods)
        [--limit N] [-o OUT.json]

``SCORES`` is a ``mirage score xor-attriqa`` store holding the calibration items' CTI scores and passage signals
(the shipped ``scores.jsonl.gz`` of a view, with the ``run.json`` beside it that says its prompt). For every calibration
item with two passages or more (the first ``--limit``), each method's CCI rows of the tokens MIRAGE-EX selects are
computed into ``ROWS.METHOD.jsonl`` (:func:`mirage.scoring.xor_attriqa.method_rows`: resumable, one store per method and
settings: a re-run computes only what is missing; ``SCORES`` is never written),
with the method's seconds per item. Then, on the items where every method has the rows of the tokens that the
stored CTI scores select (an item whose recomputed selection differs is left out and counted):

- each CCI aggregation of :mod:`mirage.likelihood.features` (``ex_*``, ``content_*``) alone, per method: its ROC-AUC
  against the human labels (does the method's saliency rank the supporting passage first?);
- the default learned features with each method's CCI family added, fitted exactly as ``--settings learned`` fits
  its classifier (:func:`mirage.likelihood.classifier.fit_learned`) and scored out of fold (item-grouped 5-fold, as
  ``benchmarks/learned_features.py``), beside the default features alone on the same passages.

No test row is read.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from harness import Text, limit_arg, main, model_arg, text_arg

from benchmarks.learned_features import ONLY, fit_feature_set
from mirage.attribution.cci import CONTEXT_DOCUMENT_METHODS
from mirage.attribution.cti import select_tokens
from mirage.config import CTIConfig
from mirage.data.fetch import resolve_files
from mirage.likelihood.features import CCI_FEATURES
from mirage.options import cli_arg
from mirage.runs.progress import terminal_progress
from mirage.runs.store import read_records, write_atomic
from mirage.scoring.benchmarks import stored_xor_pipeline
from mirage.scoring.xor_attriqa import ItemScores, method_rows, scores_from_records
from mirage.scoring.xor_classifier import passage_features
from mirage.scoring.xor_data import XorItem, concat_data, load_xor_attriqa

#: Run by default; ``--methods`` also takes the document methods that serve as the CCI step
#: (``CONTEXT_DOCUMENT_METHODS``: their rows of the same MIRAGE-EX tokens, :mod:`mirage.attribution.methods.as_cci`).
METHODS = ("saliency", "input_x_gradient", "integrated_gradients")


def with_rows(scores: ItemScores, rows: dict[int, list[float]]) -> ItemScores:
    """``scores`` (CTI, passages, signals) with these CCI rows instead of its own."""
    return dataclasses.replace(scores, cci=dict(rows))


def compare(items: Sequence[XorItem], base: dict[str, ItemScores], by_method: dict[str, dict[str, dict]]) -> dict:
    """Single-feature ROC-AUC of each method's CCI aggregations, and the out-of-fold fit of the default features with
    each method's CCI family added, on the items every method has."""
    from sklearn.metrics import roc_auc_score

    ex = CTIConfig(selector="std")

    def covered(item: XorItem) -> bool:  # every method has the rows of the tokens the stored CTI selects
        wanted = set(select_tokens(base[item.key].cti, ex)[0])
        return all(item.key in rows and wanted <= set(rows[item.key]["rows"]) for rows in by_method.values())

    scored = [item for item in items if item.key in base]
    common = [item for item in scored if covered(item)]
    out: dict = {"n_items": len(common), "n_passages": sum(len(item.labels) for item in common),
                 "n_items_left_out": len(scored) - len(common), "methods": {}}
    for method, rows in by_method.items():
        feats = [(item, passage_features(with_rows(base[item.key], rows[item.key]["rows"]), cti=ex))
                 for item in common]
        y = [lab for item, _f in feats for lab in item.labels]
        single = {}
        for name in CCI_FEATURES:
            x = [f[name] for _item, fs in feats for f in fs]
            single[name] = float(roc_auc_score(y, x)) if len(set(y)) == 2 else None
        with_cci = fit_feature_set(feats, (*ONLY, *CCI_FEATURES))
        seconds = sorted(rows[item.key]["seconds"] for item in common)
        out["methods"][method] = {
            "single_feature_roc_auc": single,
            "best_single": max(single.items(), key=lambda kv: kv[1] or 0.0),
            "default_plus_cci": {k: v for k, v in with_cci.items() if k != "coefficients"},
            "cci_rows": sum(rows[item.key]["n_rows"] for item in common),
            "median_seconds_per_item": seconds[len(seconds) // 2] if seconds else None,
            "total_seconds": sum(seconds),
        }
    default = fit_feature_set([(item, passage_features(base[item.key], cti=ex)) for item in common], ONLY)
    out["default"] = {k: v for k, v in default.items() if k != "coefficients"}
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    scores: Path = cli_arg(flag="scores", type=Path,
                           help="scores.jsonl or scores.jsonl.gz of a mirage score xor-attriqa run")
    calibrate_on: tuple[Path, ...] = cli_arg(flag="--calibrate-on", type=Path, help="train/val files or a dataset "
                                             "name, e.g. xor-attriqa-match:train,val (never fi/ru)")
    model: str = model_arg(dataclasses.MISSING, help="the model SCORES was computed with")
    text: Text = text_arg()
    store: Path = cli_arg(flag="--store", type=Path, help="where each method's rows go (one file per method)")
    methods: tuple[str, ...] = cli_arg(METHODS, flag="--methods", choices=METHODS + CONTEXT_DOCUMENT_METHODS,
                                       help="the CCI methods compared")
    ig_steps: int = cli_arg(8, flag="--ig-steps", metavar="N", help="integrated gradients' steps (mirage's own: 16)")
    limit: int | None = limit_arg(help="the first N calibration items with two passages or more")
    output: Path | None = cli_arg(None, flag="--output", aliases=("-o",), type=Path, help="the JSON file to write")


def run(args: Options) -> int:
    items = concat_data(load_xor_attriqa(p, text=args.text) for p in resolve_files(args.calibrate_on)).items
    base = scores_from_records(read_records(args.scores))
    multi = [item for item in items if item.key in base and base[item.key].n_docs > 1]
    multi = multi[: args.limit] if args.limit else multi
    config = stored_xor_pipeline(args.scores, args.model)  # the rows are computed as the store's own were
    by_method = {m: method_rows(multi, args.store, model=args.model, text=args.text, config=config, method=m,
                                ig_steps=args.ig_steps, progress=terminal_progress) for m in args.methods}
    result = {"model": args.model, "text": args.text, "ig_steps": args.ig_steps, "limit": args.limit,
              **compare(multi, base, by_method)}
    d = result["default"]
    print(f"{result['n_items']} calibration items with 2+ passages ({result['n_passages']} passages); out-of-fold "
          f"(item-grouped 5-fold): default features ROC-AUC {d['oof_roc_auc']:.3f}, F1 {d['f1']:.1f}")
    print(f"{'method':22s} {'best CCI feature':28s} {'ROC-AUC':>7s}  {'default+CCI':>11s} {'F1':>5s}  s/item")
    for m, r in result["methods"].items():
        name, auc = r["best_single"]
        print(f"{m:22s} {name:28s} {auc:7.3f}  {r['default_plus_cci']['oof_roc_auc']:11.3f} "
              f"{r['default_plus_cci']['f1']:5.1f}  {r['median_seconds_per_item']:.1f}")
    if args.output:
        write_atomic(args.output, json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    main(Options, run)
